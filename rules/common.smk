# Helpers only (no rules): the config's validation, the study's plan and the pure input, params
# and resource functions that read it. The plan (scalebench/config/plan.py) is built once per start
# by scalebench/config/planning.py, the one place where planning writes files or asks SLURM.
import dataclasses
import json
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

SCRIPTS = Path(workflow.basedir) / "workflow" / "scripts"
sys.path.insert(0, str(SCRIPTS))

from scalebench import cell as sb_cell
from scalebench import config as sb_config
from scalebench import rerun as sb_rerun
from scalebench.analysis import baseline_tables as sb_baseline
from scalebench.analysis import round_outlook as sb_round_outlook
from scalebench.config import bill as sb_bill
from scalebench.config import local_gpus as sb_local_gpus
from scalebench.config import plan as sb_plan
from scalebench.config import planning as sb_planning
from scalebench.config import resources as sb_resources
from scalebench.config import seeds as sb_seeds
from scalebench.data import keys as sb_keys
from scalebench.report import figures as sb_figures


def validate():
    """The study (config/plan.py: Study): the config validated against config/schema.yaml and the
    checks across keys, its matrix expanded once; a baseline that cannot be compared is refused too,
    naming the key. Like snakemake.utils.validate it fills `config` with the schema's defaults, which
    the rules read; it also converts the strings of --config (partial=true, matrix={"gpus": [1, 2]})
    to the schema's types: Snakemake reads values inside a structure as strings."""
    schema = sb_config.load_schema(Path(workflow.basedir) / "config" / "schema.yaml")
    try:
        study = sb_plan.Study.validate(config, schema, folders=workflow.is_main_process)
    except sb_config.ConfigError as error:
        raise WorkflowError(str(error)) from None
    folder = study.config["compare"]["baseline"]
    # the folders other keys name are checked where they are read: in the process the user started
    problem = (
        sb_baseline.baseline_problem(folder)
        if folder is not None and workflow.is_main_process
        else None
    )
    if problem:
        raise WorkflowError(problem)
    config.clear()
    config.update(study.config)
    return study


STUDY = validate()
RUNS = sb_cell.RUNS_PATTERN
RUNS_VARIANT = sb_cell.RUNS_VARIANT_PATTERN
# Keyed by the settings that make them: another study's dataset settings prepare
# beside these arrays, never over them (scalebench/data/keys.py).
PREPARED = f"results/data/prepared/{sb_keys.prepared_key(config['dataset'])}"
SYNTHETIC_RAW = f"results/data/raw/{sb_keys.synthetic_key(config['dataset']['synthetic'])}"
ZENODO_RAW = f"results/data/raw/{sb_keys.zenodo_key(config['dataset']['zenodo']['record'])}"
ANALYSIS_STAMP = sb_planning.ANALYSIS_STAMP


wildcard_constraints:
    framework="|".join(sb_config.FRAMEWORKS),
    backend="|".join(sb_config.BACKENDS),
    gpus=r"\d+",
    seed=r"\d+",
    round=r"\d+",
    variant=sb_cell.VARIANT_REGEX,


# --- the bill and the plan: built once, by rules/train.smk once the train rule exists (BILL, PLAN)


def study_bill():
    """The bill (config/bill.py: each cell's verdict and predicted run, its time limit), read before
    anything acts: the train rule's resources read it, the SLURM pre-flight among them."""
    return sb_planning.bill_study(STUDY, this_start())


def study_plan():
    """The study's plan (config/planning.py: plan_study, which also does what planning does to the
    world, in the process the user started; a job's own Snakemake plans nothing)."""
    try:
        return sb_planning.plan_study(STUDY, this_start(), BILL)
    except sb_plan.PlanError as error:
        raise WorkflowError(str(error)) from None


def this_start():
    """This Snakemake start as planning needs it: plain values, and what only Snakemake can do."""
    settings = workflow.resource_settings
    return sb_planning.Start(
        main_process=workflow.is_main_process,
        argv=tuple(sys.argv),
        basedir=workflow.basedir,
        configfiles=tuple(str(path) for path in workflow.config_settings.configfiles),
        snakefile=str(Path(workflow.main_snakefile).absolute()),
        declared_gpus=workflow.global_resources.get(sb_local_gpus.RESOURCE).value,
        cores_without_nodes=settings.nodes is None and settings.cores is not None,
        register_gpus=register_local_gpus,
        train_resources=train_job_resources,
        round_outlook=sb_round_outlook.chances,
    )


def register_local_gpus(count):
    """A local run's GPUs as the scheduler's limit of what the running cells hold (config/local_gpus.py)."""
    workflow.register_resource(sb_local_gpus.RESOURCE, count)


def train_job_resources(cell):
    """A cell's train job's resources as the SLURM plugin submits it at its first attempt (the rule's,
    with --default-resources and --set-resources), and its threads: the pre-flight's request. The
    GPUs a cell holds on this machine are no SLURM resource (and read the plan, still in the making).
    """
    train_rule = workflow.get_rule("train_variant" if cell.variant else "train")
    wildcards = {key: str(value) for key, value in cell.key().items() if key != "variant" or value}
    resources = train_rule.expand_resources(
        wildcards, [], 1, skip_evaluation={sb_local_gpus.RESOURCE}
    )
    return resources, resources["_cores"]


def asked(question, *values):
    """The plan's answer, its refusal (PlanError) as Snakemake's error."""
    try:
        return question(*values)
    except sb_plan.PlanError as error:
        raise WorkflowError(str(error)) from None


def wildcard_values(wildcards):
    return (
        wildcards.framework,
        wildcards.backend,
        wildcards.gpus,
        wildcards.seed,
        getattr(wildcards, "variant", ""),
    )


def cell_of(wildcards):
    """The cell of a train job; a cell the plan leaves out is refused before submission."""
    return asked(PLAN.cell_of, *wildcard_values(wildcards))


def study_cell(wildcards):
    """The cell of a train job's resources, refused where the config leaves it out: the SLURM
    pre-flight evaluates them while the plan is in the making (cell_of refuses the rest)."""
    return asked(STUDY.cell_of, *wildcard_values(wildcards))


# --- the rounds of matrix.seeds {initial, max} (rules/rounds.smk; config/seeds.py)


def round_read(number):
    """The cells round `number` reads: the plan's first cells for round 1, else those the round before
    read and added, from its file (a checkpoint's output: until it exists Snakemake schedules it and
    asks again). The round's inputs and its script both read them from here."""
    if number == 1:
        return list(PLAN.cells)
    return asked(PLAN.round_cells_of, round_record(number - 1).next_cells)


def round_record(number):
    """Round `number`'s file, read (planning removed an unreadable one: its checkpoint decides it again)."""
    found = checkpoints.seed_round.get(round=number).output[0]
    try:
        return sb_seeds.read_round(found)
    except sb_seeds.RoundFileError as error:
        raise WorkflowError(f"{error}; remove it to decide the round again") from None


def round_read_json(wildcards):
    """The keys of the cells round `wildcards.round` reads (config/seeds.py ROUND_KEYS), for its script."""
    return PLAN.keys_json(round_read(int(wildcards.round)))


def round_inputs(wildcards):
    """A round's inputs: the records of the cells it reads, the round before's file and the stamp of
    what decides the rounds (a changed one decides them again, from the same records)."""
    number = int(wildcards.round)
    cells = round_read(number)
    before = {"previous": sb_seeds.round_file(number - 1)} if number > 1 else {}
    return {
        "metrics": [f"{cell.folder}/metrics.jsonl" for cell in cells],
        "runs": [f"{cell.folder}/run.json" for cell in cells],
        "stamp": sb_seeds.ROUNDS_STAMP,
        **before,
    }


def last_round():
    """The number of the round that adds nothing, walking the rounds' checkpoints from the first. Each
    round adds a cell or is the last, and a cell is added once, so the walk ends."""
    for number in range(1, len(PLAN.round_cells) + 2):
        if not round_record(number).adds:
            return number
    raise WorkflowError(
        f"the rounds of matrix.seeds add more cells than the {len(PLAN.round_cells)} they can; "
        f"remove {sb_seeds.ROUNDS_FOLDER}/ to decide them again"
    )


def rounds_walked():
    """Whether the analysis waits for the rounds: matrix.seeds {initial, max}, unless the report is
    to show what exists (partial: the analysis keeps the cells the rounds added, from their records).
    """
    return STUDY.seed_rule.adaptive and not config["partial"]


def last_round_file(wildcards):
    """The last round's file (none without rounds): the analysis starts again when the rounds change."""
    return [sb_seeds.round_file(last_round())] if rounds_walked() else []


def rounds_rules_json():
    """What the rounds decide by (config/seeds.py Rules), or null for a list of seeds."""
    return sb_seeds.Rules.json_of(config)


# --- analysis helpers (rules/analysis.smk)


def analysis_cell_outputs(name):
    """Every cell's output, or with `partial: true` only those of the cells that finished. Snakemake
    evaluates this when it builds the DAG, so with the switch the cells that are missing or failed
    are not in the DAG (nothing reruns them) and collect_runs lists them as missing or failed instead.
    With rounds (matrix.seeds {initial, max}) an input function: the cells every round read, once
    the last round is known.
    """
    if not rounds_walked():
        return PLAN.analysis_outputs(name)

    def study_outputs(wildcards):
        return [f"{cell.folder}/{name}" for cell in round_read(last_round() + 1)]

    return study_outputs


def runs_folder(wildcards):
    """results/runs: collect_runs looks at every cell's folder (also those not among its
    inputs, to tell failed from missing) and plot_predictions at the predictions/ folders
    that training writes beside its declared outputs."""
    return sb_cell.RUNS_ROOT


def cells_json():
    """Each cell's keys, settings and default settings: collect_runs marks a cell that trained with
    other settings stale (with partial=true; otherwise the planner has it retrained)."""
    return PLAN.cells_json()


def left_out_json():
    """The cells the plan leaves out, with their reasons (the report's table of failed, missing and
    left-out cells)."""
    return PLAN.left_out_json()


def figure_rule_inputs(drawing):
    """The files a drawing rule of scalebench/report/figures.py reads, by the names its script uses."""
    files = {
        "runs": "results/summary/runs.csv",
        "scaling": "results/summary/scaling.csv",
        "epochs": "results/summary/epochs.csv",
        "collectives": "results/summary/collectives.csv",
        "hosts": "results/summary/hosts.csv",
        "drift": "results/summary/drift.csv",
        "order": "results/summary/order.csv",
        "images": f"{PREPARED}/images.npy",
        "masks": f"{PREPARED}/masks.npy",
    }
    return {name: files[name] for name in sb_figures.RULE_INPUTS[drawing]} | {
        "stamp": ANALYSIS_STAMP
    }


def final_outputs():
    tables = [
        "runs",
        "epochs",
        "scaling",
        "waterfall",
        "verdicts",
        "rounds",
        "provenance",
        "incomplete",
        "collectives",
        "cost",
    ]
    if config["compare"]["baseline"] is not None:
        tables.append("baseline")
    history = []  # the History section (rules/history.smk), with history.path set
    if config["history"]["path"] is not None:
        history = [f"results/summary/{name}.csv" for name in ("history", "changes")] + [
            "results/tables/changes.html",
            "results/figures/history.png",
            "results/figures/history_waterfall.png",
        ]
    return (
        [f"results/summary/{name}.csv" for name in tables]
        + [f"results/tables/{name}.html" for name in tables if name != "epochs"]
        + [f"results/tables/{name}.html" for name in ("hosts", "drift", "order")]
        + [figure.path for figure in sb_figures.FIGURES]
        + ["results/summary/answer.json", LANDING_PAGE]
        + history
    )


# The report's text (its first page), and the same with the study's answer in front, which the
# rule derive_answer writes once the tables exist (scalebench/report/landing.py).
REPORT_TEXT = str(Path(workflow.basedir) / "report" / "workflow.rst")
LANDING_PAGE = "results/report/landing.rst"


def report_page():
    """The report's first page: the answer's page where derive_answer wrote one, else the study's text."""
    page = Path(LANDING_PAGE)
    return str(page.resolve()) if page.is_file() else REPORT_TEXT


def submitted_predictions():
    """Each cell's prediction as the run that trains it started it (config/bill.py), where a run kept
    any: planning writes it before Snakemake reads this."""
    path = Path(sb_bill.SUBMITTED_FILE)
    return [str(path)] if path.is_file() else []


def baseline_runs(wildcards):
    """The baseline study's runs.csv (compare.baseline): a changed baseline re-runs the comparison."""
    folder = config["compare"]["baseline"]
    if folder is None:
        raise WorkflowError(
            "config key 'compare.baseline' is not set: results/summary/baseline.csv needs a baseline study"
        )
    return str(sb_baseline.runs_table(folder))


def baseline_folder(wildcards):
    return config["compare"]["baseline"]


def history_inputs(wildcards):
    """The finished study's summary tables that the history target adds to history.path (its
    rule in rules/history.smk); refused, naming the key, where history.path is null."""
    if config["history"]["path"] is None:
        raise WorkflowError(
            "config key 'history.path' is not set: the history target adds this finished study to the "
            """folder it names; set it in the config or with --config 'history={"path": "../history"}'"""
        )
    return [path for path in final_outputs() if path.startswith("results/summary/")]


def history_entries(wildcards):
    """The entries of the history (their entry.json): a study added since judges the gate again."""
    return sorted(str(path) for path in Path(history_folder(wildcards)).glob("*/entry.json"))


def history_folder(wildcards):
    """history.path, where the history target adds the study (checked before any job: config/checks.py)."""
    return str(Path(config["history"]["path"]).expanduser().resolve())


def legacy_inputs():
    """The log files of the legacy imports (so a changed file re-runs the collection)."""
    from scalebench.analysis import legacy as sb_legacy

    try:
        return [
            str(path)
            for index, entry in enumerate(config["legacy"])
            for path in sb_legacy.legacy_files(entry, index)
        ]
    except sb_legacy.LegacyError as error:
        raise WorkflowError(str(error)) from None


def legacy_json():
    return json.dumps(config["legacy"], sort_keys=True)


def rerun_invocation(wildcards):
    """This run's own command line (config files, overrides, executor or profile), from which
    the report prints the commands that rerun cells as the study made them. A params
    function: it is read in the process the user started, never in a job's."""
    return json.dumps(dataclasses.asdict(sb_rerun.current(workflow)), sort_keys=True)


def zenodo_receipt():
    """The download rule's receipt: record-<id>.json in dataset.zenodo.directory (never under results/)."""
    zenodo = config["dataset"]["zenodo"]
    directory = Path(zenodo["directory"]).expanduser()
    if config["dataset"]["source"] == "zenodo":
        inside = (Path.cwd() / directory).resolve()
        if (
            inside == (Path.cwd() / "results").resolve()
            or (Path.cwd() / "results").resolve() in inside.parents
        ):
            raise WorkflowError(
                f"config key 'dataset.zenodo.directory': {directory} is under results/; "
                "downloads belong outside it (e.g. resources/zenodo)"
            )
    return str(directory / f"record-{int(zenodo['record'])}.json")


def raw_dataset(wildcards):
    """The preprocess rule's inputs: the raw tree of the source, plus the receipt for zenodo."""
    source = config["dataset"]["source"]
    if source == "folder":
        folder = Path(config["dataset"]["folder"]).expanduser()
        if not folder.is_dir():
            raise WorkflowError(f"config key 'dataset.folder': {folder} is not a folder")
        return {"raw": str(folder)}
    if source == "zenodo":
        return {"raw": ZENODO_RAW, "receipt": zenodo_receipt()}
    return {"raw": SYNTHETIC_RAW}


def dataset_provenance(wildcards):
    """What the manifest records about the source, as JSON (the script adds the archives' md5)."""
    return json.dumps(sb_keys.source_description(config["dataset"]), sort_keys=True)


def settings_file(wildcards):
    """The cell's settings.json, written by planning (its date tells Snakemake whether to retrain;
    a cell named on the command line outside the matrix is planned too)."""
    return PLAN.settings_file(cell_of(wildcards))


def launchers_json(wildcards):
    return json.dumps(config["launchers"], sort_keys=True)


def environments_json(wildcards):
    """Where each framework's ranks run (config key environments; scalebench/environments.py)."""
    return json.dumps(config["environments"], sort_keys=True)


def train_threads(wildcards):
    # Locally a cell with N ranks takes N cores from Snakemake; on SLURM the
    # job's CPUs come from the resources below.
    return int(wildcards.gpus)


def slurm_resource(name):
    """A resource function for the train rule, computed by scalebench.config.resources: the time
    limit the bill sets, and a held cell's first attempt only waits (config/bill.py)."""

    def resource(wildcards, attempt):
        cell = study_cell(wildcards)
        limit, waits = BILL.time_limit(cell, attempt), BILL.waits(cell, attempt)
        return sb_resources.job_resources(config, cell, attempt, limit, waits)[name]

    resource.__name__ = f"slurm_{name}"
    return resource


# The order the cells start in (config/run_order.py): each train job's priority, and with
# order.blocks the previous block's cells as its inputs (ancient: only their existence counts).
def train_priority(wildcards):
    return PLAN.priority(cell_of(wildcards))


def previous_block(wildcards):
    cells = PLAN.previous_block(cell_of(wildcards))
    return [ancient(f"{cell.folder}/metrics.jsonl") for cell in cells]


def train_local_gpus(wildcards):
    """The GPUs a cell holds on this machine: the local scheduler's limit keeps cells off each
    other's GPUs. The SLURM plugin ignores the name, so the sbatch line stays as it is."""
    return PLAN.local_gpus(int(wildcards.gpus))


def train_resources():
    """The train rule's resources: one function per name the config sets (resources.declared_names);
    an account or partition that config leaves unset comes from --default-resources or a profile.
    Plus the GPUs the cell holds on this machine (config/local_gpus.py)."""
    resources = {
        name: slurm_resource(name) for name in sb_resources.declared_names(config["cluster"])
    }
    return {**resources, sb_local_gpus.RESOURCE: train_local_gpus}


def train_request(wildcards, resources):
    """What the job asks SLURM for (tasks, CPUs per task, GPUs), as its own Snakemake evaluates it
    inside the job: launch.py trains only in an allocation that holds it (a held cell's first
    attempt only waits, in a smaller one: config/resources.py, waiting_resources)."""
    return json.dumps(sb_resources.request(resources), sort_keys=True)


def input_folder(wildcards, input):
    """The folder of the rule's `manifest` input (the prepared dataset)."""
    return str(Path(input.manifest).parent)


def output_folder(wildcards, output):
    """The folder of the rule's `run` output (the cell's results folder)."""
    return str(Path(output.run).parent)
