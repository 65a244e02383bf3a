"""How many CPU threads numba's parallel kernels (the CPU renderer) and torch use in this process.

numba (threading layer ``omp``) and torch share one GNU OpenMP runtime here. A pool thread that
finishes its share of a parallel region spins until the others finish; on a machine whose cores
are busy with other work, a descheduled peer makes every region of a 64x64 frame or a small
network wait for a time slice. One vehicle's evaluation gains nothing from a second thread even
on an idle machine. Measured with the DP checkpoint of ``bench/policy_experiment.py``
(``airplay eval --policy dp --episodes 4``, 4,715 control steps, 2 cores; docs/benchmarks.md):

* idle: 28.0 s with numba's default 2 threads, 28.0 s with one;
* beside two busy loops: 164.5 s with 2 threads, 48.0 s with one.

``airplay eval`` therefore runs on ``--threads 1`` by default (:func:`compute_threads`); the
real-time nodes use one thread too (:func:`airplay.nodes.common.one_compute_thread`), and
``--workers N`` gives each worker one.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


def check_threads(threads) -> int:
    """``threads`` as an int; ValueError naming it unless it is an integer >= 1."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    return threads


def set_compute_threads(threads: int, torch_too: bool = False) -> None:
    """numba's parallel kernels called from this thread on ``threads`` threads (at most numba's
    pool, ``NUMBA_NUM_THREADS``); with ``torch_too``, torch's intra-op threads too (process-wide)."""
    import numba

    numba.set_num_threads(max(1, min(check_threads(threads), numba.config.NUMBA_NUM_THREADS)))
    if torch_too:
        import torch

        torch.set_num_threads(threads)


@contextmanager
def compute_threads(threads: int | None, torch_too: bool = False) -> Iterator[None]:
    """:func:`set_compute_threads` for the block, then the previous counts again (None: unchanged).
    torch's count is restored only where torch was imported before the block."""
    if threads is None:
        yield
        return
    import numba

    old_numba = numba.get_num_threads()
    torch_before = sys.modules.get("torch")
    old_torch = torch_before.get_num_threads() if torch_before is not None else None
    set_compute_threads(threads, torch_too)
    try:
        yield
    finally:
        numba.set_num_threads(old_numba)
        if old_torch is not None:
            torch_before.set_num_threads(old_torch)
