"""Sweeps: expand a sweep file into plain scenarios, run them on a pool, keep every result.

spec (sweep file -> points) -> worker (one point -> result) -> execute (local pool or Dask)
-> store (durable log, resume, CSV/Parquet) -> summary and plots.
"""
