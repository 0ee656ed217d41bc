# One job per cell of the matrix: framework x backend x gpus x seed.


rule train:
    input:
        images=f"{PREPARED}/images.npy",
        masks=f"{PREPARED}/masks.npy",
        manifest=f"{PREPARED}/manifest.json",
    output:
        metrics=f"{RUNS}/metrics.jsonl",
        run=f"{RUNS}/run.json",
    log:
        f"{RUNS}/train.log",
    benchmark:
        f"{RUNS}/benchmark.tsv"
    conda:
        "../envs/train.yaml"
    threads: train_threads
    resources:
        nodes=slurm_resource("nodes"),
        tasks=slurm_resource("tasks"),
        tasks_per_node=slurm_resource("tasks_per_node"),
        mpi=slurm_resource("mpi"),
        gres=slurm_resource("gres"),
        cpus_per_task=slurm_resource("cpus_per_task"),
        mem_mb=slurm_resource("mem_mb"),
        runtime=slurm_resource("runtime"),
        slurm_partition=slurm_resource("slurm_partition"),
        slurm_account=slurm_resource("slurm_account"),
        qos=slurm_resource("qos"),
        constraint=slurm_resource("constraint"),
        slurm_extra=slurm_resource("slurm_extra"),
    params:
        settings=train_settings,
        launchers=launchers_json,
        python=sys.executable,
        launch=str(SCRIPTS / "launch.py"),
        data=input_folder,
        out=output_folder,
    shell:
        "{params.python} {params.launch} --settings {params.settings:q}"
        " --data {params.data} --out {params.out}"
        " --launchers {params.launchers:q} > {log} 2>&1"
