"""Benchmark the vector environment: N sequential ``AirPlayEnv``s vs one ``AirPlayVectorEnv``.

Workload: the synthetic urban scene (seed 0, 5 Gaussians/m^2; or ``--scene DIR``), 16 PointGoal
tasks of the protocol, uniformly random actions within the action space (seeded), episodes
ending as the protocol says (collisions are frequent under random actions) and starting again
(``reset`` for the sequential environments, the vector environment's own autoreset). Rows:
64x64 RGB (+ goal), 64x64 RGB + depth, 128x128 RGB + depth, each for N = 1, 4, 16, 64.

Columns, per row, all measured in the same run on the same machine:

* sequential: N ``AirPlayEnv``s (``airplay.gym.make_env``, the environment ``gymnasium.make``
  builds) stepped one after another in a Python loop, env-steps per second; once with numba's
  default thread count, once with one numba thread (on a shared machine a parallel region
  waits for its slowest thread: the better of the two is the baseline);
* vector: ``AirPlayVectorEnv(N, threads=cores)``, env-steps per second, the ratio to the
  sequential baseline, and ms per batch step split into dynamics (the flight model), collision
  (SDF and bounds), render (all N views) and the rest (bookkeeping, observations);
* CPU: the process's CPU time per batch step of the vector environment (all threads), and the
  cores it got (CPU time / wall time);
* reference: the single-frame render time (one view, one numba thread, pose cells warm) x N /
  cores, in ms per batch step: what perfect scaling of the renderer alone would give on idle
  cores; and the same frames' CPU time x N (ref CPU): what N single frames cost in CPU, to set
  against the vector environment's CPU per batch step;
* free cores: before and after the table, two threads running compiled code without the GIL
  against one (:func:`free_cores`): how many cores this process can get from the other jobs
  at that moment (2.0 on an idle 2-core machine).

Target (2 cores): >= 1,500 env-steps/s at 64x64 RGB with N = 16, and >= 2x the sequential rate.

    PYTHONPATH=src python bench/vector_env.py            # table (about 2 minutes, scene build included)
    PYTHONPATH=src python bench/vector_env.py --quick    # N = 1 and 16 only, 0.25 s runs (seconds; make test)
    PYTHONPATH=src python bench/vector_env.py --json     # one JSON object
    PYTHONPATH=src python bench/vector_env.py --profile  # where a batch's render time goes (64x64 RGB, N = 16)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import finish_meta, run_meta, threading_layer

TARGET_RATE = 1500.0
TARGET_RATIO = 2.0
CONFIGS = (("64x64 RGB", 64, ("rgb", "goal")), ("64x64 RGB+depth", 64, ("rgb", "depth", "goal")),
           ("128x128 RGB+depth", 128, ("rgb", "depth", "goal")))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load(scene_dir: Path | None, tmp: Path):
    from airplay.scene.synthetic import make_scene
    from airplay.world.env_factory import load_world, task_pool

    cache_dir = None  # a given scene: airplay's cache folder
    if scene_dir is None:
        log("[scene] generating the synthetic urban scene (seed 0) ...")
        scene_dir, cache_dir = tmp / "urban", tmp / "cache"
        make_scene("urban", 0, scene_dir, gaussians_per_m2=5)
    world = load_world(scene_dir, cache_dir=cache_dir)
    t = time.perf_counter()
    log("[scene] SDF, planning grid and 16 tasks ...")
    tasks = task_pool(world, "pointgoal", 16, 0)
    log(f"[scene] ready in {time.perf_counter() - t:.1f} s")
    return world, tasks


def random_actions(space, n: int, steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(space.low, space.high, (steps, n, 4)).astype(np.float32)


def run_sequential(world, tasks, n: int, obs_keys, seconds: float, numba_threads: int | None) -> float:
    """Env-steps per second of n AirPlayEnvs stepped in turn for about ``seconds``."""
    import numba

    from airplay.world.env_config import EnvConfig
    from airplay.world.env_factory import make_env

    old = numba.get_num_threads()
    if numba_threads is not None:
        numba.set_num_threads(numba_threads)
    try:
        config = EnvConfig(observations=obs_keys, render_backend="cpu")
        envs = [make_env(world, config, tasks=tasks) for _ in range(n)]
        for i, env in enumerate(envs):
            env.reset(seed=i)
        acts = random_actions(envs[0].action_space, n, 256, 1)
        done = [False] * n

        def sweep(k: int) -> None:
            a = acts[k % len(acts)]
            for i, env in enumerate(envs):
                if done[i]:
                    env.reset()
                    done[i] = False
                _, _, term, trunc, _ = env.step(a[i])
                done[i] = term or trunc

        sweep(0)  # warm-up
        k, steps, t0 = 1, 0, time.perf_counter()
        while True:
            sweep(k)
            k += 1
            steps += n
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds and k > 3:
                return steps / elapsed
    finally:
        numba.set_num_threads(old)


def free_cores(threads: int = 2, seconds: float = 0.3) -> float:
    """Cores this process gets now: work done per second by ``threads`` threads, each running a
    compiled loop that releases the GIL, over that of one thread (``threads`` when nothing else
    runs; about 1 when the other jobs leave one core)."""
    import threading

    from numba import njit

    @njit(nogil=True, cache=False)
    def spin(n):
        s = 0.0
        for i in range(n):
            s += (i % 7) * 1e-9
        return s

    spin(10)
    n, t = 1_000_000, 0.0
    while t < 0.05:  # size the job to ~seconds / 2 on one thread
        n *= 2
        t0 = time.perf_counter()
        spin(n)
        t = time.perf_counter() - t0
    n = max(1, int(n * seconds / 2 / t))
    t0 = time.perf_counter()
    spin(n)
    one = time.perf_counter() - t0
    workers = [threading.Thread(target=spin, args=(n,)) for _ in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return threads * one / (time.perf_counter() - t0)


def run_vector(world, tasks, n: int, obs_keys, seconds: float, threads: int) -> dict:
    from airplay.world.env_config import EnvConfig
    from airplay.world.vector_env import AirPlayVectorEnv

    config = EnvConfig(observations=obs_keys, render_backend="cpu", threads=threads)
    env = AirPlayVectorEnv(n, world, config, tasks=tasks)
    env.reset(seed=0)
    acts = random_actions(env.single_action_space, n, 256, 2)
    for k in range(3):  # warm-up: the cells' cuts of the start poses
        env.step(acts[k])
    env.reset_timings()
    k, t0, c0 = 3, time.perf_counter(), time.process_time()
    while True:
        env.step(acts[k % len(acts)])
        k += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and k > 6:
            break
    cpu = time.process_time() - c0
    tm = env.timings
    env.close()
    steps = tm["steps"]
    return {"rate": steps * n / elapsed, "batch_steps": steps,
            "ms": {part: 1e3 * tm[part] / steps for part in ("dynamics", "collision", "render", "other")},
            "ms_total": 1e3 * elapsed / steps, "cpu_ms": 1e3 * cpu / steps, "cores_used": cpu / elapsed}


def single_frame_ms(world, obs_keys, tasks, frames: int = 60) -> tuple[float, float]:
    """One view, one numba thread, along a short straight flight (pose cells warm): (wall ms, CPU
    ms of this thread) per frame."""
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        depth, rgb = "depth" in obs_keys, "rgb" in obs_keys
        t = tasks[0]
        pos, yaw = np.array(t.start_position, dtype=np.float64), float(t.start_yaw)
        step = 0.02 * np.array([np.cos(yaw), np.sin(yaw), 0.0])  # 1 m/s at 50 Hz
        world.camera_images(pos, yaw, "cpu", depth=depth, rgb=rgb)
        t0, c0 = time.perf_counter(), time.thread_time()
        for k in range(frames):
            world.camera_images(pos + k * step, yaw, "cpu", depth=depth, rgb=rgb)
        return 1e3 * (time.perf_counter() - t0) / frames, 1e3 * (time.thread_time() - c0) / frames
    finally:
        numba.set_num_threads(old)


def profile_batch(world, tasks, n: int, threads: int, steps: int = 40, repeats: int = 5) -> dict:
    """Where the render time of a batch of ``n`` views goes, on the poses of a vector environment
    flown with random actions for ``steps`` steps: pose cells per step; per view, the stages of
    the CPU renderer (wall ms, one numba thread, cells warm) and the thread's CPU time; and
    ``CameraBatch.render`` of the whole batch with 1 thread and with ``threads``, interleaved
    ``repeats`` times (median wall and CPU ms per batch)."""
    import numba

    from airplay.render.cpu_backend import PROFILE_KEYS
    from airplay.render.lod.cells import pose_cell
    from airplay.world.camera_batch import CameraBatch
    from airplay.world.env_config import EnvConfig
    from airplay.world.vector_env import AirPlayVectorEnv

    config = EnvConfig(observations=("rgb",), render_backend="cpu", threads=threads)
    env = AirPlayVectorEnv(n, world, config, tasks=tasks)
    env.reset(seed=0)
    poses = []
    for a in random_actions(env.single_action_space, n, steps + 3, 2):
        env.step(a)
        v = env.scenes[0].flight.vehicles
        poses.append((np.array(v.position), np.array(v.yaw)))
    env.close()
    poses = poses[3:]
    p = world.protocol
    seen, distinct, new = set(), [], []
    for pos, yaw in poses:
        cells = {pose_cell(pos[i], yaw[i], p.render_lod_cell_m, p.render_lod_cell_deg) for i in range(n)}
        distinct.append(len(cells))
        new.append(len(cells - seen))
        seen |= cells
    batches = {t: CameraBatch(world, n, "cpu", threads=t) for t in sorted({1, threads})}
    rgb = np.empty((n, world.scene.spec.camera.intrinsics.height, world.scene.spec.camera.intrinsics.width, 3),
                   np.uint8)
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        cells = batches[1]._cells
        h, w = rgb.shape[1:3]
        out, alpha = np.empty((h, w, 3), np.float32), np.empty((h, w), np.float32)
        for b in batches.values():
            for pos, yaw in poses:  # warm: compiled, every cell cut
                b.render(pos, yaw, rgb, None)
        stages = {k: [] for k in ("cut",) + PROFILE_KEYS + ("cpu",)}
        times = {t: [] for t in batches}
        for _ in range(repeats):
            prof = {k: 0.0 for k in ("cut", "cut_size") + PROFILE_KEYS}
            c0 = time.thread_time()
            for pos, yaw in poses:
                for i in range(n):
                    cells.render_into(float(pos[i][0]), float(pos[i][1]), float(pos[i][2]), float(yaw[i]), out, None,
                                      alpha, prof)
            views = n * len(poses)
            stages["cpu"].append(1e3 * (time.thread_time() - c0) / views)
            for k in ("cut",) + PROFILE_KEYS:
                stages[k].append(prof[k] / views * (1.0 if k in ("visible", "tile_pairs") else 1e3))
            for t, b in batches.items():
                t0, c0 = time.perf_counter(), time.process_time()
                for pos, yaw in poses:
                    b.render(pos, yaw, rgb, None)
                times[t].append((1e3 * (time.perf_counter() - t0) / len(poses),
                                 1e3 * (time.process_time() - c0) / len(poses)))
    finally:
        numba.set_num_threads(old)
        for b in batches.values():
            b.close()
    return {"n": n, "steps": len(poses), "cells_per_step": float(np.mean(distinct)),
            "new_cells_per_step": float(np.mean(new)),
            "per_view": {k: float(np.median(v)) for k, v in stages.items()},
            "batch": {t: {"wall_ms": float(np.median([x[0] for x in v])), "cpu_ms": float(np.median([x[1] for x in v]))}
                      for t, v in times.items()}}


def print_profile(prof: dict, load) -> None:
    v = prof["per_view"]
    print(f"\nCameraBatch, 64x64 RGB, N = {prof['n']}, poses of {prof['steps']} random-action steps (load average "
          f"{load}): {prof['cells_per_step']:.1f} distinct pose cells per step, {prof['new_cells_per_step']:.2f} new")
    print("per view, one numba thread, cells warm (wall ms, median of repeats): "
          + ", ".join(f"{k} {v[k]:.3f}" for k in ("cut", "cull", "sort", "project", "bin", "rasterize"))
          + f"; thread CPU {v['cpu']:.3f} ms; {v['visible']:.0f} visible Gaussians, {v['tile_pairs']:.0f} tile pairs")
    for t, b in prof["batch"].items():
        print(f"CameraBatch.render, {t} thread(s): {b['wall_ms']:.2f} ms per batch, CPU {b['cpu_ms']:.2f} ms "
              f"({b['cpu_ms'] / b['wall_ms']:.2f} cores)")


def print_table(rows, cores: int, load, free) -> None:
    print(f"\nAirPlayVectorEnv vs N sequential AirPlayEnvs (random actions, PointGoal, CPU renderer, {cores} cores; "
          f"load average at start {load}, free cores at start {free:.2f})")
    head = (f"{'observation':<18} {'N':>3} {'seq steps/s':>12} {'vec steps/s':>12} {'x seq':>6}  "
            f"{'dyn':>6} {'coll':>6} {'render':>7} {'other':>6} {'total':>7} {'CPU':>7} {'cores':>5} {'ref':>7} "
            f"{'ref CPU':>7}")
    print(head)
    print(f"{'':<18} {'':>3} {'(best of 2)':>12} {'':>12} {'':>6}  {'ms per batch step':^52} {'used':>5} "
          f"{'ms':>7} {'ms':>7}")
    print("-" * len(head))
    for r in rows:
        v = r["vector"]
        ms = v["ms"]
        print(f"{r['config']:<18} {r['n']:>3} {r['sequential']:>12,.0f} {v['rate']:>12,.0f} "
              f"{r['ratio']:>6.1f}  {ms['dynamics']:>6.3f} {ms['collision']:>6.3f} {ms['render']:>7.2f} "
              f"{ms['other']:>6.2f} {v['ms_total']:>7.2f} {v['cpu_ms']:>7.2f} {v['cores_used']:>5.2f} "
              f"{r['reference_ms']:>7.2f} {r['reference_cpu_ms']:>7.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true",
                        help="N = 1 and 16 only, about 0.25 s a run (seconds; what make test runs)")
    parser.add_argument("--scene", type=Path, default=None, help="a scene folder (default: the synthetic urban scene)")
    parser.add_argument("--sizes", default=None, help="comma-separated N (default 1,4,16,64; quick 1,16)")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per run (default 3, quick 0.25)")
    parser.add_argument("--threads", type=int, default=None, help="render threads of the vector env (default: cores)")
    parser.add_argument("--profile", action="store_true",
                        help="only where a batch's render time goes: 64x64 RGB, N = 16 (or the first of --sizes)")
    args = parser.parse_args(argv)
    meta = run_meta("vector_env")
    sizes = [int(s) for s in (args.sizes or ("1,16" if args.quick else "1,4,16,64")).split(",") if s.strip()]
    seconds = args.seconds or (0.25 if args.quick else 3.0)

    import numba

    from airplay.world.camera_batch import default_threads

    cores = default_threads()
    threads = args.threads or cores
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    free_at_start = free_cores(cores)
    rows = []
    with tempfile.TemporaryDirectory(prefix="airplay-bench-vec-") as tmp:
        world, tasks = load(args.scene, Path(tmp))
        if args.profile:
            prof = profile_batch(world.with_camera_size(64, 64), tasks, sizes[0] if args.sizes else 16, threads)
            prof["load_average_at_start"] = load_at_start
            if args.json:
                print(json.dumps(prof, indent=1))
            else:
                print_profile(prof, load_at_start)
            return 0
        for name, size, keys in CONFIGS:
            w = world.with_camera_size(size, size)
            log(f"[{name}] warm-up (numba compilation on first use, the level-of-detail tree) ...")
            run_vector(w, tasks, 2, keys, 0.2, threads)
            frame_ms, frame_cpu_ms = single_frame_ms(w, keys, tasks)
            for n in sizes:
                seq_default = run_sequential(w, tasks, n, keys, seconds, None)
                seq_one = run_sequential(w, tasks, n, keys, seconds, 1)
                vec = run_vector(w, tasks, n, keys, seconds, threads)
                best = max(seq_default, seq_one)
                row = {"config": name, "size": size, "observations": list(keys), "n": n,
                       "sequential": best, "sequential_numba_default": seq_default, "sequential_numba_1": seq_one,
                       "vector": vec, "ratio": vec["rate"] / best, "frame_ms": frame_ms,
                       "frame_cpu_ms": frame_cpu_ms, "reference_ms": frame_ms * n / cores,
                       "reference_cpu_ms": frame_cpu_ms * n}
                rows.append(row)
                log(f"[{name}] N={n}: sequential {best:,.0f} steps/s (numba default {seq_default:,.0f}, 1 thread "
                    f"{seq_one:,.0f}), vector {vec['rate']:,.0f} steps/s on {vec['cores_used']:.2f} cores")
    target = next((r for r in rows if r["config"] == "64x64 RGB" and r["n"] == 16), None)
    result = {"cores": cores, "render_threads": threads, "numba_threads": numba.get_num_threads(),
              "threading_layer": threading_layer(), "load_average_at_start": load_at_start,
              "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "free_cores_at_start": free_at_start,
              "free_cores_at_end": free_cores(cores), "quick": args.quick, "seconds": seconds, "rows": rows}
    if target is not None:
        result["target"] = {"rate": target["vector"]["rate"], "ratio": target["ratio"],
                            "rate_met": target["vector"]["rate"] >= TARGET_RATE,
                            "ratio_met": target["ratio"] >= TARGET_RATIO}
    result["meta"] = finish_meta(meta)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print_table(rows, cores, load_at_start, free_at_start)
    print(f"(CPU: the process's CPU time per batch step, cores used = CPU / total; ref: single-frame render time x N "
          f"/ {cores} cores; ref CPU: the single frame's CPU time x N; the sequential rate is the better of numba's "
          f"default threads and one thread; load average at end {result['load_average_at_end']}, free cores at end "
          f"{result['free_cores_at_end']:.2f})")
    if target is not None:
        t = result["target"]
        print(f"target 64x64 RGB, N = 16: {t['rate']:,.0f} env-steps/s (>= {TARGET_RATE:,.0f}: "
              f"{'met' if t['rate_met'] else 'NOT met'}), {t['ratio']:.1f}x sequential (>= {TARGET_RATIO:.0f}x: "
              f"{'met' if t['ratio_met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
