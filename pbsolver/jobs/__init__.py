"""Batch jobs over files: tasks, workers (process pool, dask), crash-safe outputs and resume."""
