"""``airplay eval-offline``: a learned policy's open-loop errors on held-out demonstrations
(:mod:`airplay.eval.offline_run` runs them, :mod:`airplay.eval.offline` defines them), printed as a
table or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from airplay import cli_flags
from airplay.eval.offline_run import evaluate_offline, format_offline_table


def _cmd_eval_offline(args: argparse.Namespace) -> int:
    from pathlib import Path

    from airplay.data.lerobot import DatasetError
    from airplay.policies.checkpoint import CheckpointError

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    try:
        result = evaluate_offline(args.checkpoint, args.dataset, horizon=args.horizon,
                                  execution_horizon=args.execution_horizon, stride=args.stride,
                                  max_episodes=args.max_episodes, batch_size=args.batch_size, device=args.device,
                                  progress=not args.no_progress and not args.json, rollout=args.rollout)
    except (CheckpointError, DatasetError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text if args.json else format_offline_table(result))
    return 0


def register(sub) -> None:
    """Add ``airplay eval-offline`` to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "eval-offline", help="open-loop errors of a learned policy on held-out demonstrations (ADE, FDE, ...)",
        description="Run a learned policy on the recorded observations of a LeRobot v3 dataset and compare, at "
                    "every anchor frame, its commands for the next 0.2 s (10 controls) with the recorded ones, both "
                    "integrated into trajectories from the anchor: ADE, FDE, P95 (cm), yaw error, motion-direction "
                    "error (deg), DTW (cm), lateral / yaw direction error rates (%%), corner FDE (cm). Scenes are "
                    "weighted equally (DESIGN.md section 6; definitions in airplay.eval.offline). The same metrics "
                    "are printed for the baselines copycat (the current motion as the command), zero and hold_last, "
                    "with the policy's skill 1 - policy/baseline of ADE and FDE.")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint folder (airplay train --out)")
    p.add_argument("--dataset", required=True, metavar="DS",
                   help="LeRobot v3 dataset of held-out demonstrations (e.g. EXPORT/unseen)")
    p.add_argument("--horizon", type=int, default=10, help="controls compared per anchor (default 10 = 0.2 s)")
    p.add_argument("--execution-horizon", type=int, default=0, metavar="H",
                   help="--rollout reobserve: commands used from each predicted chunk before predicting again "
                        "(default: the checkpoint's); not used open loop")
    p.add_argument("--rollout", choices=("open-loop", "reobserve"), default="open-loop",
                   help="open-loop (default): the policy sees only the anchor's observation, its chunk (last "
                        "command held) gives the horizon's commands; reobserve: it predicts again every H controls "
                        "on the recorded observations (recorded states after the anchor enter the prediction)")
    p.add_argument("--stride", type=int, default=1, help="every N-th frame is an anchor (default 1: all)")
    p.add_argument("--max-episodes", type=int, default=0, help="only the first N episodes (0: all)")
    p.add_argument("--batch-size", type=int, default=64, help="observations per forward pass")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    p.add_argument("--out", default=None, metavar="JSON", help="also write the JSON result to this file")
    cli_flags.add_no_progress(p)
    p.set_defaults(func=_cmd_eval_offline)
