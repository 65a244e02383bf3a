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
* reference: the single-frame render time (one view, one numba thread, pose cells warm) x N /
  cores, in ms per batch step: what perfect scaling of the renderer alone would give.

Target (2 cores): >= 1,500 env-steps/s at 64x64 RGB with N = 16, and >= 2x the sequential rate.

    PYTHONPATH=src python bench/vector_env.py            # table (about 2 minutes, scene build included)
    PYTHONPATH=src python bench/vector_env.py --quick    # N = 1 and 16 only, short runs
    PYTHONPATH=src python bench/vector_env.py --json     # one JSON object
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

from benchlib import threading_layer

TARGET_RATE = 1500.0
TARGET_RATIO = 2.0
CONFIGS = (("64x64 RGB", 64, ("rgb", "goal")), ("64x64 RGB+depth", 64, ("rgb", "depth", "goal")),
           ("128x128 RGB+depth", 128, ("rgb", "depth", "goal")))


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def load(scene_dir: Path | None, tmp: Path):
    from airplay.scene.synthetic import make_scene
    from airplay.world.vector_env import load_world, task_pool

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

    from airplay.world.vector_env import make_env

    old = numba.get_num_threads()
    if numba_threads is not None:
        numba.set_num_threads(numba_threads)
    try:
        envs = [make_env(world, tasks=tasks, observations=obs_keys, render_backend="cpu") for _ in range(n)]
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


def run_vector(world, tasks, n: int, obs_keys, seconds: float, threads: int) -> dict:
    from airplay.world.vector_env import AirPlayVectorEnv

    env = AirPlayVectorEnv(n, world, tasks=tasks, observations=obs_keys, render_backend="cpu", threads=threads)
    env.reset(seed=0)
    acts = random_actions(env.single_action_space, n, 256, 2)
    for k in range(3):  # warm-up: the cells' cuts of the start poses
        env.step(acts[k])
    env.reset_timings()
    k, t0 = 3, time.perf_counter()
    while True:
        env.step(acts[k % len(acts)])
        k += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds and k > 6:
            break
    tm = env.timings
    env.close()
    steps = tm["steps"]
    return {"rate": steps * n / elapsed, "batch_steps": steps,
            "ms": {part: 1e3 * tm[part] / steps for part in ("dynamics", "collision", "render", "other")},
            "ms_total": 1e3 * elapsed / steps}


def single_frame_ms(world, obs_keys, tasks, frames: int = 60) -> float:
    """One view, one numba thread, along a short straight flight (pose cells warm): ms per frame."""
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        depth, rgb = "depth" in obs_keys, "rgb" in obs_keys
        t = tasks[0]
        pos, yaw = np.array(t.start_position, dtype=np.float64), float(t.start_yaw)
        step = 0.02 * np.array([np.cos(yaw), np.sin(yaw), 0.0])  # 1 m/s at 50 Hz
        world.camera_images(pos, yaw, "cpu", depth=depth, rgb=rgb)
        t0 = time.perf_counter()
        for k in range(frames):
            world.camera_images(pos + k * step, yaw, "cpu", depth=depth, rgb=rgb)
        return 1e3 * (time.perf_counter() - t0) / frames
    finally:
        numba.set_num_threads(old)


def print_table(rows, cores: int, load) -> None:
    print(f"\nAirPlayVectorEnv vs N sequential AirPlayEnvs (random actions, PointGoal, CPU renderer, {cores} cores; "
          f"load average at start {load})")
    head = (f"{'observation':<18} {'N':>3} {'seq steps/s':>12} {'vec steps/s':>12} {'x seq':>6}  "
            f"{'dyn':>6} {'coll':>6} {'render':>7} {'other':>6} {'total':>7} {'ref':>7}")
    print(head)
    print(f"{'':<18} {'':>3} {'(best of 2)':>12} {'':>12} {'':>6}  {'ms per batch step':^36} {'ms':>7}")
    print("-" * len(head))
    for r in rows:
        ms = r["vector"]["ms"]
        print(f"{r['config']:<18} {r['n']:>3} {r['sequential']:>12,.0f} {r['vector']['rate']:>12,.0f} "
              f"{r['ratio']:>6.1f}  {ms['dynamics']:>6.3f} {ms['collision']:>6.3f} {ms['render']:>7.2f} "
              f"{ms['other']:>6.2f} {r['vector']['ms_total']:>7.2f} {r['reference_ms']:>7.2f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true", help="N = 1 and 16 only, about 1 s a run")
    parser.add_argument("--scene", type=Path, default=None, help="a scene folder (default: the synthetic urban scene)")
    parser.add_argument("--sizes", default=None, help="comma-separated N (default 1,4,16,64; quick 1,16)")
    parser.add_argument("--seconds", type=float, default=None, help="timed seconds per run (default 3, quick 1)")
    parser.add_argument("--threads", type=int, default=None, help="render threads of the vector env (default: cores)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("1,16" if args.quick else "1,4,16,64")).split(",") if s.strip()]
    seconds = args.seconds or (1.0 if args.quick else 3.0)

    import numba

    from airplay.world.camera_batch import default_threads

    cores = default_threads()
    threads = args.threads or cores
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="airplay-bench-vec-") as tmp:
        world, tasks = load(args.scene, Path(tmp))
        for name, size, keys in CONFIGS:
            w = world.with_camera_size(size, size)
            log(f"[{name}] warm-up (numba compilation on first use, the level-of-detail tree) ...")
            run_vector(w, tasks, 2, keys, 0.2, threads)
            frame_ms = single_frame_ms(w, keys, tasks)
            for n in sizes:
                seq_default = run_sequential(w, tasks, n, keys, seconds, None)
                seq_one = run_sequential(w, tasks, n, keys, seconds, 1)
                vec = run_vector(w, tasks, n, keys, seconds, threads)
                best = max(seq_default, seq_one)
                row = {"config": name, "size": size, "observations": list(keys), "n": n,
                       "sequential": best, "sequential_numba_default": seq_default, "sequential_numba_1": seq_one,
                       "vector": vec, "ratio": vec["rate"] / best, "frame_ms": frame_ms,
                       "reference_ms": frame_ms * n / cores}
                rows.append(row)
                log(f"[{name}] N={n}: sequential {best:,.0f} steps/s (numba default {seq_default:,.0f}, 1 thread "
                    f"{seq_one:,.0f}), vector {vec['rate']:,.0f} steps/s")
    target = next((r for r in rows if r["config"] == "64x64 RGB" and r["n"] == 16), None)
    result = {"cores": cores, "render_threads": threads, "numba_threads": numba.get_num_threads(),
              "threading_layer": threading_layer(), "load_average_at_start": load_at_start,
              "load_average_at_end": [round(x, 2) for x in os.getloadavg()], "rows": rows}
    if target is not None:
        result["target"] = {"rate": target["vector"]["rate"], "ratio": target["ratio"],
                            "rate_met": target["vector"]["rate"] >= TARGET_RATE,
                            "ratio_met": target["ratio"] >= TARGET_RATIO}
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print_table(rows, cores, load_at_start)
    print(f"(ref: single-frame render time x N / {cores} cores; the sequential rate is the better of numba's "
          f"default threads and one thread; load average at end {result['load_average_at_end']})")
    if target is not None:
        t = result["target"]
        print(f"target 64x64 RGB, N = 16: {t['rate']:,.0f} env-steps/s (>= {TARGET_RATE:,.0f}: "
              f"{'met' if t['rate_met'] else 'NOT met'}), {t['ratio']:.1f}x sequential (>= {TARGET_RATIO:.0f}x: "
              f"{'met' if t['ratio_met'] else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
