"""The learned-policy benchmark (docs/policies.md), end to end on the CPU, resumable:

1. Scenes: synthetic indoor scenes, ``--train-seeds`` (split seen) and ``--unseen-seeds``
   (split unseen), their camera set to IMAGE x IMAGE pixels (same 90 degree field of view).
2. ``airplay collect --expert field_expert --noise-std NOISE``: FLIGHTS demonstrations per
   training scene (task seed 0) by the state-only field expert, DART noise on the executed
   command (the recorded action is the clean label); ``airplay dataset export``.
3. ``airplay train``: CNN-BC, ACT and DP with their CPU configurations (:data:`MODELS`) on all
   flights, and CNN-BC also on the first 1/4 and 1/2 of them (the scaling study); with
   ``--waypoints`` also CNN-BC with waypoint actions (:data:`WAYPOINTS`).
4. ``airplay dagger`` from each policy named in ``--dagger``: ITERATIONS rounds of flying it on
   new tasks of the training scenes, labelling with the field expert, retraining.
5. ``airplay eval``: every checkpoint, the experts and ``random``, PointGoal, on (a) new tasks of
   the training scenes (task seed 100) and (b) the unseen scenes, EPISODES per scene
   (``--train-episodes`` per training scene where given), with bootstrap 95 % intervals.
6. The rest of the evaluation protocol (docs/evaluation.md), unless ``--no-protocol``:
   ``airplay sweep`` of the ``--sweep`` policy over ``--horizons`` on new tasks of the training
   scenes; ``airplay disturb`` of the ``--disturb`` policy on both splits; ``airplay eval-offline``
   of every checkpoint on ``--heldout-flights`` field-expert flights in the unseen scenes and
   ``airplay offline-vs-closed`` of those errors against the unseen-scene evaluations.
7. ``OUT/results.md``, ``OUT/results.json``, ``OUT/sr_vs_flights.png`` and ``airplay report`` of
   everything above: ``OUT/report.html``.

Every stage is skipped when its output exists (an evaluation: made from the same checkpoint with
the same EPISODES), so a rerun resumes, and a rerun with more ``--dagger-iterations`` or
``--episodes`` adds what they change (``--fresh`` starts over).

    .venv/bin/python bench/policy_experiment.py --out out/policy-experiment
    .venv/bin/python bench/policy_experiment.py --quick --out /tmp/pe   # every stage but 6, tiny (make test)

``--quick`` (:data:`QUICK`) runs stages 1-5 and 7 on a tiny scale: 4 Gaussians/m^2, 16x16 images,
2 demonstrations, CNN-BC only, 5 updates, one DAgger round of one task, one episode per split,
the expert as the only reference, one process; the figures mean nothing, every command runs.
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
    "cnn_bc": ["backbone=small", "backbone_width=32", "image_features=128", "hidden_dim=256"],
    "act": ["backbone=small", "backbone_width=16", "dim_model=64", "n_heads=4", "dim_feedforward=256",
            "n_encoder_layers=2", "n_vae_encoder_layers=1", "latent_dim=16", "kl_weight=10.0", "chunk_size=20",
            "execution_horizon=5"],
    "dp": ["backbone=small", "backbone_width=16", "down_dims=[32,64]", "n_groups=8", "image_features=64",
           "step_embed_dim=32", "num_inference_steps=10", "chunk_size=16", "execution_horizon=8", "n_obs_steps=1",
           "prediction_type=sample"],
}
"""CPU configurations: a small CNN trunk at 64x64, no state input (the default), spatial-softmax
image features (CNN-BC, DP). Table 9's ResNet-18 configurations stay the defaults of the code."""
WAYPOINTS = ["actions=waypoint", "chunk_size=10", "execution_horizon=5"]
"""``--waypoints``: CNN-BC's configuration plus these, trained on the poses of the next 10 control
periods (relative to the current one) and executed 5 at a time by the tracker adapter."""
OPTIM = {"cnn_bc": (64, 1e-3), "act": (32, 3e-4), "dp": (64, 1e-3)}
"""(batch size, peak learning rate) per policy."""
REFERENCES = ["field_expert", "expert", "random"]
"""The policies without a checkpoint evaluated beside the learned ones."""
QUICK = {"out": Path("out/policy-experiment-quick"), "density": 4.0, "image_size": 16, "flights": 2,
         "updates": [5, 5, 5], "policies": ["cnn_bc"], "scaling": [], "dagger": ["cnn_bc"], "dagger_iterations": 1,
         "dagger_episodes": 1, "dagger_updates": 5, "episodes": 1, "workers": 1, "threads": 1, "no_protocol": True,
         "references": ["expert"], "protocol_episodes": 1, "heldout_flights": 1}
"""``--quick``'s defaults (options given on the command line still win)."""


def run(cmd: list, log: Path | None = None) -> None:
    print("$ airplay " + " ".join(str(c) for c in cmd[3:]), flush=True)
    t0 = time.perf_counter()
    if log:
        log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") if log else open(os.devnull, "w") as sink:
        # One OpenMP thread unless told otherwise: torch and numba share the runtime, and two spinning
        # threads per process made a DP evaluation 20x slower beside other jobs (docs/policies.md);
        # training sets its own torch threads (--threads).
        env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.run([str(c) for c in cmd], env=env, check=False,
                              stdout=sink if log else None, stderr=subprocess.STDOUT if log else None)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(map(str, cmd))}" + (f"; see {log}" if log else ""))
    print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


def make_scene(folder: Path, category: str, seed: int, density: float, image: int, split: str) -> None:
    import yaml

    if (folder / "scene.yaml").is_file():
        return
    run(AIRPLAY + ["scene", "make", folder, "--category", category, "--seed", seed, "--density", density,
                   "--split", split, "--no-check"])
    spec = yaml.safe_load((folder / "scene.yaml").read_text())
    cam = spec["camera"]
    scale = image / cam["width"]
    cam.update(width=image, height=image, fx=cam["fx"] * scale, fy=cam["fy"] * scale, cx=image / 2, cy=image / 2)
    (folder / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def summary(folder: Path) -> dict:
    s = json.loads((folder / "summary.json").read_text())
    o = s["overall"]
    lines = (folder / "episodes.jsonl").read_text().splitlines()
    statuses = [json.loads(x)["status"] for x in lines]
    return {"episodes": len(lines), **{k: o[k]["mean"] for k in ("sr", "spl", "cr")},
            **{f"{k}_ci95": o[k]["ci95"] for k in ("sr", "cr")},
            "statuses": {x: statuses.count(x) for x in sorted(set(statuses))}}


def made_from(result: Path, checkpoint: Path | None, episodes: int | None = None) -> bool:
    """Whether the results file ``result`` (an eval's summary.json, an eval-offline JSON) exists and
    was made from ``checkpoint`` (its ``meta.checkpoint``; None for the experts and random) with
    ``episodes`` per scene (when given). A resumed run with other settings (more DAgger rounds,
    more episodes) evaluates again."""
    if not result.is_file():
        return False
    meta = json.loads(result.read_text()).get("meta", {})
    if episodes is not None and meta.get("episodes_per_scene") != episodes:
        return False
    recorded = meta.get("checkpoint")
    if checkpoint is None:
        return recorded is None
    return recorded is not None and Path(recorded).resolve() == Path(checkpoint).resolve()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("out/policy-experiment"))
    ap.add_argument("--train-seeds", type=int, nargs="+", default=[0], help="indoor scene seeds to train in")
    ap.add_argument("--unseen-seeds", type=int, nargs="+", default=[7], help="indoor scene seeds never trained in")
    ap.add_argument("--density", type=float, default=30.0, help="Gaussians per m^2 of the synthetic scenes")
    ap.add_argument("--image-size", type=int, default=64, help="camera and policy image side, pixels")
    ap.add_argument("--flights", type=int, default=120, help="demonstrations per training scene")
    ap.add_argument("--noise", type=float, default=0.3, help="DART noise on the demonstrations' executed commands")
    ap.add_argument("--updates", type=int, nargs=3, default=[6000, 1500, 1500], metavar=("CNN_BC", "ACT", "DP"))
    ap.add_argument("--policies", nargs="+", default=["cnn_bc", "act", "dp"], choices=tuple(MODELS))
    ap.add_argument("--scaling", type=float, nargs="*", default=[0.25, 0.5],
                    help="fractions of the flights CNN-BC is also trained on (the scaling plot)")
    ap.add_argument("--waypoints", action="store_true",
                    help="also train CNN-BC with waypoint actions (WAYPOINTS: 10 future poses, tracker, H = 5)")
    ap.add_argument("--dagger", nargs="*", default=["cnn_bc"], choices=tuple(MODELS), help="policies to run DAgger on")
    ap.add_argument("--dagger-iterations", type=int, default=6)
    ap.add_argument("--dagger-episodes", type=int, default=40, help="tasks flown per training scene per iteration")
    ap.add_argument("--dagger-updates", type=int, default=3000, help="updates per DAgger retraining")
    ap.add_argument("--episodes", type=int, default=40, help="closed-loop episodes per scene and split")
    ap.add_argument("--train-episodes", type=int, default=None,
                    help="closed-loop episodes per training scene (default: --episodes), for runs in many scenes")
    ap.add_argument("--workers", type=int, default=2, help="processes for collection, DAgger flights and evaluations")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for training")
    ap.add_argument("--no-protocol", action="store_true", help="skip stage 6 (sweep, disturb, offline vs closed)")
    ap.add_argument("--sweep", default="act", choices=tuple(MODELS), help="policy of the execution-horizon sweep")
    ap.add_argument("--horizons", type=int, nargs="+", default=[1, 2, 5, 10, 20], help="sweep's horizons H")
    ap.add_argument("--disturb", default="cnn_bc", choices=tuple(MODELS), help="policy of the disturbance tests")
    ap.add_argument("--protocol-episodes", type=int, default=10, help="sweep and disturb episodes per scene")
    ap.add_argument("--heldout-flights", type=int, default=10,
                    help="field-expert flights per unseen scene for eval-offline")
    ap.add_argument("--references", nargs="*", default=REFERENCES, choices=REFERENCES,
                    help="policies without a checkpoint evaluated beside the learned ones")
    ap.add_argument("--fresh", action="store_true", help="delete OUT first")
    ap.add_argument("--quick", action="store_true",
                    help="seconds, not hours (what make test runs): QUICK's tiny settings, stage 6 skipped; "
                         "OUT defaults to out/policy-experiment-quick")
    args = ap.parse_args()
    if args.quick:  # QUICK becomes the defaults; what the command line gives still wins
        ap.set_defaults(**QUICK)
        args = ap.parse_args()
    out = args.out
    if args.fresh:
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    times: dict[str, float] = {}

    def stage(name: str) -> None:
        times[name] = round(time.perf_counter() - t_start, 1)
        print(f"\n== {name} ({times[name]:.0f} s in)", flush=True)

    stage("scenes")
    train_scenes = [out / "scenes" / f"indoor_{s}" for s in args.train_seeds]
    unseen_scenes = [out / "scenes" / f"indoor_{s}" for s in args.unseen_seeds]
    for folder, seed in zip(train_scenes, args.train_seeds):
        make_scene(folder, "indoor", seed, args.density, args.image_size, "seen")
    for folder, seed in zip(unseen_scenes, args.unseen_seeds):
        make_scene(folder, "indoor", seed, args.density, args.image_size, "unseen")

    stage("collect + export")
    data = out / "dataset" / "seen"
    if not (data / "meta" / "info.json").is_file():
        run(AIRPLAY + ["collect", out / "bags", "--scenes", *train_scenes, "--per-scene", args.flights, "--seed", 0,
                       "--workers", args.workers, "--expert", "field_expert", "--noise-std", args.noise,
                       "--no-progress"], out / "collect.log")
        shutil.rmtree(out / "dataset", ignore_errors=True)
        run(AIRPLAY + ["dataset", "export", out / "bags", out / "dataset"], out / "export.log")
    total_flights = json.loads((data / "meta" / "info.json").read_text())["total_episodes"]

    updates = dict(zip(("cnn_bc", "act", "dp"), args.updates))
    checkpoints: dict[str, dict] = {}  # name -> {"path", "policy", "flights"}

    def train(kind: str, name: str, flights: int, extra: tuple = ()) -> None:
        ckpt = out / "checkpoints" / name
        checkpoints[name] = {"path": ckpt, "policy": kind, "flights": flights,
                             "actions": "waypoint" if "actions=waypoint" in extra else "velocity"}
        if (ckpt / "model.safetensors").is_file():
            return
        stage(f"train {name}")
        batch, lr = OPTIM[kind]
        cmd = AIRPLAY + ["train", "--policy", kind, "--dataset", data, "--out", ckpt, "--steps", updates[kind],
                         "--batch-size", batch, "--lr", lr, "--image-size", f"{args.image_size}x{args.image_size}",
                         "--threads", args.threads,
                         "--save-every", 1000, "--log-every", 100, "--max-episodes", flights, "--no-progress"]
        for item in [*MODELS[kind], *extra]:
            cmd += ["--set", item]
        run(cmd, out / "checkpoints" / f"{name}.log")

    for kind in args.policies:
        train(kind, kind, total_flights)
    if "cnn_bc" in args.policies:
        for fraction in args.scaling:
            n = max(1, round(fraction * total_flights))
            train("cnn_bc", f"cnn_bc_{n}", n)
    if args.waypoints:
        train("cnn_bc", "cnn_bc_waypoints", total_flights, tuple(WAYPOINTS))
    for kind in args.dagger:
        name = f"{kind}_dagger"
        run_dir = out / "dagger" / kind
        final = run_dir / f"iter_{args.dagger_iterations:02d}" / "checkpoint"
        if not (final / "model.safetensors").is_file():
            stage(f"dagger {kind}")
            batch, lr = OPTIM[kind]
            run(AIRPLAY + ["dagger", "--checkpoint", checkpoints[kind]["path"], "--dataset", data, "--scenes",
                           *train_scenes, "--out", run_dir, "--iterations", args.dagger_iterations, "--episodes",
                           args.dagger_episodes, "--steps", args.dagger_updates, "--batch-size", batch, "--lr", lr / 2,
                           "--image-size", f"{args.image_size}x{args.image_size}", "--workers", args.workers,
                           "--threads", args.threads, "--no-progress"], out / "dagger" / f"{kind}.log")
        checkpoints[name] = {"path": final, "policy": kind, "flights": total_flights, "dagger": args.dagger_iterations,
                             "actions": "velocity"}

    rows: dict[str, dict] = {}
    splits = {"train_scenes_new_tasks": (train_scenes, args.train_episodes or args.episodes),
              "unseen_scenes": (unseen_scenes, args.episodes)}
    for name in [*checkpoints, *args.references]:
        rows[name] = {}
        for split, (scenes, episodes) in splits.items():
            folder = out / "eval" / split / name
            if not made_from(folder / "summary.json", checkpoints.get(name, {}).get("path"), episodes):
                stage(f"eval {name} on {split}")
                shutil.rmtree(folder, ignore_errors=True)
                policy = checkpoints[name]["policy"] if name in checkpoints else name
                cmd = AIRPLAY + ["eval", "--scenes", *scenes, "--policy", policy, "--episodes", episodes,
                                 "--seed", 100, "--out", folder, "--bootstrap", 1000, "--backend", "cpu",
                                 "--workers", args.workers]  # the same results files as one process
                if name in checkpoints:
                    cmd += ["--checkpoint", checkpoints[name]["path"]]
                else:
                    cmd += ["--no-images"]  # the experts and random read no image
                run(cmd, out / "eval" / split / f"{name}.log")
            rows[name][split] = summary(folder)
    reported = [out / "eval"]
    if not args.no_protocol:
        reported += protocol(out, args, checkpoints, train_scenes, unseen_scenes, stage)
    total = time.perf_counter() - t_start
    write_results(out, args, rows, checkpoints, total_flights, total, times)
    stage("report")
    run(AIRPLAY + ["report", *reported, "-o", out / "report.html", "--title", "airplay policy experiment"],
        out / "report.log")
    print(f"written {out / 'report.html'}")
    return 0


def protocol(out: Path, args, checkpoints: dict, train_scenes: list, unseen_scenes: list, stage) -> list[Path]:
    """Stage 6: the sweep, the disturbance tests and offline vs closed loop; the folders to report."""
    folder = out / "protocol"
    common = ["--episodes", args.protocol_episodes, "--seed", 100, "--bootstrap", 1000, "--backend", "cpu",
              "--no-progress"]
    sweep = folder / "sweep"
    if args.sweep in checkpoints and not (sweep / "sweep.json").is_file():
        stage(f"sweep {args.sweep}")
        run(AIRPLAY + ["sweep", "--checkpoint", checkpoints[args.sweep]["path"], "--scenes", *train_scenes,
                       "--horizons", *args.horizons, "--out", sweep, *common], folder / "sweep.log")
    disturb = folder / "disturb"
    if args.disturb in checkpoints and not (disturb / "disturb.json").is_file():
        stage(f"disturb {args.disturb}")
        run(AIRPLAY + ["disturb", "--checkpoint", checkpoints[args.disturb]["path"], "--scenes", *train_scenes,
                       *unseen_scenes, "--out", disturb, *common], folder / "disturb.log")
    heldout = folder / "heldout"
    if not (heldout / "dataset" / "unseen" / "meta" / "info.json").is_file():
        stage("held-out demonstrations")
        shutil.rmtree(heldout, ignore_errors=True)
        run(AIRPLAY + ["collect", heldout / "bags", "--scenes", *unseen_scenes, "--per-scene", args.heldout_flights,
                       "--seed", 200, "--workers", args.workers, "--expert", "field_expert", "--no-progress"],
            folder / "heldout-collect.log")
        run(AIRPLAY + ["dataset", "export", heldout / "bags", heldout / "dataset", "--quiet"],
            folder / "heldout-export.log")
    pairs, inputs = [], []
    for name, info in checkpoints.items():
        if info["actions"] != "velocity":
            continue  # the offline metrics integrate velocity commands (eval-offline refuses waypoints)
        result = folder / "offline" / f"{name}.json"
        if not made_from(result, info["path"]):
            stage(f"eval-offline {name}")
            result.parent.mkdir(parents=True, exist_ok=True)
            run(AIRPLAY + ["eval-offline", "--checkpoint", info["path"], "--dataset", heldout / "dataset" / "unseen",
                           "--stride", 5, "--threads", args.threads, "--out", result, "--no-progress"],
                folder / "offline" / f"{name}.log")
        pairs += ["--pair", result, out / "eval" / "unseen_scenes" / name]
        inputs += [result, out / "eval" / "unseen_scenes" / name / "summary.json"]
    relate = folder / "relate"
    made = relate / "relate.json"
    stale = not made.is_file() or any(p.stat().st_mtime > made.stat().st_mtime for p in inputs)  # an input is newer
    if len(pairs) // 3 >= 3 and stale:  # three checkpoints (each "--pair OFFLINE EVAL") or more
        stage("offline vs closed loop")
        shutil.rmtree(relate, ignore_errors=True)
        run(AIRPLAY + ["offline-vs-closed", *pairs, "--bootstrap", 1000, "--out", relate], folder / "relate.log")
    return [p for p in (sweep, disturb, relate / "relate.json", folder / "offline") if p.exists()]


def write_results(out: Path, args, rows: dict, checkpoints: dict, total_flights: int, total: float,
                  times: dict) -> None:
    def pct(v) -> str:
        return f"{100 * v:.0f}"

    def ci(r, key) -> str:
        lo, hi = r[f"{key}_ci95"]
        return f"{pct(r[key])} [{pct(lo)}, {pct(hi)}]"

    lines = [("| policy | flights | DAgger | new tasks, training scenes: SR % [95 % CI] | CR % | unseen scenes: SR % "
              "[95 % CI] | CR % |"), "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        info = checkpoints.get(name, {})
        a, b = r["train_scenes_new_tasks"], r["unseen_scenes"]
        rounds = f"{info['dagger']} rounds" if info.get("dagger") else "-"
        lines.append(f"| {name} | {info.get('flights', '-')} | {rounds} | {ci(a, 'sr')} "
                     f"| {pct(a['cr'])} | {ci(b, 'sr')} | {pct(b['cr'])} |")
    note = (f"{total_flights} field-expert demonstrations (DART noise {args.noise}) in "
            f"{', '.join(f'indoor_{s}' for s in args.train_seeds)} at {args.image_size}x{args.image_size}; "
            f"{args.train_episodes or args.episodes} and {args.episodes} PointGoal episodes (task seed 100) per "
            f"training and unseen scene; unseen scenes "
            f"{', '.join(f'indoor_{s}' for s in args.unseen_seeds)}. Wall time {total / 60:.1f} min.")
    table = "\n".join(lines)
    (out / "results.md").write_text(table + "\n\n" + note + "\n")
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    (out / "results.json").write_text(json.dumps(
        {"rows": rows, "checkpoints": {k: {**v, "path": str(v["path"])} for k, v in checkpoints.items()},
         "config": config, "models": MODELS, "waypoints": WAYPOINTS, "optim": OPTIM, "wall_time_s": round(total, 1),
         "stage_started_s": times}, indent=2) + "\n")
    scaling = sorted((v["flights"], rows[k]) for k, v in checkpoints.items()
                     if v["policy"] == "cnn_bc" and not v.get("dagger") and v["actions"] == "velocity")
    if scaling:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(5, 3.5))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for split, label in (("train_scenes_new_tasks", "new tasks, training scenes"),
                             ("unseen_scenes", "unseen scenes")):
            x = [f for f, _ in scaling]
            y = [100 * r[split]["sr"] for _, r in scaling]
            err = [[100 * (r[split]["sr"] - r[split]["sr_ci95"][0]) for _, r in scaling],
                   [100 * (r[split]["sr_ci95"][1] - r[split]["sr"]) for _, r in scaling]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
        ax.set_xlabel("demonstration flights")
        ax.set_ylabel("CNN-BC success rate, %")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "sr_vs_flights.png", dpi=120)
    print("\n" + table + "\n\n" + note)
    print(f"written {out / 'results.md'}, {out / 'results.json'} and {out / 'sr_vs_flights.png'}")


if __name__ == "__main__":
    sys.exit(main())
