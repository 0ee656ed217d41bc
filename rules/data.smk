# Data: a source (synthetic, zenodo or a folder) becomes a tree of image and
# mask files, then the arrays and manifest every cell trains on. Discovery,
# pairing and validation are shared by all three sources.


# Compute nodes of many clusters have no internet: download on the submit host.
localrules:
    download_dataset,


rule download_dataset:
    # Outside results/ and protected: a rerun of later rules never deletes or
    # redownloads it; verified files already in place are not fetched again.
    output:
        receipt=protected(zenodo_receipt()),
    log:
        "results/logs/download_dataset.log",
    conda:
        "../envs/pipeline.yaml"
    params:
        record=config["dataset"]["zenodo"]["record"],
        files=config["dataset"]["zenodo"]["files"],
        retries=config["dataset"]["zenodo"]["retries"],
        timeout_s=config["dataset"]["zenodo"]["timeout_s"],
    script:
        "../workflow/scripts/download_dataset.py"


rule extract_dataset:
    input:
        receipt=zenodo_receipt(),
    output:
        raw=directory(ZENODO_RAW),
    log:
        "results/logs/extract_dataset.log",
    benchmark:
        "results/benchmarks/extract_dataset.tsv"
    conda:
        "../envs/pipeline.yaml"
    script:
        "../workflow/scripts/extract_dataset.py"


rule synthetic_dataset:
    output:
        raw=directory(SYNTHETIC_RAW),
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


rule prepared_data:
    # `snakemake prepared_data`: this study's arrays only (their folder is keyed by the settings).
    input:
        images=f"{PREPARED}/images.npy",
        masks=f"{PREPARED}/masks.npy",
        manifest=f"{PREPARED}/manifest.json",


rule preprocess_dataset:
    input:
        unpack(raw_dataset),
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
        provenance=dataset_provenance,
        image_size=config["dataset"]["image_size"],
        test_fraction=config["dataset"]["test_fraction"],
        val_fraction=config["dataset"]["val_fraction"],
        split_seed=config["dataset"]["split_seed"],
        max_nonbinary_fraction=config["dataset"]["max_nonbinary_fraction"],
    script:
        "../workflow/scripts/preprocess_dataset.py"
