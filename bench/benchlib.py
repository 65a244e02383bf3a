"""Helpers shared by the benchmark scripts in bench/ (run as ``python bench/NAME.py``)."""

from __future__ import annotations


def threading_layer() -> str:
    """numba's threading layer in use ("omp", "tbb", "workqueue"), or "unknown" before any parallel run."""
    import numba

    try:
        return numba.threading_layer()
    except ValueError:  # no parallel function has run yet
        return "unknown"


def run_meta(benchmark: str) -> dict:
    """What a results page says about a run (docs/results/pages.py reads it from the ``--json`` output's
    ``meta``): the benchmark's name, the date (UTC), the load average at the start, and
    :func:`airplay.eval.runner.provenance`'s commit (``+dirty`` with uncommitted changes), command
    line and machine. :func:`finish_meta` adds the load at the end and the run's wall time."""
    import os
    import shlex
    import sys
    import time
    from pathlib import Path

    from airplay.eval.runner import provenance

    argv = [f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]] if sys.argv and sys.argv[0] else []
    return {"benchmark": benchmark, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            **provenance(shlex.join(argv)), "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "_t0": time.perf_counter()}


def finish_meta(meta: dict) -> dict:
    """``meta`` of :func:`run_meta` with the load average at the end and the wall time (s)."""
    import os
    import time

    out = {k: v for k, v in meta.items() if k != "_t0"}
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out["wall_s"] = round(time.perf_counter() - meta["_t0"], 1)
    return out
