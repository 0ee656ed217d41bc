# From the cells' records (and imported earlier studies) to tables and figures in the report.
# Every rule reads ANALYSIS_STAMP too: it changes with the project's code and the study's config,
# so the tables and figures are redrawn after an upgrade (scalebench/config/planning.py: stamp_analysis).
# With --config partial=true the inputs are only the cells that finished (see
# analysis_cell_outputs in common.smk): the report then shows what exists and lists the rest.


# Reading records and drawing figures takes seconds: run them where Snakemake
# runs instead of queueing a SLURM job for each (the plot rules say so themselves,
# localrule below, so a drawing group added to figures.py is local too).
localrules:
    collect_runs,
    collect_collectives,
    derive_scaling,
    derive_answer,
    render_tables,
    compare_baseline,
    analyse_hosts,
    derive_cost,


rule collect_runs:
    input:
        metrics=analysis_cell_outputs("metrics.jsonl"),
        runs=analysis_cell_outputs("run.json"),
        legacy=legacy_inputs(),
        rounds=last_round_file,
        stamp=ANALYSIS_STAMP,
    output:
        runs="results/summary/runs.csv",
        epochs="results/summary/epochs.csv",
        provenance="results/summary/provenance.csv",
        incomplete="results/summary/incomplete.csv",
        ranks="results/summary/ranks.csv",
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
        rounds=rounds_rules_json(),
    script:
        "../workflow/scripts/collect_runs.py"


# Each cell of more than one GPU measured its backend's collectives before training
# (training.collectives): their tables, gathered with the cells' keys (those of runs.csv: with
# rounds, the cells they added).
rule collect_collectives:
    input:
        records=analysis_cell_outputs("run.json"),
        runs="results/summary/runs.csv",
        stamp=ANALYSIS_STAMP,
    output:
        collectives="results/summary/collectives.csv",
    log:
        "results/logs/collect_collectives.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        runs_root=runs_folder,
        cells=cells_json(),
    script:
        "../workflow/scripts/collect_collectives.py"


rule derive_scaling:
    input:
        runs="results/summary/runs.csv",
        stamp=ANALYSIS_STAMP,
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


# The answer: the loss waterfall (what each GPU count cost, and to which cause), the verdicts
# between backends and frameworks with their confidence (with rounds, the round that decided each
# and what the rounds cost: rounds.csv), answer.json, and the report's first page
# (report/workflow.rst with the answer in front: report_page() in common.smk shows it).
rule derive_answer:
    input:
        runs="results/summary/runs.csv",
        scaling="results/summary/scaling.csv",
        collectives="results/summary/collectives.csv",
        hosts="results/summary/hosts.csv",
        drift="results/summary/drift.csv",
        order="results/summary/order.csv",
        stamp=ANALYSIS_STAMP,
    output:
        waterfall="results/summary/waterfall.csv",
        verdicts="results/summary/verdicts.csv",
        rounds="results/summary/rounds.csv",
        answer="results/summary/answer.json",
        page=LANDING_PAGE,
    log:
        "results/logs/derive_answer.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        text=REPORT_TEXT,
        rounds=rounds_rules_json(),
        equivalence=config["verdicts"]["equivalence"],
        possible=PLAN.possible_keys_json(),
    script:
        "../workflow/scripts/derive_answer.py"


rule render_tables:
    input:
        runs="results/summary/runs.csv",
        scaling="results/summary/scaling.csv",
        provenance="results/summary/provenance.csv",
        incomplete="results/summary/incomplete.csv",
        collectives="results/summary/collectives.csv",
        waterfall="results/summary/waterfall.csv",
        verdicts="results/summary/verdicts.csv",
        rounds="results/summary/rounds.csv",
        stamp=ANALYSIS_STAMP,
    output:
        waterfall=report(
            "results/tables/waterfall.html",
            caption="../report/waterfall_table.rst",
            category="Tables",
            labels={"table": "the loss waterfall (what each GPU count cost, and why)"},
        ),
        verdicts=report(
            "results/tables/verdicts.html",
            caption="../report/verdicts.rst",
            category="Tables",
            labels={"table": "verdicts: which backend is faster, and how sure"},
        ),
        rounds=report(
            "results/tables/rounds.html",
            caption="../report/rounds.rst",
            category="Tables",
            labels={"table": "rounds: the seeds each round added, and what they cost"},
        ),
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
        collectives=report(
            "results/tables/collectives.html",
            caption="../report/collectives.rst",
            category="Tables",
            labels={"table": "collective bandwidth at the gradient size"},
        ),
    log:
        "results/logs/render_tables.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/render_tables.py"


# One rule per drawing group of scalebench/report/figures.py (plot_scaling, plot_training,
# plot_predictions, plot_collectives, plot_hosts: RULE_INPUTS): its figures, each filed in the
# report with its caption report/<name>.rst.
for drawing in sb_figures.RULE_INPUTS:

    rule:
        name:
            f"plot_{drawing}"
        input:
            **figure_rule_inputs(drawing),
        output:
            **{
                figure.name: report(
                    figure.path,
                    caption=f"../{figure.caption}",
                    category=figure.category,
                    labels=figure.labels,
                )
                for figure in sb_figures.figures_of(drawing)
            },
        log:
            f"results/logs/plot_{drawing}.log",
        localrule: True
        conda:
            "../envs/pipeline.yaml"
        params:
            drawing=drawing,
            target_iou=config["training"]["target_iou"],
            per_node=sb_resources.ranks_per_node_limit(config["cluster"]),
            runs_root=runs_folder,
            images_shown=3,
            link_gbps=config["cluster"]["link_gbps"],
        script:
            "../workflow/scripts/plot_figures.py"


# Only with compare.baseline set (final_outputs): this study against another study's runs.csv.
rule compare_baseline:
    input:
        runs="results/summary/runs.csv",
        baseline=baseline_runs,
        stamp=ANALYSIS_STAMP,
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


# Slow hosts and drift, from every rank of every cell (analysis/hosts.py, analysis/drift.py), and
# the order the cells ran in (config/run_order.py drew it).
rule analyse_hosts:
    input:
        runs="results/summary/runs.csv",
        ranks="results/summary/ranks.csv",
        stamp=ANALYSIS_STAMP,
    output:
        hosts="results/summary/hosts.csv",
        drift="results/summary/drift.csv",
        order="results/summary/order.csv",
        hosts_html=report(
            "results/tables/hosts.html",
            caption="../report/hosts_table.rst",
            category="Tables",
            labels={"table": "hosts (slow nodes)"},
        ),
        drift_html=report(
            "results/tables/drift.html",
            caption="../report/drift_table.rst",
            category="Tables",
            labels={"table": "drift over the study"},
        ),
        order_html=report(
            "results/tables/order.html",
            caption="../report/order_table.rst",
            category="Tables",
            labels={"table": "run order"},
        ),
    log:
        "results/logs/analyse_hosts.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        invocation=rerun_invocation,
        cells=cells_json(),
        order=json.dumps(config["order"]),
        seeds=STUDY.seed_rule.blocks,
        exclude=config["cluster"]["exclude"],
    script:
        "../workflow/scripts/analyse_hosts.py"


# The bill against what each cell cost: the prediction each cell started with (config/bill.py
# keeps it in results/plan/submitted.csv) and its measured run (analysis/cost.py).
rule derive_cost:
    input:
        runs="results/summary/runs.csv",
        submitted=submitted_predictions(),
        stamp=ANALYSIS_STAMP,
    output:
        table="results/summary/cost.csv",
        html=report(
            "results/tables/cost.html",
            caption="../report/bill_cost.rst",
            category="Tables",
            labels={"table": "the bill against what each cell cost"},
        ),
    log:
        "results/logs/derive_cost.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/derive_cost.py"
