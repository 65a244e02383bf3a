"""``airplay offline-vs-closed``: the command of :mod:`airplay.eval.offline_closed` (its docstring
says what it relates and writes); runs the offline and closed-loop evaluations of
``--checkpoints`` where asked.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from airplay import cli_flags
from airplay.eval.offline_closed import format_relate, relate, write_relate

# -- running the two evaluations --------------------------------------------------------------------
def run_checkpoints(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Offline and closed-loop results of every ``--checkpoints`` folder into ``OUT/runs/<name>/``;
    returns the (offline JSON, eval folder) pairs. A checkpoint that does not load is named."""
    from airplay.eval.offline_run import evaluate_offline, format_offline_table
    from airplay.eval.runner import EvalConfig, evaluate_inprocess
    from airplay.eval.journal import CONFIG_FILE
    from airplay.policies.checkpoint import read_config
    from airplay.scene.scene import scene_dirs

    if not args.dataset or not args.scenes:
        raise ValueError("--checkpoints needs --dataset (held-out demonstrations) and --scenes (closed loop)")
    policies = []
    for ckpt in args.checkpoints:  # every checkpoint loads its config before anything runs
        try:
            cls, _ = read_config(ckpt)
        except Exception as exc:
            raise ValueError(f"--checkpoints {ckpt}: {exc}") from None
        policies.append(cls.name)
    scenes = scene_dirs(args.scenes)
    if not scenes:
        raise ValueError("--scenes: no scene folders found")
    runs = Path(args.out) / "runs"
    names: list[str] = []
    pairs = []
    for ckpt, policy in zip(args.checkpoints, policies):
        name = Path(ckpt).resolve().name
        name = name if name not in names else f"{name}-{len(names)}"
        names.append(name)
        folder = runs / name
        folder.mkdir(parents=True, exist_ok=True)
        off_path = folder / "offline.json"
        settings = {"checkpoint": str(ckpt), "dataset": str(args.dataset), "stride": args.stride,
                    "rollout": args.rollout}
        old = json.loads(off_path.read_text()) if off_path.is_file() else None
        if old is None or any(old.get("meta", {}).get(k) != v for k, v in settings.items()):
            print(f"[{name}] offline errors on {args.dataset} -> {off_path}", flush=True)
            result = evaluate_offline(str(ckpt), str(args.dataset), stride=args.stride, rollout=args.rollout,
                                      max_episodes=args.max_episodes, progress=not args.no_progress)
            off_path.write_text(json.dumps(result, indent=2) + "\n")
            print(format_offline_table(result))
        else:
            print(f"[{name}] offline errors: reusing {off_path}", flush=True)
        eval_dir = folder / "eval"
        print(f"[{name}] closed loop, {len(scenes)} scenes x {args.episodes} episodes -> {eval_dir}", flush=True)
        cfg = EvalConfig(scenes=scenes, policy=policy, setting="pointgoal", episodes=args.episodes, seed=args.seed,
                         render_backend=args.backend, bootstrap=args.bootstrap, checkpoint=str(ckpt))
        evaluate_inprocess(cfg, eval_dir, progress=not args.no_progress, workers=args.workers,
                           resume=(eval_dir / CONFIG_FILE).is_file())
        pairs.append((str(off_path), str(eval_dir)))
    return pairs


def _cmd(args: argparse.Namespace) -> int:
    from airplay.data.lerobot import DatasetError
    from airplay.policies.checkpoint import CheckpointError

    try:
        pairs = [tuple(p) for p in (args.pair or [])]
        if args.checkpoints:
            if not args.out:
                raise ValueError("--checkpoints needs --out (where the runs are written)")
            pairs += run_checkpoints(args)
        if not pairs:
            raise ValueError("give --pair OFFLINE_JSON EVAL_DIR (repeated) or --checkpoints DIR ...")
        result = relate(pairs, bootstrap=args.bootstrap, seed=args.seed)
    except (ValueError, CheckpointError, DatasetError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else format_relate(result))
    if args.out:
        written = write_relate(Path(args.out), result)
        print("\nwritten: " + ", ".join(str(p) for p in written), file=sys.stderr if args.json else sys.stdout)
    return 0


def register(sub) -> None:
    """Add ``airplay offline-vs-closed`` (alias ``eval-offline-relate``) to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "offline-vs-closed", aliases=["eval-offline-relate"],
        help="rank correlation of checkpoints' offline errors (ADE, FDE, P95, yaw, corner FDE) with closed-loop SR/CR",
        description="Relate a set of checkpoints' offline errors (airplay eval-offline) to their closed-loop SR and "
                    "CR (airplay eval): Spearman's rho with 95%% bootstrap intervals over the checkpoints, a table, "
                    "and with --out relate.json, relate.csv, correlations.csv and scatter.png. Give existing results "
                    "(--pair OFFLINE_JSON EVAL_DIR, repeated) or run both for --checkpoints (into OUT/runs/<name>/; "
                    "a rerun reuses them). Definitions in airplay.eval.offline_closed.")
    p.add_argument("--pair", nargs=2, action="append", default=None, metavar=("OFFLINE_JSON", "EVAL_DIR"),
                   help="one checkpoint's offline JSON (eval-offline --out) and closed-loop folder (eval --out)")
    p.add_argument("--checkpoints", nargs="+", default=None, metavar="DIR",
                   help="run eval-offline on --dataset and eval on --scenes for each of these checkpoint folders")
    p.add_argument("--dataset", default=None, metavar="DS", help="with --checkpoints: held-out LeRobot dataset")
    p.add_argument("--scenes", nargs="+", default=None, metavar="DIR",
                   help="with --checkpoints: scene folders (or folders holding them) for the closed loop")
    cli_flags.add_episodes(p)
    p.add_argument("--stride", type=int, default=1, help="with --checkpoints: every N-th frame an offline anchor")
    p.add_argument("--max-episodes", type=int, default=0, help="with --checkpoints: offline on the first N (0: all)")
    p.add_argument("--rollout", choices=("open-loop", "reobserve"), default="open-loop",
                   help="with --checkpoints: offline rollout (airplay eval-offline --rollout)")
    p.add_argument("--workers", type=int, default=1, help="with --checkpoints: closed-loop worker processes")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "gsplat"),
                   help="with --checkpoints: render backend of the closed loop")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates (0: no intervals)")
    cli_flags.add_seed(p, help="seed of the closed-loop tasks and of the bootstrap")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write relate.json, relate.csv, correlations.csv, scatter.png here (and the runs)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    cli_flags.add_no_progress(p)
    p.set_defaults(func=_cmd)
