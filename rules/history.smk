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
