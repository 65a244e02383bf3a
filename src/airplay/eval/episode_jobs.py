"""One evaluation episode as a job: the unit ``airplay eval --workers`` / ``--ray`` hands out.

A job is (the run's :class:`~airplay.eval.runner.EvalConfig`, a scene folder, a task index).
Each process builds the scene's :class:`~airplay.world.World`, its tasks
(``sample_tasks(scene, grid, episodes, seed, setting, protocol)``), the environment and the
policy once (a small per-process cache), then flies the job's task exactly as the one-process
loop would: the environment and the policy are reset from the task alone (gusts from the seed
and the task id, a random or diffusion policy's generator at ``reset``), so an episode's
outcome does not depend on which process flies it or what it flew before. The jobs are run
by :func:`airplay.data.collect_workers.run_jobs` (a spawn process pool, or Ray).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

_CACHE: dict[tuple, tuple] = {}
_CACHE_SIZE = 2


@dataclass(frozen=True)
class EpisodeJob:
    """Task ``index`` of the scene in ``scene_dir`` under ``cfg``; ``threads``: numba threads
    per pool worker."""

    cfg: object
    scene_dir: str
    index: int
    threads: int = 1


def _key(job: EpisodeJob) -> tuple:
    cfg = asdict(job.cfg)
    cfg.pop("bootstrap", None)
    return (job.scene_dir, repr(sorted(cfg.items())))


def scene_state(job: EpisodeJob):
    """(world, tasks, env, policy) of the job's scene, built once per process (small LRU)."""
    key = _key(job)
    if key in _CACHE:
        _CACHE[key] = _CACHE.pop(key)  # most recent last
        return _CACHE[key]
    from airplay.policies import make_policy
    from airplay.sim.disturbance import Disturbance
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World
    from airplay.world.env import AirPlayEnv

    from airplay.sim.estimate_error import load_vehicle_file

    cfg = job.cfg
    vehicle, estimate_error = load_vehicle_file(getattr(cfg, "vehicle", ""))
    world = World.load(job.scene_dir, vehicle=vehicle, estimate_error=estimate_error)
    tasks = sample_tasks(world.scene, world.grid, cfg.episodes, cfg.seed, cfg.setting, world.protocol)
    env = AirPlayEnv(world, cfg.setting, tasks=tasks, render_backend=cfg.render_backend,
                     render_images=cfg.render_images, disturbance=Disturbance.parse(cfg.wind),
                     disturbance_seed=cfg.seed)
    policy = make_policy(cfg.policy, world, checkpoint=cfg.checkpoint or None,
                         execution_horizon=cfg.execution_horizon or None,
                         backend=getattr(cfg, "policy_backend", "torch"))
    while len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = state = (world, tasks, env, policy)
    return state


def clear_cache() -> None:
    """Drop this process's scenes (the one-process run does, when it ends)."""
    _CACHE.clear()


def fly_job(job: EpisodeJob, observer=None) -> dict:
    """Fly one task: ``{"scene_dir", "index", "result": EpisodeResult, "trajectory": (T, 3) map m,
    "steps", "flying_s"}`` (``flying_s``: reset, policy, steps and rendering, not the scene set-up).
    ``observer``: see :func:`airplay.eval.runner.run_episode` (in this process only)."""
    from airplay.eval.episode import run_episode, task_result

    world, tasks, env, policy = scene_state(job)
    task = tasks[job.index]
    t0 = time.perf_counter()
    flown = run_episode(env, policy, task, job.cfg.policy_budget_ms, observer)
    flying_s = time.perf_counter() - t0
    result = task_result(world, task, job.cfg, flown.trajectory, flown.status, flown.error)
    return {"scene_dir": job.scene_dir, "index": job.index, "result": result, "trajectory": flown.trajectory,
            "steps": flown.steps, "flying_s": flying_s}
