"""The report's text renders without a docutils system message: its first page (report/workflow.rst,
with and without the answer in front) and every caption, for the demo, for a study with every
optional section on, and for a study of one backend, one seed and one GPU count.

Rendered as Snakemake 9's report renders them (snakemake/report/__init__.py): Jinja2 with
trim_blocks and lstrip_blocks over the text plus the report's link targets, then docutils'
publish_parts to HTML. A "System Message" in the HTML is what a reader would see on the page.
"""

from __future__ import annotations

import copy
import re
import textwrap
from html import unescape
from pathlib import Path

import pytest
import yaml
from docutils.core import publish_parts
from jinja2 import Environment
from scalebench import config as sb_config
from scalebench.report import landing

# Snakemake 9.27 calls publish_parts(writer_name=...), which docutils will rename
pytestmark = [pytest.mark.unit, pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")]

REPO = Path(__file__).resolve().parents[3]
# Snakemake appends these link targets to every text it renders (its categories and files)
RST_LINKS = textwrap.dedent("""

.. _Workflow: javascript:show_panel('workflow')
.. _Statistics: javascript:show_panel('statistics')
{% for cat, catresults in categories|dictsort %}
.. _{{ cat }}: javascript:app.showCategory('{{ cat|urlencode }}')
{% endfor %}
""")
CATEGORIES = {"Scaling": {}, "Quality": {}, "Tables": {}, "Completeness": {}}


def validated(**changes) -> dict:
    schema = sb_config.load_schema(REPO / "config" / "schema.yaml")
    study = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            study.setdefault(section, {})[name] = value
        else:
            study[section] = value
    return sb_config.validate(study, schema)


def every_section_on() -> dict:
    study = validated(
        matrix__model_width=[1, 4],
        matrix__seeds=[1],
        training__steps_per_epoch=20,
        training__stop_at_target=True,
        compare__baseline="../before/results",
        partial=True,
    )
    study = copy.deepcopy(study)
    study["legacy"] = [{"label": "paper_2023", "framework": "torch"}]  # only its label is printed
    return study


STUDIES = {
    "demo": lambda: validated(),
    "every optional section": every_section_on,
    "no validation during training": lambda: validated(training__eval_every=0),
    "one backend, one seed, one GPU count": lambda: validated(
        matrix__backends=["native"], matrix__seeds=[1], matrix__gpus=[1]
    ),
}

FACTS = {
    "frameworks": [
        {
            "sentences": [
                "torch at 2 GPUs: horovod (batch8_bf16) is the fastest, at a parallel efficiency of 0.88, "
                "95% interval 0.81-0.95 against 1 GPU (3 seeds).",
                "Against native: no difference the seeds can show (n = 3).",
                "Its largest loss: exposed communication costs 21% of the 2-GPU epoch (0.1 s of 0.48 s; ideal 0.4 s).",
            ]
        }
    ],
    "notes": ["1 of 9 cells did not finish with status ok and are not in the answer."],
}


def render(text: str, study: dict) -> str:
    class Snakemake:
        config = study

    env = Environment(trim_blocks=True, lstrip_blocks=True)
    rst = env.from_string(text + RST_LINKS).render(snakemake=Snakemake, categories=CATEGORIES, files=[])
    return publish_parts(rst, writer_name="html")["html_body"]  # docutils' defaults, as Snakemake


def report_pages() -> dict[str, str]:
    """The report's texts: its first page, with and without the answer in front, and every caption."""
    template = (REPO / "report" / "workflow.rst").read_text()
    pages = {"workflow.rst": template, "with the answer": landing.landing_page(template, FACTS)}
    return pages | {path.name: path.read_text() for path in sorted((REPO / "report").glob("*.rst"))}


@pytest.mark.parametrize("name", STUDIES)
def test_the_first_page_and_every_caption_render_without_a_system_message(name):
    study = STUDIES[name]()
    for page, text in report_pages().items():
        html = render(text, study)
        assert "System Message" not in html, f"{page} ({name}):\n{html[html.find('System Message') - 300 :][:1500]}"


def test_the_answer_leads_the_first_page_and_its_words_are_not_read_as_markup():
    html = render(landing.landing_page((REPO / "report" / "workflow.rst").read_text(), FACTS), validated())
    answer, study = html.index("The answer"), html.index("The study")
    assert answer < study < html.index("Backends:")
    assert "horovod (batch8_bf16) is the fastest" in html  # the underscore is text, not a link
    assert "no difference the seeds can show (n = 3)" in html


def test_a_report_text_without_the_marker_is_refused_naming_it():
    with pytest.raises(ValueError, match="the answer"):
        landing.landing_page("Title\n=====\n", FACTS)


def test_slow_nodes_and_their_rerun_command_lead_the_page_with_the_command_as_printed():
    command = 'cd /work/my_study && snakemake --config \'cluster={"exclude": ["gpu_07"]}\' --force -- a.jsonl'
    hosts = {"sentences": ["Host gpu_07 is slower than the others: compute slower by 9% (6-12%) in 14 cells."]}
    facts = FACTS | {"hosts": hosts | {"slow_nodes": ["gpu_07"], "rerun": command}}
    html = render(landing.landing_page((REPO / "report" / "workflow.rst").read_text(), facts), validated())
    assert "System Message" not in html
    assert html.index("Host gpu_07 is slower") < html.index("The study")
    block = html[html.index('<pre class="literal-block">') + len('<pre class="literal-block">') :]
    assert unescape(block[: block.index("</pre>")]).strip() == command  # the command as printed, not markup


def test_the_study_says_its_seeds_in_either_form():
    """A list of seeds is listed; matrix.seeds {initial, max} says what the rounds may add (the demo's)."""
    template = (REPO / "report" / "workflow.rst").read_text()
    adaptive = " ".join(render(template, validated(matrix__seeds={"initial": 2, "max": 3})).split())
    assert "seeds 1 to 2 of every cell, then up to 3 where a verdict the answer rests on was still open" in adaptive
    listed = " ".join(render(template, validated(matrix__seeds=[1, 4])).split())
    assert "GPUs (ranks), seeds 1, 4." in listed


def test_the_frameworks_compared_on_each_backend_follow_the_frameworks_on_the_first_page():
    said = "On native at 2 GPUs, torch against tensorflow: faster by 40% (31-50%; n = 3)."
    html = render(
        landing.landing_page((REPO / "report" / "workflow.rst").read_text(), FACTS | {"frameworks_sentences": [said]}),
        validated(),
    )
    assert html.index("Against native") < html.index("On native at 2 GPUs") < html.index("The study")


# Words the report's prose must not use: each was the code's word once and is no longer (the study's
# text names a setting by its config key).
RETIRED = {
    "scaled by the rule": "training.lr_scaling is a scaling, named by its key",
}
# a sentence's end glued to the next one's start ("TensorFlow).Horovod"): a lower-case letter or a
# closing bracket, a full stop, then a capitalised word (a version, a file name or "e.g." do not match)
GLUED = re.compile(r"[a-z)\]*]\.[A-Z][a-z]")


@pytest.mark.parametrize("name", STUDIES)
def test_the_prose_has_no_glued_sentences_and_no_retired_words(name):
    study = STUDIES[name]()
    for page, text in report_pages().items():
        prose = " ".join(unescape(re.sub(r"<[^>]+>", " ", render(text, study))).split())
        prose = re.sub(r"\s+([.,;:)])", r"\1", prose)  # the spaces the tags left before punctuation
        glued = GLUED.search(prose)
        assert not glued, f"{page} ({name}): {prose[max(0, glued.start() - 80) : glued.end() + 80]}"
        for words, why in RETIRED.items():
            assert words not in prose, f"{page} ({name}): '{words}' ({why})"
