# From the cells' records to tables and figures in the report.


rule collect_runs:
    input:
        metrics=cell_outputs("metrics.jsonl"),
        runs=cell_outputs("run.json"),
    output:
        runs=report(
            "results/summary/runs.csv",
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "runs"},
        ),
        epochs="results/summary/epochs.csv",
    log:
        "results/logs/collect_runs.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/collect_runs.py"


rule derive_scaling:
    input:
        runs="results/summary/runs.csv",
    output:
        scaling=report(
            "results/summary/scaling.csv",
            caption="../report/scaling.rst",
            category="Tables",
            labels={"table": "scaling"},
        ),
    log:
        "results/logs/derive_scaling.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/derive_scaling.py"


rule plot_speedup:
    input:
        scaling="results/summary/scaling.csv",
        runs="results/summary/runs.csv",
    output:
        figure=report(
            "results/figures/speedup.png",
            caption="../report/speedup.rst",
            category="Scaling",
            labels={"figure": "speedup"},
        ),
    log:
        "results/logs/plot_speedup.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/plot_speedup.py"
