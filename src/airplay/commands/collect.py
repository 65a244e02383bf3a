"""``airplay collect``: expert flights in scenes -> one rosbag2 MCAP bag per episode (docs/data.md,
"Expert flights at scale"). The work is :mod:`airplay.data.collect`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from airplay import cli_flags


def _cmd_collect(args: argparse.Namespace) -> int:
    from airplay.data.collect import collect, format_summary
    from airplay.data.collect_plan import CollectConfig, CollectError
    from airplay.policies import make_policy
    from airplay.scene.scene import scene_dirs
    from airplay.yaml_config import ConfigError

    cfg = CollectConfig(scenes=tuple(scene_dirs(args.scenes)), per_scene=args.per_scene, out=Path(args.out),
                        setting=args.setting, seed=args.seed, depth=args.depth, image_size=args.image_size,
                        keep_failures=args.keep_failures, render_backend=args.backend, workers=args.workers,
                        ray_address=args.ray, threads=args.threads, protocol=args.protocol,
                        expert=args.expert, noise_std=args.noise_std, vehicle=Path(args.vehicle) if args.vehicle else None)
    try:
        summary = collect(cfg, progress=not args.no_progress, make_expert=make_policy)
    except (CollectError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished flights are in {cfg.out}; run the same command again to resume",
              file=sys.stderr)
        return 130
    print(format_summary(summary))
    print(f"\nbags in {cfg.out}/<scene>/<task_id>/; ledger {cfg.out}/collected.jsonl, summary {cfg.out}/summary.json")
    return 0


def register(sub) -> None:
    """Add ``airplay collect`` to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "collect", help="fly the expert in scenes and write one rosbag2 MCAP bag per episode",
        description="Expert flights in-process (RGB, optionally depth, state, action and goal at 50 Hz), one "
                    "rosbag2 MCAP bag per successful episode in OUT/<scene>/<task_id>/. Resumable: rerun the same "
                    "command after an interruption. Failed flights are counted, not written (--keep-failures).")
    p.add_argument("out", metavar="OUT", help="output folder (created; reused to resume)")
    cli_flags.add_scenes(p)
    p.add_argument("--per-scene", type=int, default=10, help="tasks per scene (default 10)")
    p.add_argument("--workers", type=int, default=1,
                   help="local worker processes (default 1 = in this process); with --ray: CPUs of a local instance")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run the flights as Ray tasks on the cluster at ADDRESS ('auto', 'ray://host:port'), or "
                        "'local' for a private single-machine instance bound to 127.0.0.1")
    p.add_argument("--setting", default="pointgoal", choices=("pointgoal", "imagegoal", "goalfree"))
    cli_flags.add_seed(p)
    p.add_argument("--depth", action="store_true", help="also record the mesh depth image (32FC1, metres)")
    cli_flags.add_image_size(p, "render at this size (same field of view) instead of the scene camera's")
    cli_flags.add_vehicle(p)
    p.add_argument("--keep-failures", action="store_true",
                   help="also write failed flights (collision, out of bounds, timeout); metadata says success false")
    p.add_argument("--backend", default="cpu", choices=("cpu", "auto", "gsplat"), help="renderer (default cpu)")
    p.add_argument("--threads", type=int, default=1,
                   help="numba threads per worker (default 1: flights run in parallel as processes)")
    p.add_argument("--protocol", type=Path, default=None, metavar="YAML",
                   help="protocol file (task sampling, success radius, time limits; default config/protocol.yaml)")
    p.add_argument("--expert", default="expert", choices=("expert", "field_expert"),
                   help="the labelling pilot: expert (A* plan tracked with a clock; default) or field_expert "
                        "(state-only: the command is a function of the state and the goal, for DAgger)")
    p.add_argument("--noise-std", type=float, default=0.0, metavar="V",
                   help="DART noise: fly each command plus Gaussian noise of V m/s (vx, vy, vz) and V rad/s (yaw "
                        "rate), seeded per task; /cmd_vel records the clean label (default 0)")
    cli_flags.add_no_progress(p)
    p.set_defaults(func=_cmd_collect)
