"""Helpers shared by the benchmark scripts in bench/ (run as ``python bench/NAME.py``)."""

from __future__ import annotations


def threading_layer() -> str:
    """numba's threading layer in use ("omp", "tbb", "workqueue"), or "unknown" before any parallel run."""
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel function has run yet
        return "unknown"
