"""``airplay replay``: recorded flights through a policy, the replayed commands against the sent
ones (:mod:`airplay.policies.replay`)."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_replay(args: argparse.Namespace) -> int:
    from airplay.data.bag_reader import BagError, iter_episode_bags
    from airplay.policies.replay import ReplayError, replay_bag

    try:
        bags = iter_episode_bags(args.bags)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not bags:
        print(f"error: no episode bag under {' '.join(args.bags)}", file=sys.stderr)
        return 2
    rows, failed = [], 0
    for bag in bags:
        try:
            r = replay_bag(bag, args.policy, args.checkpoint or None, args.execution_horizon or None,
                           threads=args.threads)
        except (BagError, ReplayError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        ok = r.within(args.tolerance)
        failed += not ok
        rows.append({**r.to_dict(), "ok": ok})
    if args.json:
        print(json.dumps({"tolerance": args.tolerance, "replays": rows}))
    else:
        print(f"| bag | task | steps | equal | max abs diff | first diff | dropped | within {args.tolerance:g} |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['bag']} | {r['task_id']} | {r['steps']} | {r['equal']} | {r['max_abs_diff']:.3g} | "
                  f"{'-' if r['first_diff_step'] is None else r['first_diff_step']} | {r['dropped']} | "
                  f"{'yes' if r['ok'] else 'NO'} |")
    return 1 if failed else 0


def register(sub) -> None:
    """Add ``airplay replay`` to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "replay", help="replay recorded flights through a policy: its commands against the ones sent",
        description="Read episode bags (a flight recorded with `airplay launch fly ... record:=DIR`, or any "
                    "airplay episode bag), rebuild every observation the policy node acted on (state, RGB and "
                    "depth, the goal), reset the policy with the bag's task and call it on them in order, and "
                    "compare its commands with the recorded /cmd_vel. Exit status 0 when every command is within "
                    "--tolerance (default 0: bit for bit), 1 when one is not, 2 on an unreadable bag.")
    p.add_argument("bags", nargs="+", metavar="BAG", help="episode bag folders, or folders holding them")
    p.add_argument("--policy", required=True, help="the policy that flew (e.g. cnn_bc, act, dp, expert)")
    p.add_argument("--checkpoint", default="", metavar="DIR", help="its checkpoint folder (learned policies)")
    p.add_argument("--execution-horizon", type=int, default=0, metavar="H",
                   help="the execution horizon the flight used (0: the checkpoint's)")
    p.add_argument("--tolerance", type=float, default=0.0,
                   help="largest |replayed - recorded| accepted, m/s or rad/s (default 0: equal)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch and numba threads, as the policy node had them (default 1: its count on a vehicle)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_cmd_replay)
