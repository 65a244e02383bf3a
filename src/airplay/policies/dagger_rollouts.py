"""DAgger's rollouts: the current policy flies, the field expert labels every state it visits, and
each episode is written to an npz (the layout of :mod:`airplay.policies.dagger`'s ``rollouts/``).

:func:`rollout` flies one episode (:func:`fly_episode` on :class:`~airplay.world.env.AirPlayEnv`);
:func:`rollouts_batched` flies a scene's episodes N at a time on
:class:`~airplay.world.vector_env.AirPlayVectorEnv` (:class:`~airplay.world.episode_feed.EpisodeFeed`
starts, parks and refills the rows; one forward pass per control step for the rows that need a new
chunk, :class:`~airplay.policies.batched.BatchedPolicy`), every file equal bit for bit to the one
:func:`rollout` writes for that task. States are :class:`AirPlayEnv`'s 13-vector (position m map ENU,
quaternion x y z w, velocity m/s map, body rates rad/s); goals are in the heading frame, m; labels and
commands are [vx vy vz] heading frame m/s and yaw rate rad/s.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np

from airplay.episode_status import EpisodeStatus


@dataclasses.dataclass(frozen=True)
class RolloutJob:
    """One episode to fly: the scene, task index and seed, the policy's checkpoint, where to write."""

    scene_dir: str
    index: int
    episodes: int
    seed: int
    checkpoint: str
    iteration: int
    beta: float
    image_size: tuple[int, int] | None
    backend: str
    path: str
    vehicle: str = ""


# -- flying ---------------------------------------------------------------------------------------
_CACHE: dict = {}


def _scene(scene_dir: str, image_size, backend: str, vehicle: str = ""):
    """(world, env, labeller) for a scene (``vehicle``: a vehicle file, "" config/vehicle.yaml), once per process."""
    key = (scene_dir, image_size, backend, vehicle)
    if key not in _CACHE:
        from airplay.data.collect_flight import world_with_camera
        from airplay.policies import make_policy
        from airplay.sim.estimate_error import load_vehicle_file
        from airplay.world import World
        from airplay.world.env import AirPlayEnv
        from airplay.world.env_config import EnvConfig

        params, estimate_error = load_vehicle_file(vehicle)
        world = world_with_camera(World.load(scene_dir, vehicle=params, estimate_error=estimate_error), image_size)
        env = AirPlayEnv(world, EnvConfig(setting="pointgoal", render_backend=backend, render_images=False), tasks=[])
        _CACHE[key] = (world, env, make_policy("field_expert", world))
    return _CACHE[key]


def _policy(checkpoint: str):
    key = ("policy", checkpoint)
    if key not in _CACHE:
        from airplay.policies.checkpoint import load_policy

        _CACHE.pop(next((k for k in _CACHE if k[0] == "policy"), None), None)  # one policy at a time
        _CACHE[key] = load_policy(checkpoint)
    return _CACHE[key]


def fly_episode(world, env, policy, labeller, task, backend: str, beta: float, rng: np.random.Generator,
                noise_std: float = 0.0, delay_steps: int = 0) -> dict:
    """Fly ``task`` with ``policy`` (its command executed, or with probability ``beta`` per step
    the label), labelling every observed state with ``labeller`` (a state-only expert policy).
    ``noise_std`` > 0 adds Gaussian noise of that standard deviation (m/s, rad/s) to each
    executed command, within the action limits (DART: with ``policy`` the expert, the
    demonstrations then show how to come back to the path). ``delay_steps`` > 0 executes each
    command that many control periods after its observation (hovering until the first one),
    as a real-time loop's camera -> policy -> vehicle latency does: demonstrations flown so
    show the states a delayed policy reaches, labelled with what the expert would do there.

    Returns arrays over the T observations before the episode ended: rgb (T, H, W, 3) uint8,
    state (T, 13) float32, goal (T, 3) float32 (heading frame, m), label (T, 4) and command
    (T, 4) float32 ([vx vy vz] heading frame m/s, yaw rate rad/s); and status, steps."""
    from collections import deque

    from airplay.data.collect_flight import with_dart_noise

    if isinstance(delay_steps, bool) or not isinstance(delay_steps, (int, np.integer)) or delay_steps < 0:
        raise ValueError(f"delay_steps must be an integer >= 0, got {delay_steps!r}")
    obs, info = env.reset(options={"task": task})
    policy.reset(task)
    labeller.reset(task)
    frames = {"rgb": [], "state": [], "goal": [], "label": [], "command": []}
    queued = deque([np.zeros(4, np.float32)] * int(delay_steps))  # commands decided, not yet executed
    while info["status"] == EpisodeStatus.RUNNING:
        rgb = world.camera_images(env.estimated_position, env.yaw, backend, depth=False)[0]
        obs = {**obs, "rgb": rgb}
        label = np.asarray(labeller.select_action(obs), np.float32)
        command = np.asarray(policy.select_action(obs), np.float32)
        for key, value in (("rgb", rgb), ("state", obs["state"]), ("goal", obs["goal"]), ("label", label),
                           ("command", command)):
            frames[key].append(np.array(value))
        decided = label if beta > 0 and rng.random() < beta else command
        queued.append(decided)
        executed = queued.popleft()
        if noise_std > 0:
            executed = with_dart_noise(executed, rng, noise_std, env.action_space)
        obs, _, _, _, info = env.step(executed)
    out = {k: np.stack(v) if v else np.zeros((0,)) for k, v in frames.items()}
    out.update(status=info["status"], steps=int(info["steps"]))
    return out


def rollout(job: RolloutJob) -> dict:
    """Fly ``job`` (in a worker) and write its npz; returns the record (status, steps, times)."""
    t0 = time.perf_counter()
    from airplay.tasks.sampler import sample_tasks

    world, env, labeller = _scene(job.scene_dir, job.image_size, job.backend, job.vehicle)
    policy = _policy(job.checkpoint)
    task = sample_tasks(world.scene, world.grid, job.episodes, job.seed, "pointgoal", world.protocol)[job.index]
    rng = np.random.default_rng([job.seed, job.index])
    ep = fly_episode(world, env, policy, labeller, task, job.backend, job.beta, rng)
    return _write_rollout(job, world, task, ep, time.perf_counter() - t0)


def _write_rollout(job: RolloutJob, world, task, ep: dict, wall_s: float) -> dict:
    """Write episode ``ep`` (:func:`fly_episode`'s dict) to ``job.path`` (aside, then renamed); its record."""
    path = Path(job.path)
    tmp = path.with_name(f".{path.stem}.partial.npz")
    np.savez(tmp, rgb=ep["rgb"], state=ep["state"], goal=ep["goal"], label=ep["label"], command=ep["command"],
             meta=np.array(json.dumps({"task_id": task.task_id, "status": ep["status"], "steps": ep["steps"],
                                       "scene": world.scene.name, "iteration": job.iteration, "beta": job.beta})))
    os.replace(tmp, path)
    return {"task_id": task.task_id, "status": ep["status"], "steps": ep["steps"], "wall_s": round(wall_s, 3)}


@dataclasses.dataclass(frozen=True)
class RolloutBatch:
    """Rollout jobs of one scene and iteration, flown ``batch`` at a time (:func:`rollout_batch`)."""

    jobs: tuple[RolloutJob, ...]
    batch: int


def rollout_batch(group: RolloutBatch) -> list[dict]:
    """Fly ``group`` (in a worker) and write each episode's npz; the records, as :func:`rollout`'s."""
    return list(rollouts_batched(group.jobs, group.batch))


def rollouts_batched(jobs, batch: int):
    """Fly ``jobs`` (one scene, iteration and checkpoint) ``batch`` at a time and write their files
    (module docstring); yields each record as its episode ends. One at a time (:func:`rollout`)
    where the vector environment cannot stand in for the single one (a position-estimate error)
    or the policy is not a learned one."""
    from airplay.policies.learned import LearnedPolicy
    from airplay.tasks.sampler import sample_tasks

    jobs = list(jobs)
    if not jobs:
        return
    first = jobs[0]
    world, _, _ = _scene(first.scene_dir, first.image_size, first.backend, first.vehicle)
    policy = _policy(first.checkpoint)
    if batch <= 1 or world.estimate_error is not None or not isinstance(policy, LearnedPolicy) or len(jobs) == 1:
        for job in jobs:
            yield rollout(job)
        return
    for job in jobs[1:]:
        if (job.scene_dir, job.episodes, job.seed, job.checkpoint, job.image_size, job.backend, job.vehicle) != \
                (first.scene_dir, first.episodes, first.seed, first.checkpoint, first.image_size, first.backend,
                 first.vehicle):
            raise ValueError("rollouts_batched: the jobs must share scene, tasks, checkpoint and renderer")
    tasks = sample_tasks(world.scene, world.grid, first.episodes, first.seed, "pointgoal", world.protocol)
    yield from _fly_batched(world, policy, tasks, jobs, min(batch, len(jobs)))


def _fly_batched(world, policy, tasks, jobs: list[RolloutJob], n: int):
    """The batched loop (:class:`~airplay.world.episode_feed.EpisodeFeed` starts, parks and refills the
    rows); yields each record as its episode ends."""
    from dataclasses import replace

    import numba

    from airplay.policies.batched import BatchedPolicy
    from airplay.tasks.field_expert import FieldExpert, FieldExpertSettings
    from airplay.world.env_config import EnvConfig
    from airplay.world.episode_feed import EpisodeFeed
    from airplay.world.vector_env import AirPlayVectorEnv

    config = EnvConfig(setting="pointgoal", observations=("rgb", "state", "goal"), render_backend=jobs[0].backend,
                       threads=numba.get_num_threads())
    venv = AirPlayVectorEnv(n, world, config, tasks=tasks)
    feed = EpisodeFeed(venv, jobs, lambda job: tasks[job.index])
    actor = BatchedPolicy(policy, n)
    # the labeller: make_policy("field_expert")'s FieldExpert, keeping a field per goal in flight
    expert = FieldExpert(world.grid, world.sdf, world.vehicle, replace(FieldExpertSettings(), field_cache=max(
        FieldExpertSettings().field_cache, 2 * n)))
    rngs: list = [None] * n
    frames: list[dict] = [{} for _ in range(n)]
    keys = ("rgb", "state", "goal", "label", "command")

    def started(rows: list[int], started_jobs: list[RolloutJob]) -> None:
        for row, job in zip(rows, started_jobs):
            rngs[row] = np.random.default_rng([job.seed, job.index])
            frames[row] = {k: [] for k in keys}
            actor.reset(row)

    def finish(row: int, status: str, steps: int) -> dict:
        job = feed.end(row)
        ep = {k: np.stack(v) if v else np.zeros((0,)) for k, v in frames[row].items()}
        ep.update(status=status, steps=int(steps))
        return _write_rollout(job, world, tasks[job.index], ep, feed.wall_s[row])

    try:
        yield from feed.begin(list(range(n)), started, finish)
        while True:
            live = feed.live()
            if not live:
                return
            t0 = time.perf_counter()
            seen = {k: v[live] for k, v in feed.obs.items()}
            commands = actor.act(live, seen)
            actions = np.zeros((n, 4), np.float32)
            for i, row in enumerate(live):
                job = feed.item[row]
                expert.set_goal(tasks[job.index].goal_position)
                label = expert.act_on_state(seen["state"][i])[0]
                decided = label if job.beta > 0 and rngs[row].random() < job.beta else commands[i]
                for key, value in (("rgb", seen["rgb"][i]), ("state", seen["state"][i]), ("goal", seen["goal"][i]),
                                   ("label", label), ("command", commands[i])):
                    frames[row][key].append(np.array(value))
                actions[row] = decided
            terminated, truncated, info = feed.step(actions)
            ended, stopped = feed.settle(live, terminated, truncated, info, (time.perf_counter() - t0) / len(live),
                                         finish)
            ended += feed.begin(stopped, started, finish)
            yield from ended
    finally:
        venv.close()
