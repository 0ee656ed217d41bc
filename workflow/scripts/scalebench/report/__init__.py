"""Figures and HTML tables for the Snakemake report."""
