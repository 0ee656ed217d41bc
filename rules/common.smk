# Helpers only (no rules): config validation, the matrix of cells, path,
# parameter and resource functions. The logic lives in the scalebench
# package so it is testable without Snakemake.
import dataclasses
import json
import os
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

SCRIPTS = Path(workflow.basedir) / "workflow" / "scripts"
sys.path.insert(0, str(SCRIPTS))

from scalebench import cell as sb_cell
from scalebench import config as sb_config
from scalebench import rerun as sb_rerun
from scalebench.config import freshness as sb_freshness
from scalebench.config import slurm_check as sb_slurm_check
from scalebench.config import slurm_plugin as sb_slurm_plugin
from scalebench.analysis import baseline_tables as sb_baseline
from scalebench.data import keys as sb_keys
from scalebench.config import local_gpus as sb_local_gpus
from scalebench.config import resources as sb_resources
from scalebench.config import run_order as sb_run_order
from scalebench.report import figures as sb_figures

# validate() also converts the strings of --config (partial=true, matrix={"gpus": [1, 2]})
# to the schema's types: Snakemake reads values inside a structure as strings.
SCHEMA = sb_config.load_schema(Path(workflow.basedir) / "config" / "schema.yaml")
try:
    _resolved = sb_config.validate(config, SCHEMA)
except sb_config.ConfigError as error:
    raise WorkflowError(str(error)) from None
config.clear()
config.update(_resolved)
# Every key at its schema default: a key that a finished cell's record lacks is compared as this.
DEFAULT_CONFIG = sb_config.validate({}, SCHEMA)


def check_baseline():
    """A baseline that cannot be compared is refused here, before any job, naming the key."""
    folder = config["compare"]["baseline"]
    problem = sb_baseline.baseline_problem(folder) if folder is not None else None
    if problem:
        raise WorkflowError(problem)


check_baseline()


# The executor this invocation runs its jobs with (Snakemake's own reading of the command line and
# profiles): `-j 4` alone is a local run's cores, `--executor slurm -n` a cluster run's dry run.
INVOKED_EXECUTOR = sb_rerun.executor(sys.argv) if workflow.is_main_process else None


def local_run(declared):
    """Whether this run's jobs run on this machine. Where argv is not Snakemake's own (the API), a
    run that declares the count, or is given cores and no --jobs (which every cluster executor needs).
    """
    if INVOKED_EXECUTOR is not None:
        return INVOKED_EXECUTOR == "local"
    settings = workflow.resource_settings
    return declared is not None or (settings.nodes is None and settings.cores is not None)


def machine_gpus():
    """This machine's GPUs for a local run (config/local_gpus.py), None for a cluster run.

    `--resources local_gpus=N` wins; a local run without it counts the GPUs here and makes the
    count the scheduler's limit, so the running cells never hold more GPUs than there are (which
    ones each holds, launch.py takes: launch/local_pool.py). A count above the machine's, or a
    CUDA_VISIBLE_DEVICES naming a GPU twice or one the machine lacks, is refused here. A SLURM
    run gets no limit: there each cell is its own job.
    """
    if not workflow.is_main_process:
        return None  # a job's own Snakemake: its cell was checked where it was planned
    declared = workflow.global_resources.get(sb_local_gpus.RESOURCE).value
    if not local_run(declared):
        return None
    problem = sb_local_gpus.machine_problem(os.environ, declared)
    if problem:
        raise WorkflowError(problem)
    if declared is not None:
        return int(declared)
    count = sb_local_gpus.visible_gpus()
    workflow.register_resource(sb_local_gpus.RESOURCE, count)
    return count


MACHINE_GPUS = machine_gpus()
CELLS = sb_config.cells(config, MACHINE_GPUS)
RUNS = sb_cell.RUNS_PATTERN
RUNS_VARIANT = sb_cell.RUNS_VARIANT_PATTERN
# the optional axes of each variant label of the study (one entry '' without optional axes)
VARIANTS = {sb_cell.variant_label(axes): axes for axes in sb_config.variants(config)}
# Keyed by the settings that make them: another study's dataset settings prepare
# beside these arrays, never over them (scalebench/data/keys.py).
PREPARED = f"results/data/prepared/{sb_keys.prepared_key(config['dataset'])}"
SYNTHETIC_RAW = f"results/data/raw/{sb_keys.synthetic_key(config['dataset']['synthetic'])}"
ZENODO_RAW = f"results/data/raw/{sb_keys.zenodo_key(config['dataset']['zenodo']['record'])}"


wildcard_constraints:
    framework="|".join(sb_config.FRAMEWORKS),
    backend="|".join(sb_config.BACKENDS),
    gpus=r"\d+",
    seed=r"\d+",
    variant=sb_cell.VARIANT_REGEX,


def cell_of(wildcards):
    """The cell of a train job; a cell the matrix leaves out is refused before submission."""
    variant = getattr(wildcards, "variant", "")
    if variant not in VARIANTS:
        known = ", ".join(label or "(none)" for label in VARIANTS)
        raise WorkflowError(
            f"{variant!r} is not a variant of this study's optional axes (matrix.model_width, batch_per_gpu, "
            f"precision, compression, scaling); its variants: {known}"
        )
    cell = sb_cell.Cell(
        wildcards.framework,
        wildcards.backend,
        int(wildcards.gpus),
        int(wildcards.seed),
        VARIANTS[variant],
    )
    reason = sb_config.cell_problem(config, cell, MACHINE_GPUS, SLURM_REFUSED)
    if reason:
        raise WorkflowError(f"{cell.path} cannot run: {reason}")
    return cell


def cell_outputs(name):
    """One path per cell of the matrix, e.g. cell_outputs('metrics.jsonl')."""
    return [f"{cell.folder}/{name}" for cell in CELLS]


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
        "provenance",
        "incomplete",
        "collectives",
    ]
    if config["compare"]["baseline"] is not None:
        tables.append("baseline")
    return (
        [f"results/summary/{name}.csv" for name in tables]
        + [f"results/tables/{name}.html" for name in tables if name != "epochs"]
        + [f"results/tables/{name}.html" for name in ("hosts", "drift", "order")]
        + [figure.path for figure in sb_figures.FIGURES]
        + ["results/summary/answer.json", LANDING_PAGE]
    )


# The report's text (its first page), and the same with the study's answer in front, which the
# rule derive_answer writes once the tables exist (scalebench/report/landing.py).
REPORT_TEXT = str(Path(workflow.basedir) / "report" / "workflow.rst")
LANDING_PAGE = "results/report/landing.rst"


def report_page():
    """The report's first page: the answer's page where derive_answer wrote one, else the study's text."""
    page = Path(LANDING_PAGE)
    return str(page.resolve()) if page.is_file() else REPORT_TEXT


# --- analysis helpers (rules/analysis.smk) ---


def cell_finished(cell):
    """Both outputs of the cell's train job exist (its status may still be diverged or oom) and the
    planner does not retrain it (its settings changed or it is incomplete: partial keeps it)."""
    folder = Path(cell.folder)
    done = (folder / "metrics.jsonl").exists() and (folder / "run.json").exists()
    return done and not (cell in VERDICTS and VERDICTS[cell].retrain)


def analysis_cell_outputs(name):
    """Every cell's output, or with `partial: true` only those of the cells that finished.

    Snakemake evaluates this when it builds the DAG, so with the switch the cells that
    are missing or failed are not in the DAG (nothing reruns them) and collect_runs
    lists them as missing or failed instead.
    """
    if not config["partial"]:
        return cell_outputs(name)
    return [f"{cell.folder}/{name}" for cell in CELLS if cell_finished(cell)]


def runs_folder(wildcards):
    """results/runs: collect_runs looks at every cell's folder (also those not among its
    inputs, to tell failed from missing) and plot_predictions at the predictions/ folders
    that training writes beside its declared outputs."""
    return sb_cell.RUNS_ROOT


def default_settings(cell):
    """The cell's settings with every key at its schema default (config.settings_changes)."""
    return sb_config.train_settings(DEFAULT_CONFIG, cell)


def cells_json():
    """Each cell's keys, settings and default settings: collect_runs marks a cell that trained with
    other settings stale (with partial=true; otherwise the planner has it retrained)."""
    return json.dumps(
        [
            {
                **cell.key(),
                "settings": sb_config.train_settings(config, cell),
                "defaults": default_settings(cell),
            }
            for cell in CELLS
        ],
        sort_keys=True,
    )


# What the planner found in each cell's folder (config/freshness.py), filled by plan_cells().
VERDICTS = {}


def plan_cell(cell):
    """Write the cell's settings.json, the train rule's settings input, dated so that Snakemake
    retrains it exactly when it finished with other settings or its outputs are incomplete
    (config/freshness.py), and say so with the reason."""
    settings = sb_config.train_settings(config, cell)
    found = sb_freshness.verdict(cell.folder, settings, default_settings(cell))
    sb_freshness.write_settings_file(cell.folder, settings, found)
    VERDICTS[cell] = found
    warning = found.warning(cell.path, cell.folder)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)


def plan_cells():
    """Plan every cell of the matrix before the DAG is built (a cell named on the command line
    outside the matrix is planned when its train job asks for its settings)."""
    for cell in CELLS:
        plan_cell(cell)


_TRIGGERS_CHECKED = []


def warn_about_rerun_triggers():
    """profiles/default keeps Snakemake to modification times; other triggers retrain finished
    cells after an upgrade (a release's new defaults, a moved checkout or environment). Called
    once, from the first train job's input function (the triggers are known once the DAG is built).
    """
    if _TRIGGERS_CHECKED or not workflow.is_main_process:
        return
    _TRIGGERS_CHECKED.append(True)
    extra = sorted(
        trigger.name.lower().replace("_", "-")
        for trigger in workflow.rerun_triggers
        if trigger.name != "MTIME"
    )
    if extra:
        print(
            f"warning: rerun triggers {', '.join(extra)} are on; profiles/default sets `rerun-triggers: mtime` "
            "because with them Snakemake retrains finished cells after an upgrade or a move",
            file=sys.stderr,
        )


ANALYSIS_STAMP = "results/summary/.analysis-inputs.json"


def stamp_analysis():
    """The analysis' stamp: the project's code, the study's config and this invocation (the report's
    rerun commands); rewritten only when one of them changes, so the tables and figures are redrawn
    after an upgrade or a changed setting, and not otherwise."""
    content = {
        "code": sb_freshness.code_digest(workflow.basedir),
        "config": config,
        "invocation": dataclasses.asdict(sb_rerun.current(workflow)),
    }
    sb_freshness.write_stamp(ANALYSIS_STAMP, content)


def report_left_out():
    """Say which framework/backend pairs and GPU counts the matrix leaves out, and why
    (also in the report's table of failed, missing and left-out cells)."""
    for entry in sb_config.left_out(config, MACHINE_GPUS, SLURM_REFUSED):
        print(entry.describe(), file=sys.stderr)


def left_out_json():
    return json.dumps(
        [dataclasses.asdict(e) for e in sb_config.left_out(config, MACHINE_GPUS, SLURM_REFUSED)]
    )


# The cells whose job SLURM refuses, with sbatch's message (config/slurm_check.py): left out.
SLURM_REFUSED = {}


def train_job_resources(cell):
    """A cell's train job's resources as the SLURM plugin submits it at its first attempt (the rule's,
    with --default-resources and --set-resources), and its threads."""
    train_rule = workflow.get_rule("train_variant" if cell.variant else "train")
    wildcards = {key: str(value) for key, value in cell.key().items() if key != "variant" or value}
    resources = train_rule.expand_resources(wildcards, [], 1)
    return resources, resources["_cores"]


def check_slurm_requests():
    """Before any train job is submitted to SLURM: a rank that fits no node is a configuration error,
    and the cells to submit whose request `sbatch --test-only` refuses are left out. At submission
    a refusal is not resubmitted and a busy controller is asked again (config/slurm_plugin.py)."""
    if INVOKED_EXECUTOR != "slurm":
        return
    cluster = config["cluster"]
    window_s = cluster["busy_retry_min"] * 60
    try:
        sb_slurm_plugin.install(window_s)
    except sb_slurm_plugin.PluginMismatch as error:
        raise WorkflowError(str(error)) from None
    problem = sb_slurm_check.node_cpus_problem(
        cluster["cpus_per_rank"], cluster["partition"]
    ) or sb_slurm_check.unknown_nodes_problem(cluster["exclude"])
    if problem:
        raise WorkflowError(problem)
    forced = sb_slurm_check.forced_cells(CELLS, sb_rerun.forced(sys.argv))
    to_submit = [cell for cell in CELLS if not cell_finished(cell) or cell in forced]
    findings = (
        sb_slurm_check.check(to_submit, train_job_resources, window_s=window_s)
        if to_submit
        else None
    )
    for note in findings.notes if findings else []:
        print(note, file=sys.stderr)
    if findings and findings.refused:
        SLURM_REFUSED.update(findings.refused)
        CELLS[:] = [cell for cell in CELLS if cell not in findings.refused]


def plan_study():
    """Once the train rule exists (rules/train.smk calls this, before the analysis rules read the
    cells): plan every cell, leave out those SLURM refuses, say what is left out and why, and stamp
    the analysis. In the process the user started; a job's own Snakemake plans nothing."""
    if not workflow.is_main_process:
        return
    plan_cells()
    check_slurm_requests()
    order_cells()
    report_left_out()
    stamp_analysis()


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
    """The cell's settings.json, written by plan_cells (its date tells Snakemake whether to retrain)."""
    warn_about_rerun_triggers()
    cell = cell_of(wildcards)
    if cell not in VERDICTS and workflow.is_main_process:
        plan_cell(cell)  # named by its path, outside the matrix (e.g. more GPUs on a cluster)
    return f"{cell.folder}/{sb_freshness.SETTINGS_FILE}"


def launchers_json(wildcards):
    return json.dumps(config["launchers"], sort_keys=True)


def train_threads(wildcards):
    # Locally a cell with N ranks takes N cores from Snakemake; on SLURM the
    # job's CPUs come from the resources below.
    return int(wildcards.gpus)


def slurm_resource(name):
    """A resource function for the train rule, computed by scalebench.config.resources."""

    def resource(wildcards, attempt):
        return sb_resources.job_resources(config, cell_of(wildcards), attempt)[name]

    resource.__name__ = f"slurm_{name}"
    return resource


# The order the cells start in (config/run_order.py): each train job's priority, and with
# order.blocks the previous block's cells as its inputs (ancient: only their existence counts).
RUN_ORDER = {}


def order_cells():
    if INVOKED_EXECUTOR == "slurm" and config["order"]["seed"] is not None:
        sb_run_order.submit_in_priority_order()
    RUN_ORDER.clear()
    RUN_ORDER.update(
        sb_run_order.study_priorities(CELLS, config["order"], config["matrix"]["seeds"])
    )


def train_priority(wildcards):
    return RUN_ORDER.get(cell_of(wildcards), 0)


def previous_block(wildcards):
    if not config["order"]["blocks"]:
        return []
    cells = sb_run_order.previous_block(cell_of(wildcards), CELLS, config["matrix"]["seeds"])
    return [ancient(f"{cell.folder}/metrics.jsonl") for cell in cells]


def train_local_gpus(wildcards):
    """The GPUs a cell holds on this machine: the local scheduler's limit keeps cells off each
    other's GPUs. The SLURM plugin ignores the name, so the sbatch line stays as it is."""
    return sb_local_gpus.gpus_taken(
        config["training"]["device"], int(wildcards.gpus), MACHINE_GPUS or 0
    )


def train_resources():
    """The train rule's resources: one function per name the config sets (resources.declared_names);
    an account or partition that config leaves unset comes from --default-resources or a profile.
    Plus the GPUs the cell holds on this machine (config/local_gpus.py)."""
    resources = {
        name: slurm_resource(name) for name in sb_resources.declared_names(config["cluster"])
    }
    return {**resources, sb_local_gpus.RESOURCE: train_local_gpus}


def input_folder(wildcards, input):
    """The folder of the rule's `manifest` input (the prepared dataset)."""
    return str(Path(input.manifest).parent)


def output_folder(wildcards, output):
    """The folder of the rule's `run` output (the cell's results folder)."""
    return str(Path(output.run).parent)
