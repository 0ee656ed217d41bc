# One job per cell of the matrix: framework x backend x gpus x seed (x the optional axes).
# Its settings come from the cell's settings.json, which the planner writes and dates so that a
# finished cell is retrained only when its settings changed or its outputs are incomplete
# (scalebench/config/freshness.py; profiles/default keeps Snakemake to modification times).


rule train:
    input:
        images=f"{PREPARED}/images.npy",
        masks=f"{PREPARED}/masks.npy",
        manifest=f"{PREPARED}/manifest.json",
        settings=settings_file,
        block=previous_block,
    output:
        metrics=f"{RUNS}/metrics.jsonl",
        run=f"{RUNS}/run.json",
    log:
        f"{RUNS}/train.log",
    benchmark:
        f"{RUNS}/benchmark.tsv"
    priority: train_priority
    threads: train_threads
    resources:
        **train_resources(),
    params:
        launchers=launchers_json,
        environments=environments_json,
        request=train_request,
        step_wait=config["cluster"]["step_wait_s"],
        python=sys.executable,
        launch=str(SCRIPTS / "launch.py"),
        data=input_folder,
        out=output_folder,
    shell:
        "{params.python} {params.launch} --settings-file {input.settings:q}"
        " --data {params.data} --out {params.out}"
        " --launchers {params.launchers:q} --environments {params.environments:q}"
        " --request {params.request:q} --step-wait-s {params.step_wait} > {log} 2>&1"


# A cell of a study with optional axes: the same job, one folder level more
# ({framework}/{backend}/{variant}/g{gpus}/s{seed}, e.g. batch8_bf16).
use rule train as train_variant with:
    output:
        metrics=f"{RUNS_VARIANT}/metrics.jsonl",
        run=f"{RUNS_VARIANT}/run.json",
    log:
        f"{RUNS_VARIANT}/train.log",
    benchmark:
        f"{RUNS_VARIANT}/benchmark.tsv"


# The bill (each cell's verdict, predicted run and time limit), which the train rule's resources
# read; then the study's plan, built once those resources can be asked of SLURM, and read by every
# rule's functions from here on (rules/common.smk; scalebench/config/planning.py plans).
BILL = study_bill()
PLAN = study_plan()
