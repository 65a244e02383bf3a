"""How many CPU threads numba's parallel kernels (the CPU renderer) and torch use in this process.

numba (threading layer ``omp``) and torch share one GNU OpenMP runtime here. A pool thread that
finishes its share of a parallel region spins until the others finish; on a machine whose cores
are busy with other work, a descheduled peer makes every region of a 64x64 frame or a small
network wait for a time slice. Measured on the 2-core development machine (``airplay eval``,
docs/benchmarks.md#compute-threads-airplay-eval---threads):

* DP checkpoint of ``bench/policy_experiment.py`` at 64x64, 4 episodes: idle 30.7 s on one thread,
  28.7 s on two; beside two busy loops 47.3 s on one, 334.2 s on two;
* the expert with 224x224 RGB + depth, 3 episodes: idle 25.6 s on one, 16.9 s on two; beside two
  busy loops 39.3 s on one, 53.6 s on two.

``airplay eval`` therefore flies a learned policy (a small torch model on frames of its own size)
or a ``--no-images`` run on one thread by default, and leaves the renderer of the experts'
images on numba's default (``--threads N`` overrides both; :func:`compute_threads`); the real-time
nodes use one thread (:func:`airplay.nodes.common.one_compute_thread`), and ``--workers N`` gives
each worker one.
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
