"""The small learned-policy experiment (README, "Learned policies"), end to end on the CPU:

1. ``airplay scene make``: one synthetic scene; its camera set to IMAGE x IMAGE pixels (same
   90 degree field of view) so that collection and closed-loop evaluation render the same images.
2. ``airplay collect``: FLIGHTS expert flights (task seed 0) for training and HELD_OUT flights
   (task seed 1) for the offline metrics; ``airplay dataset export`` of each.
3. ``airplay train``: CNN-BC, ACT and DP, small models (``--set`` below), UPDATES each.
4. ``airplay eval``: closed loop, EPISODES PointGoal tasks (task seed 100, not flown in the
   data) for each learned policy, the random policy and the expert; ``airplay eval-offline``
   of each learned policy on the held-out flights.
5. The table (SR / SPL / CR with episode counts, offline ADE / FDE) printed and written to
   ``OUT/results.md`` and ``OUT/results.json``.

Every stage is skipped when its output exists, so a rerun resumes (``--fresh`` starts over).
Run it niced on a shared machine:

    nice -n 10 .venv/bin/python bench/policy_experiment.py --out out/policy-experiment
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

AIRPLAY = [sys.executable, "-m", "airplay.cli"]

MODELS = {
    "cnn_bc": ["backbone=small", "backbone_width=16", "image_features=64", "hidden_dim=128"],
    "act": ["backbone=small", "backbone_width=16", "dim_model=64", "n_heads=4", "dim_feedforward=256",
            "n_encoder_layers=2", "n_vae_encoder_layers=1", "latent_dim=16", "kl_weight=10.0"],
    "dp": ["backbone=small", "backbone_width=16", "down_dims=[32,64]", "n_groups=8", "image_features=64",
           "step_embed_dim=32", "num_inference_steps=10"],
}
"""Small models for a CPU run (Table 9's architectures are ResNet-18 and widths of hundreds)."""
OPTIM = {"cnn_bc": (64, 1e-3), "act": (16, 1e-4), "dp": (16, 1e-3)}
"""(batch size, peak learning rate) per policy for the brief run."""


def run(cmd: list[str], log: Path | None = None) -> None:
    print("$ " + " ".join(str(c) for c in cmd[2:] if True), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run([str(c) for c in cmd], env={**os.environ, "PYTHONUNBUFFERED": "1"},
                          stdout=None if log is None else open(log, "w"), stderr=subprocess.STDOUT if log else None)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}" + (f"; see {log}" if log else ""))
    print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


def make_scene(folder: Path, category: str, seed: int, density: float, image: int) -> None:
    import yaml

    if (folder / "scene.yaml").is_file():
        return
    run(AIRPLAY + ["scene", "make", str(folder), "--category", category, "--seed", str(seed), "--density",
                   str(density), "--no-check"])
    spec = yaml.safe_load((folder / "scene.yaml").read_text())
    cam = spec["camera"]
    scale = image / cam["width"]
    cam.update(width=image, height=image, fx=cam["fx"] * scale, fy=cam["fy"] * scale, cx=image / 2, cy=image / 2)
    (folder / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def collect_and_export(out: Path, scene: Path, flights: int, seed: int, name: str, workers: int) -> Path:
    bags, data = out / f"bags_{name}", out / f"dataset_{name}"
    if not (data / "seen" / "meta" / "info.json").is_file():
        run(AIRPLAY + ["collect", str(bags), "--scenes", str(scene), "--per-scene", str(flights), "--seed", str(seed),
                       "--workers", str(workers)])
        shutil.rmtree(data, ignore_errors=True)
        run(AIRPLAY + ["dataset", "export", str(bags), str(data)])
    return data / "seen"


def summary_row(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    lines = (folder / "episodes.jsonl").read_text().splitlines()
    o = summary["overall"]
    return {"episodes": len(lines), **{k: o[k]["mean"] for k in ("sr", "spl", "cr", "ne")},
            "steps_per_s": summary["meta"]["control_steps_per_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("out/policy-experiment"))
    ap.add_argument("--category", default="indoor", choices=("indoor", "urban", "vegetation"))
    ap.add_argument("--scene-seed", type=int, default=0)
    ap.add_argument("--density", type=float, default=30.0, help="Gaussians per m^2 of the synthetic scene (render cost)")
    ap.add_argument("--image-size", type=int, default=64, help="camera and policy image side, pixels")
    ap.add_argument("--flights", type=int, default=40, help="expert flights for training")
    ap.add_argument("--held-out", type=int, default=6, help="expert flights (other tasks) for the offline metrics")
    ap.add_argument("--updates", type=int, nargs=3, default=[500, 150, 100], metavar=("CNN_BC", "ACT", "DP"),
                    help="optimizer updates per policy")
    ap.add_argument("--episodes", type=int, default=5, help="closed-loop episodes per policy")
    ap.add_argument("--policies", nargs="+", default=["cnn_bc", "act", "dp"], choices=tuple(MODELS))
    ap.add_argument("--workers", type=int, default=2, help="collection worker processes")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for training")
    ap.add_argument("--fresh", action="store_true", help="delete OUT first")
    args = ap.parse_args()
    out = args.out
    if args.fresh:
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    times: dict[str, float] = {}

    def stage(name: str):
        times[name] = time.perf_counter()
        print(f"\n== {name} ({time.perf_counter() - t_start:.0f} s in)", flush=True)

    stage("scene")
    scene = out / "scenes" / f"{args.category}_{args.scene_seed}"
    make_scene(scene, args.category, args.scene_seed, args.density, args.image_size)
    stage("collect + export")
    train_ds = collect_and_export(out, scene, args.flights, 0, "train", args.workers)
    held_ds = collect_and_export(out, scene, args.held_out, 1, "heldout", args.workers)
    updates = dict(zip(("cnn_bc", "act", "dp"), args.updates))
    for kind in args.policies:
        stage(f"train {kind}")
        ckpt = out / "checkpoints" / kind
        if not (ckpt / "model.safetensors").is_file():
            batch, lr = OPTIM[kind]
            cmd = AIRPLAY + ["train", "--policy", kind, "--dataset", str(train_ds), "--out", str(ckpt), "--steps",
                             str(updates[kind]), "--batch-size", str(batch), "--lr", str(lr), "--image-size",
                             str(args.image_size), "--threads", str(args.threads), "--save-every", "0",
                             "--log-every", "25"]
            for item in MODELS[kind]:
                cmd += ["--set", item]
            run(cmd)
    rows: dict[str, dict] = {}
    for kind in [*args.policies, "random", "expert"]:
        stage(f"closed loop {kind}")
        folder = out / "eval" / kind
        if not (folder / "summary.json").is_file():
            cmd = AIRPLAY + ["eval", "--scenes", str(scene), "--policy", kind, "--episodes", str(args.episodes),
                             "--seed", "100", "--out", str(folder), "--bootstrap", "200", "--backend", "cpu"]
            if kind in MODELS:
                cmd += ["--checkpoint", str(out / "checkpoints" / kind)]
            else:
                cmd += ["--no-images"]  # the expert and random read no image
            run(cmd)
        rows[kind] = summary_row(folder)
        if kind in MODELS:
            off = out / "offline" / f"{kind}.json"
            if not off.is_file():
                run(AIRPLAY + ["eval-offline", "--checkpoint", str(out / "checkpoints" / kind), "--dataset",
                               str(held_ds), "--out", str(off), "--threads", str(args.threads)])
            rows[kind]["offline"] = json.loads(off.read_text())["overall"]
    total = time.perf_counter() - t_start

    def pct(v):
        return "-" if v is None else f"{100 * v:.0f}"

    def cm(row, key):
        v = row.get("offline", {}).get(key)
        return "-" if v is None else f"{v:.1f}"

    header = "| policy | episodes | SR % | SPL % | CR % | NE m | offline ADE cm | offline FDE cm | yaw err deg |"
    lines = [header, "|---|---|---|---|---|---|---|---|---|"]
    for kind, r in rows.items():
        lines.append(f"| {kind} | {r['episodes']} | {pct(r['sr'])} | {pct(r['spl'])} | {pct(r['cr'])} | "
                     f"{r['ne']:.2f} | {cm(r, 'ade_cm')} | {cm(r, 'fde_cm')} | {cm(r, 'yaw_err_deg')} |")
    config = {"category": args.category, "scene_seed": args.scene_seed, "density": args.density,
              "image_size": args.image_size, "flights": args.flights, "held_out": args.held_out,
              "updates": updates, "episodes": args.episodes, "models": MODELS, "optim": OPTIM}
    info = json.loads((train_ds / "meta" / "info.json").read_text())
    note = (f"{args.flights} expert flights ({info['total_episodes']} exported, {info['total_frames']} frames) in "
            f"{scene.name} at {args.image_size}x{args.image_size}; updates {updates}; closed loop {args.episodes} "
            f"PointGoal tasks (seed 100) per policy; offline on {args.held_out} held-out flights (seed 1). "
            f"Wall time {total / 60:.1f} min.")
    table = "\n".join(lines)
    (out / "results.md").write_text(table + "\n\n" + note + "\n")
    (out / "results.json").write_text(json.dumps({"rows": rows, "config": config, "wall_time_s": round(total, 1),
                                                  "stage_started_s": {k: round(v - t_start, 1)
                                                                      for k, v in times.items()}}, indent=2) + "\n")
    print("\n" + table + "\n\n" + note)
    print(f"written {out / 'results.md'} and {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
