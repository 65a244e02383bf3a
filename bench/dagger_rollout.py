"""Where a DAgger rollout step's time goes, and what the vector environment's batched render costs per view.

Workload: the synthetic indoor scene (seed 2, default density; built in a temporary folder, or
``--scene DIR``), its camera at ``--size`` pixels square, a ``cnn_bc`` policy of the default
config (untrained: inference costs the same) flying 3 PointGoal tasks through
:func:`airplay.policies.dagger.fly_episode` with the ``field_expert`` labelling every state
(beta 0.3), after one warm-up episode; torch on one thread. Printed: ms per step split into
render (``World.camera_images``), label (the expert), policy (``select_action``), env step
(flight model + collision, no images) and the rest (frame copies); then ms per view of
:class:`airplay.world.camera_batch.CameraBatch` (what ``AirPlayVectorEnv`` renders with) for 8
views per call with 1 and 2 threads.

Then batched evaluation (``airplay eval --batch N``, :mod:`airplay.eval.batched`): a CNN-BC of the
benchmark's small configuration (backbone small, width 32, 128 image features, hidden 256; 64x64,
untrained) flies the same ``--eval-tasks`` PointGoal tasks one at a time
(:func:`airplay.eval.episode_jobs.fly_job`, batch 1: the reference) and ``--batch`` at a time
(:func:`airplay.eval.batched.fly_batched`, bit-exact: what ``airplay eval`` runs; and with torch's
batched kernels, ``exact=False``); printed: CPU ms (process time, all threads) and wall ms per
flown step of each, the ratio batch 1 / batch N, and whether every episode ended the same
(status, steps, trajectory). Then the same for DAgger's flights (``airplay dagger --fly-batch``,
beta 0.3, the field expert's label included): :func:`airplay.policies.dagger_rollouts.rollout` per task vs
:func:`~airplay.policies.dagger_rollouts.rollouts_batched`, and whether every rollout file matched.
``--json`` adds the figures as one JSON object at the end.

Run it as DAgger's pool workers run (``--workers`` equal to the cores: one numba thread each):

    NUMBA_NUM_THREADS=1 PYTHONPATH=src python bench/dagger_rollout.py
    PYTHONPATH=src python bench/dagger_rollout.py --quick   # seconds: 4 G/m^2, 16x16, 1 task, 0.3 s a row
    PYTHONPATH=src python bench/dagger_rollout.py --batch 16 --eval-tasks 32 --json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=None, help="camera pixels, square (default 64, quick 16)")
    parser.add_argument("--scene", type=Path, default=None, help="a scene folder (default: synthetic indoor, seed 2)")
    parser.add_argument("--quick", action="store_true",
                        help="seconds, not minutes (what make test runs): the scene at 4 Gaussians/m^2, 16x16, "
                             "1 timed task, 0.3 s per CameraBatch row")
    parser.add_argument("--batch", type=int, default=None, help="episodes per batch of the batched evaluation "
                                                                "(default 16, quick 4)")
    parser.add_argument("--eval-tasks", type=int, default=None, help="tasks of the batched evaluation comparison "
                                                                     "(default 32, quick 4)")
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON object at the end")
    args = parser.parse_args(argv)
    timed_tasks, batch_s = (1, 0.3) if args.quick else (3, 3.0)

    import torch

    from airplay.data.collect_flight import world_with_camera
    from airplay.policies import make_policy
    from airplay.policies.dagger import fly_episode
    from airplay.policies.dataset import ChunkDataset, EpisodeData
    from airplay.policies.train import build_policy
    from airplay.scene.synthetic import make_scene
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World
    from airplay.world.camera_batch import CameraBatch
    from airplay.world.env import AirPlayEnv
    from airplay.world.env_config import EnvConfig

    torch.set_num_threads(1)
    size = args.size or (16 if args.quick else 64)
    with tempfile.TemporaryDirectory() as tmp:
        scene = args.scene
        if scene is None:
            scene = Path(tmp) / "indoor"
            make_scene("indoor", 2, scene, **({"gaussians_per_m2": 4.0} if args.quick else {}))
        world = world_with_camera(World.load(scene), (size, size))
        env = AirPlayEnv(world, EnvConfig(setting="pointgoal", render_backend="cpu", render_images=False), tasks=[])
        expert = make_policy("field_expert", world)
        tasks = sample_tasks(world.scene, world.grid, 6, 0, "pointgoal", world.protocol)
        ep = fly_episode(world, env, expert, expert, tasks[0], "cpu", 0.0, np.random.default_rng(0))
        ds = ChunkDataset([EpisodeData(rgb=ep["rgb"], state=ep["state"], action=ep["label"], goal=ep["goal"])], size)
        policy = build_policy("cnn_bc", ds, image_size=size).eval()
        times = {"render": 0.0, "label": 0.0, "policy": 0.0, "env step": 0.0}

        def timed(obj, name, key):
            f = getattr(obj, name)

            def g(*a, **k):
                t = time.perf_counter()
                r = f(*a, **k)
                times[key] += time.perf_counter() - t
                return r
            object.__setattr__(obj, name, g)  # World is a frozen dataclass

        timed(world, "camera_images", "render")
        timed(expert, "select_action", "label")
        timed(policy, "select_action", "policy")
        timed(env, "step", "env step")
        fly_episode(world, env, policy, expert, tasks[5], "cpu", 0.3, np.random.default_rng(1))  # warm-up
        for k in times:
            times[k] = 0.0
        t0 = time.perf_counter()
        steps = 0
        for task in tasks[1:1 + timed_tasks]:
            steps += fly_episode(world, env, policy, expert, task, "cpu", 0.3, np.random.default_rng(1))["steps"] + 1
        wall = time.perf_counter() - t0
        print(f"DAgger rollout, {size}x{size}, cnn_bc (default config), torch 1 thread: {steps} steps, "
              f"{1e3 * wall / steps:.2f} ms/step = " + ", ".join(f"{k} {1e3 * v / steps:.2f}" for k, v in times.items())
              + f", rest {1e3 * (wall - sum(times.values())) / steps:.2f}")
        pos = np.array([t.start_position for t in tasks] * 2)[:8]
        yaw = np.array([t.start_yaw for t in tasks] * 2)[:8]
        for threads in (1, 2):
            cam = CameraBatch(world, 8, "cpu", threads)
            rgb = np.empty((8, size, size, 3), np.uint8)
            cam.render(pos, yaw, rgb, None)
            t = time.perf_counter()
            k = 0
            while time.perf_counter() - t < batch_s:
                cam.render(pos + 0.01 * (k % 7), yaw, rgb, None)
                k += 1
            print(f"CameraBatch, 8 views a call, {threads} thread(s): {1e3 * (time.perf_counter() - t) / (8 * k):.2f} "
                  "ms/view")
            cam.close()
        figures = {"dagger_ms_per_step": round(1e3 * wall / steps, 3)}
        figures.update(batched_eval(scene, Path(tmp), 64, args.eval_tasks or (4 if args.quick else 32),
                                    args.batch or (4 if args.quick else 16)))
        if args.json:
            print(json.dumps({"quick": args.quick, **figures}, indent=1))


def batched_eval(scene: Path, tmp: Path, size: int, n_tasks: int, batch: int) -> dict:
    """The batched evaluation figures (module docstring) on ``scene`` rendered at ``size`` pixels."""
    import torch
    import yaml

    from airplay.eval.batched import fly_batched
    from airplay.eval.episode_jobs import EpisodeJob, clear_cache, fly_job
    from airplay.eval.runner import EvalConfig
    from airplay.policies.checkpoint import save_policy
    from airplay.policies.train import build_policy

    folder = tmp / "eval_scene"  # the scene, its camera at size x size (same field of view)
    folder.mkdir()
    for f in Path(scene).iterdir():
        if f.is_file() and f.name != "scene.yaml":
            os.symlink(f.resolve(), folder / f.name)
    spec = yaml.safe_load((Path(scene) / "scene.yaml").read_text())
    cam = spec["camera"]
    scale = size / cam["width"]
    cam.update(width=size, height=round(cam["height"] * scale), fx=cam["fx"] * scale, fy=cam["fy"] * scale,
               cx=cam["cx"] * scale, cy=cam["cy"] * scale)
    (folder / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    torch.manual_seed(0)
    small = {"backbone": "small", "backbone_width": 32, "image_features": 128, "hidden_dim": 256, "image_size": size}
    checkpoint = save_policy(build_policy("cnn_bc", **small), tmp / "cnn_bc_small")
    cfg = EvalConfig(scenes=[folder], policy="cnn_bc", episodes=n_tasks, seed=0, render_backend="cpu",
                     checkpoint=str(checkpoint))
    fly_job(EpisodeJob(cfg, str(folder), 0))  # warm-up: the scene, the policy, compiled kernels
    runs = {}
    for name in ("batch1", "batchN", "batchN_inexact"):
        t, c = time.perf_counter(), time.process_time()
        if name == "batch1":
            recs = [fly_job(EpisodeJob(cfg, str(folder), k)) for k in range(n_tasks)]
        else:
            recs = list(fly_batched(cfg, str(folder), range(n_tasks), batch, exact=name == "batchN"))
        runs[name] = (time.perf_counter() - t, time.process_time() - c, {r["index"]: r for r in recs})
    clear_cache()
    reference = runs["batch1"][2]
    steps = sum(r["steps"] for r in reference.values())

    def same(name: str) -> bool:
        return all(runs[name][2][k]["result"] == r["result"]
                   and np.array_equal(runs[name][2][k]["trajectory"], r["trajectory"]) for k, r in reference.items())

    out = {"eval_tasks": n_tasks, "eval_steps": steps, "batch": batch, "outcomes_equal": same("batchN"),
           "inexact_outcomes_equal": same("batchN_inexact")}
    for name, (wall_s, cpu_s, _) in runs.items():
        out[f"{name}_cpu_ms_per_step"] = round(1e3 * cpu_s / steps, 3)
        out[f"{name}_wall_ms_per_step"] = round(1e3 * wall_s / steps, 3)
    for name in ("batchN", "batchN_inexact"):
        out[f"{name}_cpu_ratio"] = round(out["batch1_cpu_ms_per_step"] / out[f"{name}_cpu_ms_per_step"], 2)
    print(f"Batched evaluation, cnn_bc small config {size}x{size}, {n_tasks} tasks, {steps} flown steps: batch 1 "
          f"{out['batch1_cpu_ms_per_step']:.2f} ms CPU/step ({out['batch1_wall_ms_per_step']:.2f} wall); batch {batch} "
          f"{out['batchN_cpu_ms_per_step']:.2f} ms CPU/step ({out['batchN_wall_ms_per_step']:.2f} wall) = "
          f"{out['batchN_cpu_ratio']:.2f}x less CPU, outcomes equal: {'yes' if out['outcomes_equal'] else 'NO'}; "
          f"torch's batched kernels (not bit-exact) {out['batchN_inexact_cpu_ms_per_step']:.2f} ms CPU/step = "
          f"{out['batchN_inexact_cpu_ratio']:.2f}x, outcomes equal: "
          f"{'yes' if out['inexact_outcomes_equal'] else 'no'}")
    out.update(batched_dagger(folder, tmp, checkpoint, n_tasks, batch))
    return out


def batched_dagger(folder: Path, tmp: Path, checkpoint: Path, n_tasks: int, batch: int) -> dict:
    """DAgger's flights one at a time and ``batch`` at a time (module docstring)."""
    from airplay.policies import dagger_rollouts as dg

    runs = {}
    for name in ("one", "batch"):
        (tmp / f"dagger_{name}").mkdir()
        jobs = [dg.RolloutJob(str(folder), k, n_tasks, 0, str(checkpoint), 1, 0.3, None, "cpu",
                              str(tmp / f"dagger_{name}" / f"{k}.npz")) for k in range(n_tasks)]
        t, c = time.perf_counter(), time.process_time()
        records = [dg.rollout(j) for j in jobs] if name == "one" else list(dg.rollouts_batched(jobs, batch))
        runs[name] = (time.perf_counter() - t, time.process_time() - c, jobs)
        steps = sum(r["steps"] for r in records)
    dg._CACHE.clear()

    def equal(a: str, b: str) -> bool:
        with np.load(a) as za, np.load(b) as zb:
            return za.files == zb.files and all(np.array_equal(za[k], zb[k]) for k in za.files)

    same = all(equal(a.path, b.path) for a, b in zip(runs["one"][2], runs["batch"][2]))
    out = {"dagger_steps": steps, "dagger_files_equal": same}
    for name in ("one", "batch"):
        out[f"dagger_{name}_cpu_ms_per_step"] = round(1e3 * runs[name][1] / steps, 3)
        out[f"dagger_{name}_wall_ms_per_step"] = round(1e3 * runs[name][0] / steps, 3)
    out["dagger_cpu_ratio"] = round(out["dagger_one_cpu_ms_per_step"] / out["dagger_batch_cpu_ms_per_step"], 2)
    print(f"Batched DAgger flights, same policy, beta 0.3, {n_tasks} tasks, {steps} steps (label included): one at a "
          f"time {out['dagger_one_cpu_ms_per_step']:.2f} ms CPU/step ({out['dagger_one_wall_ms_per_step']:.2f} wall); "
          f"batch {batch} {out['dagger_batch_cpu_ms_per_step']:.2f} ms CPU/step "
          f"({out['dagger_batch_wall_ms_per_step']:.2f} wall) = {out['dagger_cpu_ratio']:.2f}x less CPU; files equal: "
          f"{'yes' if same else 'NO'}")
    return out


if __name__ == "__main__":
    main()
