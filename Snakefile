# How UNet training scales across GPUs, per framework and distributed backend.
# Wiring only: the helpers live in rules/common.smk, the rules in rules/*.smk.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/data.smk"
include: "rules/train.smk"
include: "rules/rounds.smk"
include: "rules/analysis.smk"
include: "rules/history.smk"


# the study's text, with its answer in front once the analysis has run (common.smk)
report: report_page()


rule all:
    default_target: True
    input:
        final_outputs(),
