# From the cells' records (and imported earlier studies) to tables and figures in the report.
# With --config partial=true the inputs are only the cells that finished (see
# analysis_cell_outputs in common.smk): the report then shows what exists and lists the rest.


# Reading records and drawing figures takes seconds: run them where Snakemake
# runs instead of queueing a SLURM job for each.
localrules:
    collect_runs,
    derive_scaling,
    render_tables,
    plot_scaling,
    plot_training,
    plot_predictions,
    compare_baseline,


rule collect_runs:
    input:
        metrics=analysis_cell_outputs("metrics.jsonl"),
        runs=analysis_cell_outputs("run.json"),
        legacy=legacy_inputs(),
    output:
        runs="results/summary/runs.csv",
        epochs="results/summary/epochs.csv",
        provenance="results/summary/provenance.csv",
        incomplete="results/summary/incomplete.csv",
    log:
        "results/logs/collect_runs.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        runs_root=runs_folder,
        cells=cells_json(),
        target_iou=config["training"]["target_iou"],
        legacy=legacy_json(),
        invocation=rerun_invocation,
        data_key=sb_keys.prepared_key(config["dataset"]),
        left_out=left_out_json(),
    script:
        "../workflow/scripts/collect_runs.py"


rule derive_scaling:
    input:
        runs="results/summary/runs.csv",
    output:
        scaling="results/summary/scaling.csv",
    log:
        "results/logs/derive_scaling.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        per_node=sb_resources.ranks_per_node_limit(config["cluster"]),
    script:
        "../workflow/scripts/derive_scaling.py"


rule render_tables:
    input:
        runs="results/summary/runs.csv",
        scaling="results/summary/scaling.csv",
        provenance="results/summary/provenance.csv",
        incomplete="results/summary/incomplete.csv",
    output:
        runs=report(
            "results/tables/runs.html",
            caption="../report/runs.rst",
            category="Tables",
            labels={"table": "runs (one row per cell)"},
        ),
        scaling=report(
            "results/tables/scaling.html",
            caption="../report/scaling.rst",
            category="Tables",
            labels={"table": "scaling (speedup, efficiency)"},
        ),
        provenance=report(
            "results/tables/provenance.html",
            caption="../report/provenance.rst",
            category="Tables",
            labels={"table": "provenance"},
        ),
        incomplete=report(
            "results/tables/incomplete.html",
            caption="../report/incomplete.rst",
            category="Tables",
            labels={"table": "failed, missing and left-out cells (rerun commands)"},
        ),
    log:
        "results/logs/render_tables.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/render_tables.py"


rule plot_scaling:
    input:
        scaling="results/summary/scaling.csv",
        runs="results/summary/runs.csv",
    output:
        speedup=report(
            "results/figures/speedup.png",
            caption="../report/speedup.rst",
            category="Scaling",
            labels={"figure": "speedup", "measure": "total training time"},
        ),
        speedup_epoch=report(
            "results/figures/speedup_epoch.png",
            caption="../report/speedup_epoch.rst",
            category="Scaling",
            labels={"figure": "speedup", "measure": "steady-state epoch time"},
        ),
        efficiency=report(
            "results/figures/efficiency.png",
            caption="../report/efficiency.rst",
            category="Scaling",
            labels={"figure": "parallel efficiency", "measure": "total training time"},
        ),
        efficiency_epoch=report(
            "results/figures/efficiency_epoch.png",
            caption="../report/efficiency_epoch.rst",
            category="Scaling",
            labels={"figure": "parallel efficiency", "measure": "steady-state epoch time"},
        ),
        speedup_target=report(
            "results/figures/speedup_target.png",
            caption="../report/speedup_target.rst",
            category="Scaling",
            labels={"figure": "speedup", "measure": "time to target IOU"},
        ),
        efficiency_target=report(
            "results/figures/efficiency_target.png",
            caption="../report/efficiency_target.rst",
            category="Scaling",
            labels={"figure": "parallel efficiency", "measure": "time to target IOU"},
        ),
        throughput=report(
            "results/figures/throughput.png",
            caption="../report/throughput.rst",
            category="Scaling",
            labels={"figure": "throughput per GPU", "measure": "images / s / GPU"},
        ),
        time_split=report(
            "results/figures/time_split.png",
            caption="../report/time_split.rst",
            category="Scaling",
            labels={"figure": "where the time goes", "measure": "seconds per epoch"},
        ),
        model=report(
            "results/figures/scaling_model.png",
            caption="../report/scaling_model.rst",
            category="Scaling",
            labels={
                "figure": "scaling model and prediction",
                "measure": "steady-state epoch time",
            },
        ),
        cost=report(
            "results/figures/cost.png",
            caption="../report/cost.rst",
            category="Scaling",
            labels={"figure": "cost", "measure": "images per kJ and per GPU-hour"},
        ),
        iou=report(
            "results/figures/iou.png",
            caption="../report/iou.rst",
            category="Quality",
            labels={"figure": "test IOU vs GPUs"},
        ),
        completeness=report(
            "results/figures/completeness.png",
            caption="../report/completeness.rst",
            category="Completeness",
            labels={"figure": "status of every cell"},
        ),
    log:
        "results/logs/plot_scaling.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        per_node=sb_resources.ranks_per_node_limit(config["cluster"]),
    script:
        "../workflow/scripts/plot_scaling.py"


rule plot_training:
    input:
        runs="results/summary/runs.csv",
        epochs="results/summary/epochs.csv",
    output:
        loss=report(
            "results/figures/loss.png",
            caption="../report/loss.rst",
            category="Quality",
            labels={"figure": "training loss"},
        ),
        iou_time=report(
            "results/figures/iou_time.png",
            caption="../report/iou_time.rst",
            category="Quality",
            labels={"figure": "validation IOU vs training time"},
        ),
        time_to_target=report(
            "results/figures/time_to_target.png",
            caption="../report/time_to_target.rst",
            category="Quality",
            labels={"figure": "time to target IOU"},
        ),
    log:
        "results/logs/plot_training.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        target_iou=config["training"]["target_iou"],
    script:
        "../workflow/scripts/plot_training.py"


rule plot_predictions:
    input:
        runs="results/summary/runs.csv",
        images=f"{PREPARED}/images.npy",
        masks=f"{PREPARED}/masks.npy",
    output:
        figure=report(
            "results/figures/predictions.png",
            caption="../report/predictions.rst",
            category="Quality",
            labels={"figure": "predictions on test images"},
        ),
    log:
        "results/logs/plot_predictions.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        runs_root=runs_folder,
        images_shown=3,
    script:
        "../workflow/scripts/plot_predictions.py"


# Only with compare.baseline set (final_outputs): this study against another study's runs.csv.
rule compare_baseline:
    input:
        runs="results/summary/runs.csv",
        baseline=baseline_runs,
    output:
        table="results/summary/baseline.csv",
        html=report(
            "results/tables/baseline.html",
            caption="../report/baseline.rst",
            category="Baseline",
            labels={"table": "this study against the baseline"},
        ),
    log:
        "results/logs/compare_baseline.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        baseline=baseline_folder,
    script:
        "../workflow/scripts/compare_baseline.py"
