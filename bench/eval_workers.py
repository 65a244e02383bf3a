"""Benchmark ``airplay eval --workers N``: the same tasks flown in one process and in N processes.

Each row runs ``airplay eval`` as a user would (a fresh process each time, ``--no-progress``) on the
sparse synthetic ``indoor_1`` (``make_scene("indoor", 1, ..., gaussians_per_m2=4)``), seed 0, with
``--workers`` 1 and then each N of ``--workers``, and prints the wall time of each, the speed-up
(one process's time / N processes' time) and whether ``episodes.jsonl`` is byte-identical to one
process's. Policies (``--policies``):

- ``expert``: the A* expert on state only (``--no-images``): cheap episodes, where starting the pool
  (spawning, imports, each worker's own scene load) weighs against the flying;
- ``expert-images``: the expert with RGB + depth rendered every step (CPU renderer), as a run that
  records or shows images pays;
- ``cnn_bc``: a small CNN-BC checkpoint (``--checkpoint DIR``, or, without one, a tiny one trained
  here for 30 steps on synthetic 32x32 demonstrations: the same size as the test suite's; it flies
  badly, but it reads a rendered camera image and runs a torch forward pass every step, which is
  what the pool is for).

A first run of each policy (one episode, not timed) fills the scene cache (``AIRPLAY_CACHE_DIR``, a
fresh one per benchmark) and numba's compilation cache, so that the timed runs compare flying, not
set-up. ``--repeats R`` alternates the order (1, N, ... then N, ..., 1) and prints the median (and
every run's time, by number of processes).
The machine's load (``os.getloadavg``) before and after is printed: on a shared machine the
figures move with what else runs.

    PYTHONPATH=src python bench/eval_workers.py                          # expert, expert-images, cnn_bc
    PYTHONPATH=src python bench/eval_workers.py --policies expert --episodes 16 --workers 2 4
    PYTHONPATH=src python bench/eval_workers.py --json
    PYTHONPATH=src python bench/eval_workers.py --quick   # seconds: expert, 2 episodes, 1 vs 2 processes
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
POLICIES = ("expert", "expert-images", "cnn_bc")


def tiny_cnn_bc(root: Path) -> Path:
    """test/test_policies_cli.py's tiny CNN-BC checkpoint: 30 steps on the test suite's synthetic
    demonstrations (test/helpers/policy_data.py, loaded from its file: test/ stays off sys.path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("policy_data", REPO / "test" / "helpers" / "policy_data.py")
    policy_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(policy_data)
    tiny_train_args, write_tiny_dataset = policy_data.tiny_train_args, policy_data.write_tiny_dataset

    out = root / "cnn_bc"
    args = tiny_train_args("cnn_bc", write_tiny_dataset(root / "dataset"), out)
    subprocess.run([sys.executable, "-m", "airplay.cli", *args], check=True, stdout=subprocess.DEVNULL)
    return out


def eval_command(scenes: Path, policy: str, checkpoint: Path | None, episodes: int, workers: int,
                 out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "airplay.cli", "eval", "--scenes", str(scenes), "--episodes", str(episodes),
           "--seed", "0", "--out", str(out), "--workers", str(workers), "--no-progress", "--bootstrap", "100"]
    if policy == "expert":
        cmd += ["--policy", "expert", "--no-images"]
    elif policy == "expert-images":
        cmd += ["--policy", "expert"]
    else:
        cmd += ["--policy", "cnn_bc", "--checkpoint", str(checkpoint)]
    return cmd


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-3000:]}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", nargs="+", choices=POLICIES, default=None,
                    help="default: all three (quick: expert)")
    ap.add_argument("--episodes", type=int, default=None, help="episodes (tasks) per run (default 6, quick 2)")
    ap.add_argument("--workers", nargs="+", type=int, default=[2], help="N to compare with 1 (default 2)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each N, in alternating order (median)")
    ap.add_argument("--checkpoint", type=Path, default=None, help="cnn_bc: this checkpoint instead of a tiny one")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, not minutes (what make test runs): --policies expert --episodes 2 unless given")
    args = ap.parse_args()
    args.policies = args.policies or (["expert"] if args.quick else list(POLICIES))
    args.episodes = args.episodes or (2 if args.quick else 6)

    from airplay.scene.synthetic import make_scene

    root = Path(tempfile.mkdtemp(prefix="airplay-bench-workers-"))
    env = {**os.environ, "AIRPLAY_CACHE_DIR": str(root / "cache"),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    load_before = os.getloadavg()
    rows = []
    try:
        scenes = root / "scenes"
        make_scene("indoor", 1, scenes / "indoor_1", gaussians_per_m2=4, name="indoor_1")
        checkpoint = args.checkpoint
        if "cnn_bc" in args.policies and checkpoint is None:
            checkpoint = tiny_cnn_bc(root)
        counts = sorted({1, *args.workers})
        for policy in args.policies:
            timed(eval_command(scenes, policy, checkpoint, 1, 1, root / "warm" / policy), env)  # caches, not timed
            times: dict[int, list[float]] = {n: [] for n in counts}
            for r in range(args.repeats):
                for n in (counts if r % 2 == 0 else counts[::-1]):
                    out = root / "runs" / policy / f"w{n}-{r}"
                    times[n].append(timed(eval_command(scenes, policy, checkpoint, args.episodes, n, out), env))
            one = (root / "runs" / policy / "w1-0" / "episodes.jsonl").read_bytes()
            episodes = [json.loads(line) for line in one.decode().splitlines()]
            for n in counts[1:]:
                t1, tn = statistics.median(times[1]), statistics.median(times[n])
                same = all((root / "runs" / policy / f"w{n}-{r}" / "episodes.jsonl").read_bytes() == one
                           for r in range(args.repeats))
                rows.append({"policy": policy, "episodes": len(episodes),
                             "steps": sum(int(e["steps"]) for e in episodes), "workers": n,
                             "one_process_s": round(t1, 2), "n_processes_s": round(tn, 2),
                             "speedup": round(t1 / tn, 2), "identical": same,
                             "runs": {str(k): [round(t, 2) for t in v] for k, v in times.items()}})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    result = {"cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in load_after], "repeats": args.repeats, "quick": args.quick,
              "rows": rows}
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{os.cpu_count()} CPUs; load average before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in load_after)} (1, 5, 15 min)")
    print(f"{'policy':<14} {'episodes':>8} {'steps':>6} {'N':>3} {'1 process s':>12} {'N processes s':>14} "
          f"{'speed-up':>9} {'identical':>10}  runs (s)")
    for r in rows:
        runs = "; ".join(f"{k}: {', '.join(f'{t:.1f}' for t in v)}" for k, v in r["runs"].items())
        print(f"{r['policy']:<14} {r['episodes']:>8} {r['steps']:>6} {r['workers']:>3} {r['one_process_s']:>12.2f} "
              f"{r['n_processes_s']:>14.2f} {r['speedup']:>8.2f}x {r['identical']!s:>10}  {runs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
