# The history of finished studies (history.path; scalebench/analysis/history.py): the target
# `history` adds this study's summary tables to the folder history.path names, as one entry.
# It has no output of its own (the history lies outside results/, and adding a study again writes
# nothing), so it runs each time it is asked for, and never as part of `all`. Copying a few tables
# takes a second: it runs where Snakemake runs.


localrules:
    history,


rule history:
    input:
        runs="results/summary/runs.csv",
        tables=history_inputs,
    log:
        "results/logs/history.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        history=history_folder,
    script:
        "../workflow/scripts/add_to_history.py"


# The gate (scalebench/analysis/gate.py): `snakemake gate` judges this study against the newest
# study of the history that ran on the same devices and exits non-zero where a key figure regressed
# beyond history.gate_threshold with confidence; results/summary/gate.json holds every verdict. A
# study added to the history since (a new entry.json) judges again.
localrules:
    judge_gate,
    gate,


rule judge_gate:
    input:
        runs="results/summary/runs.csv",
        tables=history_inputs,
        entries=history_entries,
    output:
        gate="results/summary/gate.json",
    log:
        "results/logs/gate.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        history=history_folder,
        threshold=config["history"]["gate_threshold"],
    script:
        "../workflow/scripts/judge_gate.py"


rule gate:
    input:
        gate="results/summary/gate.json",
    log:
        "results/logs/check_gate.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/check_gate.py"
