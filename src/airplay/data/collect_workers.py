"""Running jobs (a collection's flights, DAgger's rollouts) in this process, a spawn process pool
or on Ray, results in completion order. ``fn`` must be importable (a module-level function)."""

from __future__ import annotations

import contextlib
import os

from airplay.data.collect_plan import CollectError


def init_worker() -> None:
    """Pool worker start: the worker ends with the collector, also when the collector is
    SIGKILLed. (Its numba threads come from ``NUMBA_NUM_THREADS``, inherited at spawn:
    :func:`run_local`.)"""
    from airplay.parent_watch import exit_with_parent

    exit_with_parent()


@contextlib.contextmanager
def _environment(**values: str):
    """``os.environ`` with ``values`` set inside the block, restored after it."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_local(fn, jobs: list, workers: int):
    """Results of ``fn(job)`` (in completion order) from a spawn process pool, or in-process for 1 worker.

    A worker that dies (killed, out of memory) raises ``BrokenProcessPool`` here instead of
    hanging the run. When the run stops early (an error, Ctrl-C, the caller closing this
    generator) the workers are terminated at once; a bag they were writing stays a hidden
    ``.partial`` folder, which the next run removes.
    """
    if workers <= 1:
        import numba

        threads = numba.get_num_threads()
        try:
            for job in jobs:
                yield fn(job)
        finally:
            numba.set_num_threads(threads)  # this process's own setting, as it was
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # spawn, not fork: numba's GNU OpenMP layer is not fork-safe.
    threads = getattr(jobs[0], "threads", 1)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=init_worker)
    try:
        # The workers are spawned by the submits and inherit NUMBA_NUM_THREADS (numba threads per
        # worker): a worker imports numba while unpickling its initializer, so setting the variable
        # in the worker has no effect (each worker then flew 3.4x slower: 36 against 125 steps/s).
        with _environment(NUMBA_NUM_THREADS=str(threads)):
            futures = [pool.submit(fn, job) for job in jobs]
        for future in as_completed(futures):
            yield future.result()
    except BaseException:
        for process in list((pool._processes or {}).values()):  # the executor has no public terminate
            process.terminate()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


RAY_LOCAL_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
"""Set before importing ray for ``--ray local``: no usage reports, node address = loopback."""


def run_ray(fn, jobs: list, address: str, workers: int, info: dict):
    """Results of ``fn(job)`` as Ray tasks (one CPU each); ``address="local"`` starts a
    private single-node instance with ``workers`` CPUs bound to 127.0.0.1. ``info["ray_nodes"]``
    gets the addresses of the cluster's live nodes."""
    import logging
    import sys

    if address == "local":
        for key, value in RAY_LOCAL_ENV.items():
            os.environ.setdefault(key, value)
        if "ray" in sys.modules and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] != "0":
            raise CollectError("--ray local: ray was imported before loopback-only settings could apply")
    import ray

    started = not ray.is_initialized()
    if started:
        common = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING,
                  "configure_logging": True}
        if address == "local":
            ray.init(num_cpus=max(1, workers), _node_ip_address="127.0.0.1",
                     runtime_env={"env_vars": dict(RAY_LOCAL_ENV)}, **common)
        else:
            ray.init(address=address, **common)
    info["ray_nodes"] = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive"))
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        pending = [remote.remote(job) for job in jobs]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()


def run_jobs(fn, jobs: list, workers: int, ray: str | None = None):
    """Results of ``fn(job)`` for every job, in completion order: in this process (1 worker),
    a spawn process pool of ``workers``, or Ray tasks at address ``ray`` ("local": a private
    instance bound to 127.0.0.1). ``fn`` must be importable (a module-level function)."""
    if not jobs:
        return iter(())
    if ray:
        return run_ray(fn, jobs, ray, workers, {})
    return run_local(fn, jobs, workers)
