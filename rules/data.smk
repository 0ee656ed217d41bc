# Data: a source (synthetic, zenodo or a folder) becomes images/ + masks/ PNG
# pairs, then the arrays and manifest every cell trains on.


rule synthetic_dataset:
    output:
        directory("results/data/raw/synthetic"),
    log:
        "results/logs/synthetic_dataset.log",
    benchmark:
        "results/benchmarks/synthetic_dataset.tsv"
    conda:
        "../envs/pipeline.yaml"
    params:
        pairs=config["dataset"]["synthetic"]["count"],
        size=config["dataset"]["synthetic"]["size"],
        seed=config["dataset"]["synthetic"]["seed"],
    script:
        "../workflow/scripts/make_synthetic.py"


rule preprocess_dataset:
    input:
        raw=raw_dataset,
    output:
        images=f"{PREPARED}/images.npy",
        masks=f"{PREPARED}/masks.npy",
        manifest=f"{PREPARED}/manifest.json",
    log:
        "results/logs/preprocess_dataset.log",
    benchmark:
        "results/benchmarks/preprocess_dataset.tsv"
    conda:
        "../envs/pipeline.yaml"
    params:
        source=config["dataset"]["source"],
        image_size=config["dataset"]["image_size"],
        test_fraction=config["dataset"]["test_fraction"],
        split_seed=config["dataset"]["split_seed"],
    script:
        "../workflow/scripts/preprocess_dataset.py"
