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
task, bit for bit. A vehicle with a position-estimate error flies one episode at a time. The
flying is :mod:`airplay.policies.dagger_rollouts`; this module runs the rounds.
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
from airplay.policies.dagger_rollouts import (  # noqa: F401
    RolloutBatch,
    RolloutJob,
    fly_episode,
    rollout,
    rollout_batch,
    rollouts_batched,
)

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
