"""JSON reports, tables, traces and writing results."""
