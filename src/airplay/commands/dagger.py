"""``airplay dagger``: fly a learned policy, label what it visits with the state-only expert,
retrain, repeat (:mod:`airplay.policies.dagger`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from airplay import cli_flags


def _cmd_dagger(args: argparse.Namespace) -> int:
    from airplay.scene.scene import scene_dirs
    from airplay.policies.dagger import DaggerConfig, DaggerError, dagger

    try:
        cfg = DaggerConfig(checkpoint=Path(args.checkpoint), datasets=tuple(Path(d) for d in args.dataset),
                           scenes=tuple(scene_dirs(args.scenes)), out=Path(args.out), iterations=args.iterations,
                           episodes=args.episodes, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                           seed=args.seed, beta=args.beta,
                           image_size=args.image_size,
                           workers=args.workers, ray=args.ray, threads=args.threads, backend=args.backend,
                           vehicle=args.vehicle, batch=args.fly_batch, frames_memory_gb=args.frames_memory_gb)
        records = dagger(cfg, progress=not args.no_progress)
    except DaggerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: run the same command again to resume from {args.out}", file=sys.stderr)
        return 130
    print("| iteration | episodes flown | policy SR % | labelled frames | fly s | train s | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in records:
        print(f"| {r['iteration']} | {r['episodes']} | {100 * r['success_rate']:.0f} | {r['frames']} | "
              f"{r['fly_s']:.0f} | {r['train_s']:.0f} | {r.get('peak_rss_mb') or '-'} |")
    print(f"final checkpoint: {records[-1]['checkpoint']}")
    return 0


def register(sub) -> None:
    """Add ``airplay dagger`` to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "dagger", help="DAgger: fly a learned policy, label its states with the state-only expert, retrain",
        description="Each iteration flies the current policy on new PointGoal tasks of the scenes, labels every "
                    "visited state with the cost-to-go expert (a function of the state and goal alone), writes those "
                    "frames as a LeRobot dataset OUT/iter_NN/data, and retrains from the previous weights on the "
                    "demonstrations plus all labelled frames (OUT/iter_NN/checkpoint). Resumable: rerun the same "
                    "command.")
    p.add_argument("--checkpoint", required=True, help="the initial policy (airplay train --out)")
    p.add_argument("--dataset", nargs="+", required=True, help="its LeRobot training dataset folder(s)")
    cli_flags.add_scenes(p)
    p.add_argument("--out", required=True, help="run folder (made; reused to resume)")
    p.add_argument("--iterations", type=int, default=3)
    cli_flags.add_episodes(p, help="tasks flown per scene per iteration")
    p.add_argument("--steps", type=int, default=500, help="optimizer updates per retraining (default 500)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-4)
    cli_flags.add_seed(p, 1000, "task seed base: iteration N samples with seed + N")
    p.add_argument("--beta", type=float, default=0.0,
                   help="probability of executing the expert's label instead, per step, as beta**N in iteration N")
    cli_flags.add_image_size(p, "render size (the policy's data size)")
    cli_flags.add_vehicle(p)
    p.add_argument("--workers", type=int, default=1, help="rollout processes (default 1)")
    p.add_argument("--ray", metavar="ADDRESS", default=None, help="fly as Ray tasks ('local', 'auto', ray://...)")
    p.add_argument("--fly-batch", type=int, default=16, metavar="N",
                   help="episodes of a scene each rollout process flies at a time, one forward pass per control step "
                        "for all, with the same rollouts as one at a time (default 16; 1: one at a time)")
    p.add_argument("--frames-memory-gb", type=float, default=2.0, metavar="GB",
                   help="training frames the retraining keeps in memory (default 2); the rest are read from the "
                        "datasets' frame caches on disk per batch, so memory does not grow with the rounds")
    p.add_argument("--threads", type=int, default=0, help="torch threads for training (default: torch's)")
    p.add_argument("--backend", default="cpu", choices=("cpu", "auto", "gsplat"), help="renderer (default cpu)")
    cli_flags.add_no_progress(p)
    p.set_defaults(func=_cmd_dagger)
