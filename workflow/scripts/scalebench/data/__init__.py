"""The dataset: download from Zenodo (or synthetic pairs, or a local folder), extract, pair, preprocess."""
