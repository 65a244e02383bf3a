"""``airplay sweep`` (execution-interval sweeps) and ``airplay disturb`` (local disturbance tests)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from airplay import cli_flags
from airplay.policy_names import POLICY_NAMES, VLN_POLICY_NAMES

FLOWN_HERE = tuple(name for name in POLICY_NAMES if name not in VLN_POLICY_NAMES)
"""The built-in policies sweeps and disturbance tests fly (not the VLN ones)."""


def _policy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default=None,
                   help=f"policy name: {', '.join(FLOWN_HERE)}, or module:factory (default: the checkpoint's "
                        "policy, else expert)")
    p.add_argument("--checkpoint", default=None, metavar="DIR",
                   help="checkpoint folder of a learned policy (the --out of airplay train)")
    cli_flags.add_scenes(p)
    cli_flags.add_episodes(p)
    cli_flags.add_seed(p)
    p.add_argument("--setting", default="pointgoal", choices=("pointgoal", "imagegoal", "goalfree"),
                   help="task setting (default pointgoal)")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "gsplat"), help="render backend")
    p.add_argument("--no-images", action="store_true",
                   help="do not render RGB/depth (for policies that read only the state, e.g. the expert)")
    p.add_argument("--policy-budget-ms", type=float, default=0.0, metavar="MS",
                   help="per-step compute budget of the policy in its own CPU time (default 0: none)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% CIs")
    cli_flags.add_no_progress(p)


def _policy_name(args) -> str:
    """--policy, or the checkpoint's policy, or expert; ValueError naming --policy / --checkpoint."""
    from airplay.policies.registry import is_policy_name, policy_entry

    name = args.policy
    if name is None and args.checkpoint:
        from airplay.policies.checkpoint import read_config

        try:
            cls, _ = read_config(args.checkpoint)
        except Exception as exc:
            raise ValueError(f"--checkpoint {args.checkpoint}: {exc}") from None
        name = cls.name
    name = name or "expert"
    if not is_policy_name(name):
        raise ValueError(f"--policy: unknown policy {name!r}; built-in: {', '.join(FLOWN_HERE)}, or module:factory")
    entry = policy_entry(name)
    if entry is not None and entry.vln:
        raise ValueError(f"--policy: {name} flies VLN episodes; sweeps and disturbance tests take the other policies")
    if entry is not None and entry.learned and not args.checkpoint:
        raise ValueError(f"--checkpoint: policy {name!r} needs a checkpoint folder")
    return name


def _scenes(args) -> list[Path]:
    from airplay.scene.scene import scene_dirs

    scenes = scene_dirs(args.scenes)
    if not scenes:
        raise ValueError("--scenes: no scene folders found")
    return scenes


def _cmd_sweep(args: argparse.Namespace) -> int:
    from airplay.eval.runner import EvalConfig
    from airplay.eval.sweep import check_horizons, run_sweep

    try:
        horizons = check_horizons(args.horizons)
        policy = _policy_name(args)
        scenes = _scenes(args)
        if args.episodes < 1:
            raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
        cfg = EvalConfig(scenes=scenes, policy=policy, setting=args.setting, episodes=args.episodes, seed=args.seed,
                         render_backend=args.backend, render_images=not args.no_images, bootstrap=args.bootstrap,
                         checkpoint=args.checkpoint or "", policy_budget_ms=args.policy_budget_ms, wind=args.wind)
        run_sweep(cfg, horizons, Path(args.out), pair=tuple(args.pair) if args.pair else None,
                  progress=not args.no_progress)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def _cmd_disturb(args: argparse.Namespace) -> int:
    from airplay.eval.disturb import DisturbConfig, run_disturb

    try:
        if args.execution_horizon < 0:
            raise ValueError(f"--execution-horizon must be >= 1 (0: the policy's own), got {args.execution_horizon}")
        cfg = DisturbConfig(scenes=_scenes(args), policy=_policy_name(args), checkpoint=args.checkpoint or "",
                            execution_horizon=args.execution_horizon, setting=args.setting, episodes=args.episodes,
                            seed=args.seed, anchors_per_group=args.anchors_per_group, speed_m_s=args.speed,
                            region_m=args.region, window_s=args.window, render_backend=args.backend,
                            render_images=not args.no_images, bootstrap=args.bootstrap,
                            policy_budget_ms=args.policy_budget_ms)
        run_disturb(cfg, Path(args.out), progress=not args.no_progress)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def register(sub) -> None:
    """Add ``airplay sweep`` and ``airplay disturb`` to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "sweep", help="SR and CR of a policy against its execution horizon H (same tasks for every H)",
        description="Evaluate one policy in-process at several execution horizons H on the same tasks: OUT/H<H>/ "
                    "holds each H's eval results (episodes.jsonl, summary.json, plots); OUT/sweep.json and "
                    "sweep.csv hold SR and CR per H with 95%% CIs per scene and pooled, sweep.png plots them on a "
                    "log axis, pairs_<scene>.png draws matched-start trajectories at two H with their yaw-rate "
                    "commands (docs/evaluation.md).")
    _policy_args(p)
    p.add_argument("--horizons", type=int, nargs="+", required=True, metavar="H",
                   help="execution horizons, e.g. 1 2 4 8 16 32 50 (for one-control policies: periods each "
                        "command is held)")
    p.add_argument("--pair", type=int, nargs=2, default=None, metavar=("H1", "H2"),
                   help="the two horizons of the matched-start plots (default: smallest and largest)")
    cli_flags.add_wind(p)
    p.add_argument("--out", default="out/sweep", help="results folder (default out/sweep)")
    p.set_defaults(func=_cmd_sweep)

    d = sub.add_parser(
        "disturb", help="local disturbance tests: a 0.5 m/s push at anchors on the policy's own flights",
        description="Fly the policy clean, take anchors along its trajectories grouped by clearance (low < 0.75 m, "
                    "medium < 1.5 m, high), fly each again with a velocity push at the anchor toward the nearest "
                    "obstacle, tangential to it, away from it, or none, and report the collision rate CR_ref and "
                    "the minimum clearance d_min_ref inside the observation region, with task-bootstrap 95%% CIs, "
                    "scenes weighted equally. Writes OUT/disturb.json, disturb.csv, anchors.jsonl "
                    "(docs/evaluation.md; definitions in airplay.eval.disturb).")
    _policy_args(d)
    d.add_argument("--execution-horizon", type=int, default=0, metavar="H",
                   help="controls executed per predicted chunk (default: the policy's own)")
    d.add_argument("--anchors-per-group", type=int, default=1, metavar="N",
                   help="anchors drawn per task and clearance group (default 1)")
    d.add_argument("--speed", type=float, default=0.5, metavar="M_S", help="push speed, m/s (default 0.5)")
    d.add_argument("--region", type=float, default=1.0, metavar="M",
                   help="radius of the observation region around the anchor, m (default 1)")
    d.add_argument("--window", type=float, default=5.0, metavar="S",
                   help="longest observation after the push, s (default 5)")
    d.add_argument("--out", default="out/disturb", help="results folder (default out/disturb)")
    d.set_defaults(func=_cmd_disturb)
