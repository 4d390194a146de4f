"""The changelog: every change of the table, tombstones included, on a compacted topic."""
