"""Inference latency of the learned policies at their paper configurations, 224x224 RGB.

For ACT (ResNet-18, 512-wide transformer, 50-control chunks, H = 50), Diffusion Policy
(ResNet-18 per frame, 2 frames, U-Net 256/512/1024 over 32 controls, 10 DDIM steps, H = 16)
and CNN-BC (ResNet-18, one control, H = 1), with untrained weights (latency does not depend
on them) and PointGoal inputs:

* per call: ``predict_action_chunk`` on a fresh observation (median of ``--calls`` after one
  warm-up call), the observation preprocessing included;
* per executed control: the mean time of ``select_action`` over ``3 H`` consecutive control
  steps (one chunk prediction every H steps, the queue in between; ``H`` with ``--quick``) -
  what the 50 Hz loop pays on average (budget: 20 ms).

On the CPU always; on CUDA too when torch sees a GPU.

    .venv/bin/python bench/policy.py                 # table
    .venv/bin/python bench/policy.py --threads 2 --calls 5 --json
    .venv/bin/python bench/policy.py --quick         # one timed call, one chunk of controls (make test)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from airplay.policies.train import build_policy

POLICIES = ("cnn_bc", "act", "dp")


def observation(rng: np.random.Generator) -> dict:
    return {"rgb": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8), "state": rng.normal(size=13).astype(np.float32),
            "goal": rng.normal(size=3).astype(np.float32), "depth": np.zeros((224, 224, 1), np.float32)}


def measure(kind: str, device: str, calls: int, chunks: int = 3) -> dict:
    torch.manual_seed(0)
    policy = build_policy(kind).to(device).eval()
    stats = {"mean": np.zeros(13), "std": np.ones(13), "min": -np.ones(13), "max": np.ones(13)}
    policy.normalizer.set_stats({key: {k: v[: s.center.numel()] for k, v in stats.items()}
                                 for key, s in zip(policy.normalizer.keys, policy.normalizer.stats.values())})
    rng = np.random.default_rng(0)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times = []
    for i in range(calls + 1):
        obs = observation(rng)
        policy.reset()
        sync()
        t0 = time.perf_counter()
        policy.predict_action_chunk(obs)
        sync()
        if i:
            times.append(time.perf_counter() - t0)
    h = policy.config.execution_horizon
    policy.reset()
    obs_list = [observation(rng) for _ in range(chunks * h)]
    sync()
    t0 = time.perf_counter()
    for obs in obs_list:
        policy.select_action(obs)
    sync()
    per_control = (time.perf_counter() - t0) / len(obs_list)
    return {"policy": kind, "device": device, "params_M": sum(p.numel() for p in policy.parameters()) / 1e6,
            "chunk": policy.config.chunk_size, "H": h, "per_call_ms": 1e3 * statistics.median(times),
            "per_control_ms": 1e3 * per_control}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="timed calls per policy (after one warm-up; "
                        "default 5, quick 1)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="seconds (what make test runs): 1 timed call, select_action over H controls, not 3 H")
    args = parser.parse_args(argv)
    calls = args.calls or (1 if args.quick else 5)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = [measure(kind, dev, calls, 1 if args.quick else 3) for dev in devices for kind in args.policies]
    if args.json:
        print(json.dumps({"threads": torch.get_num_threads(), "quick": args.quick, "rows": rows}))
        return 0
    print(f"224x224 RGB, PointGoal, torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{'policy':8} {'device':6} {'params M':>9} {'K':>3} {'H':>3} {'per call ms':>12} {'per control ms':>15}")
    for r in rows:
        print(f"{r['policy']:8} {r['device']:6} {r['params_M']:9.2f} {r['chunk']:3d} {r['H']:3d} "
              f"{r['per_call_ms']:12.1f} {r['per_control_ms']:15.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
