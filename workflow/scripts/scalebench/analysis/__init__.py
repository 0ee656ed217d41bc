"""From the cells' records to tidy tables: collection, legacy import, completeness, scaling."""
