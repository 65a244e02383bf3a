"""DAgger (Ross et al. 2011) for the learned policies: fly the current policy, have a state-only
expert label every state it visited, add those frames to the training data, retrain, repeat.

The labeller is the cost-to-go expert (:class:`airplay.tasks.field_expert.FieldExpert`, policy
``field_expert``): its command is a function of the visited state and the goal alone (no
tracker clock, no plan made at the episode start), so a label for a state the demonstrations
never reached is what the expert would do from there. The A* tracking expert (``expert``) is
not usable here: its command depends on its reference clock.

Layout of ``OUT`` (every stage is skipped when its output exists, so a killed run resumes):

* ``OUT/iter_NN/rollouts/<scene>-<k>.npz`` - one flown episode of iteration NN: frames
  (rgb uint8, state, heading-frame goal), the labels, the policy's own commands, the status;
  written aside and renamed.
* ``OUT/iter_NN/data/`` - those episodes as a LeRobot v3 dataset (actions = the labels);
  each episode's metadata holds ``dagger_iteration``, ``source`` ("airplay dagger"),
  ``task_id``, ``status`` and ``beta``.
* ``OUT/iter_NN/checkpoint/`` - the policy retrained (warm start from the previous one) on the
  demonstrations and every iteration's data so far; the last one is the result.
* ``OUT/dagger.jsonl`` - one line per iteration: rollouts, their success rate, frames, times, and
  ``peak_rss_mb``, this process's peak resident memory during the round (Linux; flights in
  ``workers`` processes are not in it).

Memory: the retraining reads every round's frames through the datasets' frame caches
(:func:`airplay.policies.dataset.load_lerobot_episodes`, written episode by episode) and keeps
``frames_memory_gb`` of them in memory; the rest are read from the cache files per batch
(:class:`airplay.policies.dataset.ChunkDataset` ``memory_mb``), so the resident memory is bounded
by that parameter (plus the model and the non-image columns), not by the number of rounds.

Iteration NN flies tasks of ``sample_tasks(scene, ..., episodes, seed + NN)`` on each scene,
executing the expert's label instead of the policy's command with probability
``beta ** NN`` per step (``beta`` 0: the policy always flies).

Flights in batches (``batch`` N > 1, ``airplay dagger --fly-batch N``): a learned policy flies N
episodes of a scene at a time on :class:`~airplay.world.vector_env.AirPlayVectorEnv` with one
forward pass per control step (:class:`~airplay.policies.batched.BatchedPolicy`), the field
expert labelling each row; every rollout file is the one :func:`fly_episode` writes for that
task, bit for bit. A vehicle with a position-estimate error flies one episode at a time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from airplay.episode_status import EpisodeStatus

SOURCE = "airplay dagger"
LOG = "dagger.jsonl"


class DaggerError(RuntimeError):
    """A DAgger run that cannot start or continue; the message names the file or field."""


@dataclasses.dataclass(frozen=True)
class DaggerConfig:
    """A DAgger run.

    checkpoint: the initial learned policy (trained on ``datasets``); datasets: its LeRobot
    training datasets; scenes: scene folders to fly in (PointGoal); out: the run folder;
    iterations: rounds of fly-label-retrain; episodes: tasks flown per scene per round;
    steps / batch_size / lr: updates of each retraining (warm start, fresh optimizer);
    seed: task seed base (round NN samples with ``seed + NN``) and training seed;
    beta: per-step probability, in round NN ``beta ** NN``, of executing the label instead;
    image_size: (width, height) to render at (same field of view; None: the scene camera);
    workers: rollout processes; ray: a Ray address to fly on instead ("local" for a private
    instance); threads: torch threads for training; backend: renderer; vehicle: a vehicle file
    for the flight model (an autopilot's identified profile; "": config/vehicle.yaml);
    batch: episodes of a scene flown at a time by each rollout process (module docstring; 1:
    one at a time); frames_memory_gb: GiB of training frames the retraining keeps in memory (the
    rest are read from the frame caches on disk per batch).
    """

    checkpoint: Path
    datasets: tuple[Path, ...]
    scenes: tuple[Path, ...]
    out: Path
    iterations: int = 3
    episodes: int = 10
    steps: int = 500
    batch_size: int = 64
    lr: float = 3e-4
    seed: int = 1000
    beta: float = 0.0
    image_size: tuple[int, int] | None = None
    workers: int = 1
    ray: str | None = None
    threads: int = 0
    backend: str = "cpu"
    vehicle: str = ""
    batch: int = 16
    frames_memory_gb: float = 2.0

    def __post_init__(self) -> None:
        for name in ("iterations", "episodes", "steps", "batch_size", "workers", "batch"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise DaggerError(f"dagger field '{name}' must be an integer >= 1, got {getattr(self, name)!r}")
        if not self.frames_memory_gb >= 0:
            raise DaggerError(f"dagger field 'frames_memory_gb' must be >= 0, got {self.frames_memory_gb!r}")
        if not 0.0 <= self.beta <= 1.0:
            raise DaggerError(f"dagger field 'beta' must be in [0, 1], got {self.beta!r}")
        if not (Path(self.checkpoint) / "model.safetensors").is_file():
            raise DaggerError(f"checkpoint {self.checkpoint}: no model.safetensors (train it first: airplay train)")
        from airplay.policies.checkpoint import read_config

        if getattr(read_config(self.checkpoint)[1], "actions", "velocity") != "velocity":
            raise DaggerError(f"checkpoint {self.checkpoint}: its policy predicts waypoints (config 'actions'); "
                              "DAgger labels visited states with the expert's velocity commands, not waypoints")
        for d in self.datasets:
            if not (Path(d) / "meta" / "info.json").is_file():
                raise DaggerError(f"dataset {d}: no meta/info.json (a LeRobot v3 dataset: airplay dataset export)")
        for s in self.scenes:
            if not (Path(s) / "scene.yaml").is_file():
                raise DaggerError(f"scene {s}: no scene.yaml")


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

        params, estimate_error = load_vehicle_file(vehicle)
        world = world_with_camera(World.load(scene_dir, vehicle=params, estimate_error=estimate_error), image_size)
        env = AirPlayEnv(world, "pointgoal", tasks=[], render_backend=backend, render_images=False)
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
    from collections import deque
    from dataclasses import replace

    import numba

    from airplay.policies.batched import BatchedPolicy
    from airplay.tasks.field_expert import FieldExpert, FieldExpertSettings
    from airplay.world.vector_env import AirPlayVectorEnv

    venv = AirPlayVectorEnv(n, world, "pointgoal", observations=("rgb", "state", "goal"), tasks=tasks,
                            render_backend=jobs[0].backend, threads=numba.get_num_threads())
    actor = BatchedPolicy(policy, n)
    # the labeller: make_policy("field_expert")'s FieldExpert, keeping a field per goal in flight
    expert = FieldExpert(world.grid, world.sdf, world.vehicle, replace(FieldExpertSettings(), field_cache=max(
        FieldExpertSettings().field_cache, 2 * n)))
    pending = deque(jobs)
    job_of: list[RolloutJob | None] = [None] * n
    rngs: list = [None] * n
    frames: list[dict] = [{} for _ in range(n)]
    wall = np.zeros(n)
    obs: dict[str, np.ndarray] = {}
    keys = ("rgb", "state", "goal", "label", "command")

    def finish(row: int, status: str, steps: int) -> dict:
        job = job_of[row]
        ep = {k: np.stack(v) if v else np.zeros((0,)) for k, v in frames[row].items()}
        ep.update(status=status, steps=int(steps))
        job_of[row] = None
        return _write_rollout(job, world, tasks[job.index], ep, wall[row])

    def begin(rows: list[int]) -> list[dict]:
        done = []
        while rows:
            now = rows[:len(pending)]
            if len(now) < len(rows):
                venv.park(rows[len(now):])
            if not now:
                break
            t0 = time.perf_counter()
            started = [pending.popleft() for _ in now]
            o, info = venv.start(now, [tasks[j.index] for j in started])
            rows = []
            for i, (row, job) in enumerate(zip(now, started)):
                job_of[row], rngs[row], wall[row] = job, np.random.default_rng([job.seed, job.index]), 0.0
                frames[row] = {k: [] for k in keys}
                actor.reset(row)
                for key, value in o.items():
                    if key not in obs:
                        obs[key] = np.zeros((n, *value.shape[1:]), value.dtype)
                    obs[key][row] = value[i]
            dt = (time.perf_counter() - t0) / len(now)
            for i, row in enumerate(now):
                wall[row] += dt
                if info["status"][i] != EpisodeStatus.RUNNING.value:
                    done.append(finish(row, str(info["status"][i]), int(info["steps"][i])))
                    rows.append(row)
        return done

    try:
        yield from begin(list(range(n)))
        while True:
            live = [row for row in range(n) if job_of[row] is not None]
            if not live:
                return
            t0 = time.perf_counter()
            seen = {k: v[live] for k, v in obs.items()}
            commands = actor.act(live, seen)
            actions = np.zeros((n, 4), np.float32)
            for i, row in enumerate(live):
                expert.set_goal(tasks[job_of[row].index].goal_position)
                label = expert.act_on_state(seen["state"][i])[0]
                beta = job_of[row].beta
                decided = label if beta > 0 and rngs[row].random() < beta else commands[i]
                for key, value in (("rgb", seen["rgb"][i]), ("state", seen["state"][i]), ("goal", seen["goal"][i]),
                                   ("label", label), ("command", commands[i])):
                    frames[row][key].append(np.array(value))
                actions[row] = decided
            step_obs, _, terminated, truncated, info = venv.step(actions)
            obs.update(step_obs)
            dt = (time.perf_counter() - t0) / len(live)
            ended, stopped = [], []
            for row in live:
                wall[row] += dt
                if terminated[row] or truncated[row]:
                    ended.append(finish(row, str(info["status"][row]), int(info["steps"][row])))
                    stopped.append(row)
            ended += begin(stopped)
            yield from ended
    finally:
        venv.close()


def run_jobs(fn, jobs: list, workers: int, ray: str | None):
    """``fn(job)`` for every job: in this process (1 worker), a spawn process pool, or Ray."""
    from airplay.data.collect_workers import run_jobs as collect_run_jobs

    return collect_run_jobs(fn, jobs, workers, ray)


# -- the loop -------------------------------------------------------------------------------------
def _write_dataset(folder: Path, files: list[Path], iteration: int) -> dict:
    """The iteration's rollouts -> a LeRobot dataset at ``folder`` (written aside, renamed)."""
    from airplay.data.lerobot import LeRobotWriter

    tmp = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    frames = 0
    writer = None
    for f in files:
        with np.load(f) as z:
            meta = json.loads(str(z["meta"]))
            if len(z["state"]) < 2:
                continue  # an episode that ended at once teaches nothing
            if writer is None:
                writer = LeRobotWriter(tmp, image_shape=z["rgb"].shape[1:3], goal=True,
                                       extra_info={"source": SOURCE, "dagger_iteration": iteration})
            writer.add_episode(z["rgb"], z["state"], z["label"], goal=z["goal"],
                               meta={"dagger_iteration": iteration, "source": SOURCE, **meta})
            frames += len(z["state"])
    if writer is None:
        raise DaggerError(f"{folder}: no rollout of iteration {iteration} has two frames")
    writer.finalize()
    os.replace(tmp, folder)
    return {"frames": frames}


def _retrain(cfg: DaggerConfig, previous: Path, datasets: list[Path], out: Path, progress: bool) -> None:
    import torch

    from airplay.policies.checkpoint import load_policy, read_config
    from airplay.policies.dataset import ChunkDataset, load_lerobot_episodes
    from airplay.policies.train import TrainConfig, train

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    cls, config = read_config(previous)
    episodes = []
    for d in datasets:
        episodes += load_lerobot_episodes(d, config.image_size, config.goal, progress=progress)[0]
    dataset = ChunkDataset(episodes, config.image_size, config.n_obs_steps, config.chunk_size, config.goal,
                           memory_mb=1024.0 * cfg.frames_memory_gb)
    del episodes  # their frames are mapped cache files: unmapped now, the dataset keeps what it needs
    policy = load_policy(previous).train()  # warm start, normalization kept
    tc = TrainConfig.for_policy(cls.name, steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, seed=cfg.seed,
                                save_every=max(100, cfg.steps // 4), log_every=25)
    train(policy, dataset, tc, out, progress=progress)


def _reset_peak_rss() -> None:
    """Start a new peak of this process's resident memory (Linux: /proc/self/clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss_mb() -> float | None:
    """This process's peak resident memory since :func:`_reset_peak_rss` (MiB; None off Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return None


def dagger(cfg: DaggerConfig, progress: bool = True) -> list[dict]:
    """Run (or resume) ``cfg``; returns the per-iteration records of ``OUT/dagger.jsonl``."""
    from tqdm import tqdm

    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / LOG
    done = {r["iteration"]: r for r in (json.loads(x) for x in log.read_text().splitlines())} if log.is_file() else {}
    previous = Path(cfg.checkpoint)
    data: list[Path] = [Path(d) for d in cfg.datasets]
    for it in range(1, cfg.iterations + 1):
        folder = out / f"iter_{it:02d}"
        ckpt, ds = folder / "checkpoint", folder / "data"
        if it in done and (ckpt / "model.safetensors").is_file():
            previous, data = ckpt, data + [ds]
            continue
        t0 = time.perf_counter()
        _reset_peak_rss()
        beta = cfg.beta ** it if cfg.beta > 0 else 0.0
        roll = folder / "rollouts"
        roll.mkdir(parents=True, exist_ok=True)
        for stale in roll.glob(".*.partial.npz"):
            stale.unlink()
        jobs = []
        for scene in cfg.scenes:
            name = Path(scene).resolve().name
            for k in range(cfg.episodes):
                path = roll / f"{name}-{k:04d}.npz"
                jobs.append(RolloutJob(str(Path(scene).resolve()), k, cfg.episodes, cfg.seed + it,
                                       str(previous.resolve()), it, beta, cfg.image_size, cfg.backend, str(path),
                                       str(Path(cfg.vehicle).resolve()) if cfg.vehicle else ""))
        todo = [j for j in jobs if not Path(j.path).is_file()]
        if not ds.joinpath("meta", "info.json").is_file():
            bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), unit="ep", disable=not progress,
                       desc=f"dagger {it}/{cfg.iterations}: fly")
            if cfg.batch > 1 and cfg.workers <= 1 and not cfg.ray:
                for scene in dict.fromkeys(j.scene_dir for j in todo):  # records as episodes end
                    for _ in rollouts_batched([j for j in todo if j.scene_dir == scene], cfg.batch):
                        bar.update(1)
            elif cfg.batch > 1:
                groups = [RolloutBatch(tuple(share[i:i + 2 * cfg.batch]), cfg.batch)
                          for share in ([j for j in todo if j.scene_dir == s] for s in dict.fromkeys(
                              j.scene_dir for j in todo)) for i in range(0, len(share), 2 * cfg.batch)]
                for records in run_jobs(rollout_batch, groups, cfg.workers, cfg.ray):
                    bar.update(len(records))
            else:
                for _ in run_jobs(rollout, todo, cfg.workers, cfg.ray):
                    bar.update(1)
            bar.close()
            _write_dataset(ds, [Path(j.path) for j in jobs], it)
        statuses = []
        frames = 0
        for j in jobs:
            with np.load(j.path) as z:
                statuses.append(json.loads(str(z["meta"]))["status"])
                frames += len(z["state"])
        t_fly = time.perf_counter() - t0
        data = data + [ds]
        _retrain(cfg, previous, data, ckpt, progress)
        record = {"iteration": it, "checkpoint_flown": str(previous), "episodes": len(jobs), "beta": beta,
                  "success_rate": statuses.count(EpisodeStatus.SUCCESS) / len(statuses),
                  "statuses": {s: statuses.count(s) for s in sorted(set(statuses))}, "frames": frames,
                  "fly_s": round(t_fly, 1), "train_s": round(time.perf_counter() - t0 - t_fly, 1),
                  "peak_rss_mb": _peak_rss_mb(), "checkpoint": str(ckpt)}
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")
        done[it] = record
        previous = ckpt
        if progress:
            print(f"dagger {it}/{cfg.iterations}: policy flown succeeded {record['success_rate']:.0%} of "
                  f"{len(jobs)} ({record['statuses']}); {frames} labelled frames; retrained -> {ckpt}", flush=True)
    return [done[i] for i in sorted(done)]
