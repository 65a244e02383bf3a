"""Inference latency of the learned policies, batch 1, on the CPU (one core by default): at their
paper configurations (224x224 RGB) and at the policy benchmark's (bench/policy_experiment.py
``MODELS``, 64x64).

Paper: ACT (ResNet-18, 512-wide transformer, 50-control chunks, H = 50), Diffusion Policy
(ResNet-18 per frame, 2 frames, U-Net 256/512/1024 over 32 controls, 10 DDIM steps, H = 16)
and CNN-BC (ResNet-18, one control, H = 1). Benchmark: the small CNN trunks the policy benchmark
trains. Untrained weights (latency does not depend on them), PointGoal inputs:

* per call: ``predict_action_chunk`` on a fresh observation (p50 / p95 / max of ``--calls``
  after one warm-up call), the observation preprocessing included;
* per control: ``select_action`` over ``3 H`` consecutive control steps (one chunk prediction
  every H steps, the queue in between; ``H`` with ``--quick``): the mean, what the 50 Hz loop pays
  on average, and the largest single step, which a synchronous loop must fit in its 20 ms period.

On the CPU always; on CUDA too when torch sees a GPU. On the CPU each policy is also exported to
ONNX (``airplay export --onnx``'s code, checked against torch to its tolerance) and timed in
onnxruntime on the same number of threads (:class:`airplay.policies.onnx_runtime.OnnxPolicy`), the
two backends interleaved call by call on the same observations, so that the ratio ORT / torch of
one run compares them under the same load. ``--quick`` exports the benchmark configurations only
(the paper ones take tens of seconds to export); ``--no-onnx`` times torch alone.

    .venv/bin/python bench/policy.py                 # table: both configurations, one thread
    .venv/bin/python bench/policy.py --threads 2 --calls 20 --json
    .venv/bin/python bench/policy.py --configs benchmark
    .venv/bin/python bench/policy.py --quick         # one timed call, one chunk of controls (make test)
    .venv/bin/python bench/policy.py --no-onnx       # torch only
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from airplay.policies.train import build_policy
from benchlib import finish_meta, run_meta
from policy_experiment import MODELS

POLICIES = ("cnn_bc", "act", "dp")
CONFIGS = ("paper", "benchmark")
CONTROL_PERIOD_MS = 20.0


def config_fields(kind: str, config: str) -> dict:
    """The policy's config fields: the code's defaults (paper, 224x224) or the benchmark's ``--set``
    items at 64x64."""
    if config == "paper":
        return {}
    fields = {"image_size": 64}
    for item in MODELS[kind]:
        key, value = item.split("=", 1)
        try:
            fields[key] = json.loads(value)
        except json.JSONDecodeError:
            fields[key] = value
    return fields


def observation(rng: np.random.Generator, size: int) -> dict:
    return {"rgb": rng.integers(0, 255, (size, size, 3), dtype=np.uint8), "state": rng.normal(size=13).astype(np.float32),
            "goal": rng.normal(size=3).astype(np.float32), "depth": np.zeros((size, size, 1), np.float32)}


def percentiles_ms(times_s: list[float]) -> dict:
    t = 1e3 * np.asarray(times_s)
    return {"p50": round(float(np.percentile(t, 50)), 3), "p95": round(float(np.percentile(t, 95)), 3),
            "max": round(float(t.max()), 3), "mean": round(float(t.mean()), 3)}


def _onnx_policy(policy, folder: Path, threads: int):
    """``policy`` exported (and checked) into ``folder``, and its onnxruntime policy on ``threads``."""
    from airplay.policies.checkpoint import save_policy
    from airplay.policies.onnx_export import export_onnx
    from airplay.policies.onnx_runtime import OnnxPolicy

    save_policy(policy, folder)
    meta = export_onnx(folder, folder / "onnx", log=lambda _: None)
    return OnnxPolicy(folder / "onnx", threads=threads), meta


def _fits(control: dict) -> dict:
    return {"fits_period_mean": control["mean"] <= CONTROL_PERIOD_MS,
            "fits_period_every_step": control["max"] <= CONTROL_PERIOD_MS}


def measure(kind: str, config: str, device: str, calls: int, chunks: int = 3, onnx_dir: Path | None = None,
            threads: int = 1) -> dict:
    """One row: torch (and, with ``onnx_dir``, onnxruntime interleaved with it) on ``device``."""
    torch.manual_seed(0)
    policy = build_policy(kind, **config_fields(kind, config)).to(device).eval()
    size = policy.config.image_size
    stats = {"mean": np.zeros(13), "std": np.ones(13), "min": -np.ones(13), "max": np.ones(13)}
    policy.normalizer.set_stats({key: {k: v[: s.center.numel()] for k, v in stats.items()}
                                 for key, s in zip(policy.normalizer.keys, policy.normalizer.stats.values())})
    backends = {"torch": policy}
    export = None
    if onnx_dir is not None and device == "cpu":
        backends["onnxruntime"], export = _onnx_policy(policy, onnx_dir / f"{kind}-{config}", threads)
    rng = np.random.default_rng(0)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    times = {name: [] for name in backends}
    for i in range(calls + 1):
        obs = observation(rng, size)
        for name, p in backends.items():  # interleaved: both under the same load
            p.reset()
            sync()
            t0 = time.perf_counter()
            p.predict_action_chunk(obs)
            sync()
            if i:
                times[name].append(time.perf_counter() - t0)
    h = policy.config.execution_horizon
    obs_list = [observation(rng, size) for _ in range(chunks * h)]
    steps = {name: [] for name in backends}
    for p in backends.values():
        p.reset()
    for obs in obs_list:
        for name, p in backends.items():
            sync()
            t0 = time.perf_counter()
            p.select_action(obs)
            sync()
            steps[name].append(time.perf_counter() - t0)
    call, control = percentiles_ms(times["torch"]), percentiles_ms(steps["torch"])
    row = {"policy": kind, "config": config, "device": device, "image_size": size,
           "params_M": round(sum(p.numel() for p in policy.parameters()) / 1e6, 3),
           "chunk": policy.config.chunk_size, "H": h, "per_call_ms": call, "per_control_ms": control, **_fits(control)}
    if export is not None:
        o_call, o_control = percentiles_ms(times["onnxruntime"]), percentiles_ms(steps["onnxruntime"])
        row["onnxruntime"] = {"per_call_ms": o_call, "per_control_ms": o_control, **_fits(o_control),
                              "max_abs_error": export["check"]["max_abs_error"],
                              "tolerance": export["check"]["tolerance"], "export_s": export["check"]["export_s"]}
        row["ort_over_torch"] = {"call_p50": round(o_call["p50"] / call["p50"], 3),
                                 "control_mean": round(o_control["mean"] / control["mean"], 3)}
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=None, help="timed calls per policy (after one warm-up; "
                        "default 20, quick 1)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: one core of the vehicle's computer; 0: torch's default)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS,
                        help="paper (the code's defaults, 224x224) and/or benchmark (policy_experiment.py, 64x64)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="seconds (what make test runs): 1 timed call, select_action over H controls, not 3 H; "
                             "onnxruntime at the benchmark configurations only")
    parser.add_argument("--no-onnx", action="store_true", help="time torch only (no ONNX export, no onnxruntime)")
    args = parser.parse_args(argv)
    meta = run_meta("policy")
    calls = args.calls or (1 if args.quick else 20)
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    with tempfile.TemporaryDirectory(prefix="bench-policy-onnx-") as tmp:
        def onnx_dir(config: str) -> Path | None:
            return None if args.no_onnx or (args.quick and config == "paper") else Path(tmp)

        rows = [measure(kind, config, dev, calls, 1 if args.quick else 3, onnx_dir(config), args.threads)
                for dev in devices for config in args.configs for kind in args.policies]
    result = {"threads": torch.get_num_threads(), "torch": torch.__version__, "quick": args.quick, "calls": calls,
              "control_period_ms": CONTROL_PERIOD_MS, "rows": rows, "meta": finish_meta(meta)}
    if not args.no_onnx:
        import onnxruntime

        result["onnxruntime"] = onnxruntime.__version__
    if args.json:
        print(json.dumps(result))
        return 0
    ort = f", onnxruntime {result['onnxruntime']}" if "onnxruntime" in result else ""
    print(f"batch 1, PointGoal, torch {torch.__version__}{ort}, {torch.get_num_threads()} CPU thread(s), {calls} calls")
    print(f"{'policy':8} {'config':10} {'device':6} {'px':>4} {'params M':>9} {'K':>3} {'H':>3} {'backend':11} "
          f"{'call p50/p95/max ms':>22} {'control mean/max ms':>21}  {f'fits {CONTROL_PERIOD_MS:g} ms':11} "
          f"ORT/torch call p50")
    for r in rows:
        for backend, b in (("torch", r), ("onnxruntime", r.get("onnxruntime"))):
            if b is None:
                continue
            c, k = b["per_call_ms"], b["per_control_ms"]
            ratio = f"{r['ort_over_torch']['call_p50']:.2f}" if backend == "onnxruntime" else ""
            print(f"{r['policy']:8} {r['config']:10} {r['device']:6} {r['image_size']:>4} {r['params_M']:9.2f} "
                  f"{r['chunk']:3d} {r['H']:3d} {backend:11} {c['p50']:>8.1f}/{c['p95']:.1f}/{c['max']:<7.1f} "
                  f"{k['mean']:>10.2f}/{k['max']:<9.1f}  {fits_text(b):11} {ratio}")
    return 0


def fits_text(b: dict) -> str:
    """Whether a backend's controls fit the period: every step, on average only, or no."""
    return "every step" if b["fits_period_every_step"] else ("on average" if b["fits_period_mean"] else "no")


if __name__ == "__main__":
    raise SystemExit(main())
