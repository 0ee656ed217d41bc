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


# The gate (scalebench/analysis/gate.py): `snakemake gate` judges this study against the studies of
# the history that ran on the same devices, since each cell key's last change point, and exits
# non-zero where a key figure regressed beyond history.gate_threshold with confidence;
# results/summary/gate.json holds every verdict. A study added to the history since (a new
# entry.json) judges again.
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
        alpha=config["history"]["change_alpha"],
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


# The History section of the report (scalebench/analysis/history_changes.py), with history.path
# set (final_outputs): each key figure of each cell key across the history's studies and this one,
# the change points found in each series with their size, confidence and what changed with them.
# Its inputs are the entries: a study added since draws it again.
localrules:
    analyse_history,


rule analyse_history:
    input:
        runs="results/summary/runs.csv",
        waterfall="results/summary/waterfall.csv",
        entries=history_entries,
        stamp=ANALYSIS_STAMP,
    output:
        series="results/summary/history.csv",
        changes="results/summary/changes.csv",
        html=report(
            "results/tables/changes.html",
            caption="../report/history_changes.rst",
            category="History",
            labels={"table": "change points across the history"},
        ),
        figure=report(
            "results/figures/history.png",
            caption="../report/history.rst",
            category="History",
            labels={"figure": "key figures across the history"},
        ),
        waterfall=report(
            "results/figures/history_waterfall.png",
            caption="../report/history_waterfall.rst",
            category="History",
            labels={"figure": "the loss waterfall across the history"},
        ),
    log:
        "results/logs/analyse_history.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        history=history_folder,
        alpha=config["history"]["change_alpha"],
    script:
        "../workflow/scripts/analyse_history.py"
