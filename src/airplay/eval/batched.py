"""Evaluation episodes flown N at a time: ``airplay eval --batch N`` for the learned policies.

:func:`fly_batched` flies tasks of one scene on an :class:`~airplay.world.vector_env.AirPlayVectorEnv`
of N sub-environments (one compiled flight-model and collision call and one render call per
control step for all N) with a :class:`~airplay.policies.batched.BatchedPolicy` (one forward pass
per step for the episodes that need a new chunk). A sub-environment whose episode ends starts the
next task at once or, with none left, is parked (:class:`airplay.world.episode_feed.EpisodeFeed`,
shared with DAgger's batched rollouts). Each episode's result (status, steps, trajectory, metrics)
is the one :func:`airplay.eval.runner.run_episode` gives for the same task, bit for bit (the vector
environment steps as the single one; the batched forward equals the forward of one,
:func:`airplay.policies.learned.rows_apart`); ``test/test_eval_batched.py`` checks it.

What is not batched flies one episode at a time as :func:`airplay.eval.episode_jobs.fly_job` does:
policies that are not learned ones (the experts, plugins), wind, a vehicle with a position-
estimate error, a per-step compute budget (it times one policy call per step), no images. A
policy that raises in the batched forward sends the episodes in flight and those left back to
that path (so the failing episode ends as ``policy_error`` as there); a non-finite command ends
its own episode as ``policy_error``, as :mod:`airplay.policies.guard` does.

Each yielded record is :func:`~airplay.eval.episode_jobs.fly_job`'s; ``flying_s`` of the episodes
of a batch step share that step's time equally (their sum is the flying time).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

import numpy as np

DEFAULT_BATCH = 16
"""Episodes per batch where ``airplay eval --batch`` is not given (learned policies in process)."""


@dataclass(frozen=True)
class BatchJob:
    """Tasks ``indices`` of the scene in ``scene_dir`` under ``cfg``, flown ``batch`` at a time."""

    cfg: object
    scene_dir: str
    indices: tuple[int, ...]
    batch: int


def why_not_batched(cfg, world, policy) -> str | None:
    """Why ``cfg``'s episodes in ``world`` with ``policy`` fly one at a time (None: they batch)."""
    from airplay.policies.learned import LearnedPolicy

    if not isinstance(policy, LearnedPolicy):
        return f"policy {cfg.policy!r} is not a learned policy (act, dp, cnn_bc)"
    if cfg.setting not in ("pointgoal", "imagegoal", "goalfree"):
        return f"setting {cfg.setting!r}"
    if cfg.wind:
        return "wind (--wind)"
    if cfg.policy_budget_ms:
        return "a per-step compute budget (--policy-budget-ms)"
    if not cfg.render_images:
        return "no images (--no-images)"
    if world.estimate_error is not None:
        return "a vehicle with a position-estimate error"
    return None


def fly_batch_job(job: BatchJob) -> list[dict]:
    """:func:`fly_batched` as a pool or Ray job: the records of the job's episodes."""
    return list(fly_batched(job.cfg, job.scene_dir, job.indices, job.batch))


def fly_batched(cfg, scene_dir: str, indices, batch: int, exact: bool = True):
    """Fly tasks ``indices`` of ``scene_dir`` (``cfg``: an :class:`~airplay.eval.runner.EvalConfig`)
    ``batch`` at a time; yields one record per episode as it ends (module docstring). ``exact``
    False: torch's batched kernels (~1e-6 relative from the single run's commands)."""
    from airplay.eval.episode_jobs import EpisodeJob, fly_job, scene_state

    indices = [int(k) for k in indices]
    if not indices:
        return
    world, tasks, _, policy = scene_state(EpisodeJob(cfg, str(scene_dir), indices[0], threads=1))
    if batch <= 1 or why_not_batched(cfg, world, policy) is not None:
        for k in indices:
            yield fly_job(EpisodeJob(cfg, str(scene_dir), k, threads=1))
        return
    pending = deque(indices)
    left = yield from _fly(cfg, scene_dir, world, tasks, policy, pending, min(batch, len(indices)), exact)
    for k in left:  # the policy raised in a batch: these fly one at a time
        yield fly_job(EpisodeJob(cfg, str(scene_dir), k, threads=1))


def _fly(cfg, scene_dir, world, tasks, policy, pending: deque, n: int, exact: bool):
    """The batched loop (:class:`~airplay.world.episode_feed.EpisodeFeed` starts, parks and refills the
    rows); returns the task indices still to fly where the policy raised."""
    import numba

    from airplay.eval.episode import task_result
    from airplay.policies import guard
    from airplay.policies.batched import BatchedPolicy
    from airplay.world.env_config import EnvConfig
    from airplay.world.episode_feed import EpisodeFeed
    from airplay.world.vector_env import AirPlayVectorEnv

    goal_key = {"pointgoal": ("goal",), "imagegoal": ("goal",), "goalfree": ()}[cfg.setting]
    config = EnvConfig(setting=cfg.setting, observations=("rgb", "state", *goal_key),
                       render_backend=cfg.render_backend, threads=numba.get_num_threads())
    venv = AirPlayVectorEnv(n, world, config, tasks=tasks)
    feed = EpisodeFeed(venv, pending, lambda k: tasks[k])
    actor = BatchedPolicy(policy, n, exact)
    paths: list[list[np.ndarray]] = [[] for _ in range(n)]
    steps = np.zeros(n, dtype=np.int64)

    def started(rows: list[int], ks: list[int]) -> None:
        pos = venv.vehicle_poses()[0]
        for row, k in zip(rows, ks):
            paths[row], steps[row] = [pos[row].copy()], 0
            actor.reset(row, tasks[k])

    def record(row: int, status: str, steps: int, error: str | None = None) -> dict:
        k = feed.end(row)
        trajectory = np.asarray(paths[row])
        result = task_result(world, tasks[k], cfg, trajectory, status, error)
        return {"scene_dir": str(scene_dir), "index": k, "result": result, "trajectory": trajectory,
                "steps": int(steps), "flying_s": float(feed.wall_s[row])}

    try:
        yield from feed.begin(list(range(n)), started, record)
        while True:
            live = np.array(feed.live(), dtype=np.int64)
            if not len(live):
                return []
            t0 = time.perf_counter()
            try:
                commands = actor.act(live, {k: v[live] for k, v in feed.obs.items()})
            except Exception:  # the policy's failure: these episodes end as one at a time (guard)
                return [feed.item[r] for r in live] + list(feed.pending)
            ended: list[dict] = []
            stopped: list[int] = []
            bad = ~np.isfinite(commands).all(axis=1)
            for j in np.flatnonzero(bad):  # as guard.act: the episode ends at this observation
                row = int(live[j])
                error = guard.describe(ValueError(f"select_action returned a non-finite command "
                                                  f"{commands[j].tolist()}"))
                ended.append(record(row, guard.POLICY_ERROR, int(steps[row]), error))
                stopped.append(row)
            if bad.any():
                venv.park(live[bad])
                live, commands = live[~bad], commands[~bad]
            if len(live):
                actions = np.zeros((n, 4), np.float32)
                actions[live] = commands
                terminated, truncated, info = feed.step(actions)
                pos = venv.vehicle_poses()[0]
                dt = (time.perf_counter() - t0) / len(live)
                for row in live.tolist():
                    paths[row].append(pos[row].copy())
                    steps[row] = info["steps"][row]
                done, rows = feed.settle(live.tolist(), terminated, truncated, info, dt, record)
                ended += done
                stopped += rows
            ended += feed.begin(stopped, started, record)
            yield from ended
    finally:
        venv.close()
