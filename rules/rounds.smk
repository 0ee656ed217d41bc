# matrix.seeds {initial: K, max: M}: after seeds 1..K of every cell, rounds add one seed at a time to
# exactly the cells of the comparisons the answer rests on that are still open (config/seeds.py;
# analysis/rounds.py decides). Each round is a checkpoint: its file says which cells it adds, the
# next round reads them, and the analysis waits for the round that adds nothing (common.smk's
# last_round). Reading records takes seconds: it runs where Snakemake runs, never as a SLURM job.


localrules:
    seed_round,


checkpoint seed_round:
    input:
        unpack(round_inputs),
    output:
        round=f"{sb_seeds.ROUNDS_FOLDER}/round-{{round}}.json",
    log:
        "results/logs/seed_round-{round}.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        runs_root=runs_folder,
        cells=cells_json(),
        read=round_read_json,
        rules=rounds_rules_json(),
        target_iou=config["training"]["target_iou"],
        data_key=sb_keys.prepared_key(config["dataset"]),
    script:
        "../workflow/scripts/seed_round.py"
