"""``airplay train``: train a learned policy on a LeRobot v3 dataset (``airplay dataset export``)."""

from __future__ import annotations

import argparse
import json

from airplay.policies.registry import DEMONSTRATION_POLICIES
from airplay import cli_flags


def _config_value(text: str):
    """``--set`` values: JSON where it parses (numbers, booleans, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _cmd_train(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    import torch

    from airplay.policies.base import ConfigError
    from airplay.policies.checkpoint import policy_class
    from airplay.policies.dataset import ChunkDataset, load_lerobot_episodes
    from airplay.policies.train import TrainConfig, build_policy, train

    fields = {}
    for item in args.set:
        if "=" not in item:
            raise SystemExit(f"error: --set {item!r} must look like FIELD=VALUE")
        key, value = item.split("=", 1)
        fields[key] = _config_value(value)
    if args.image_size:
        width, height = args.image_size
        if width != height:
            raise SystemExit(f"error: --image-size {width}x{height}: the policies train on square images (WxW)")
        fields["image_size"] = width
    if args.execution_horizon:
        fields["execution_horizon"] = args.execution_horizon
    if fields.get("actions") == "waypoint":  # waypoints are executed by the tracker (and only by it)
        fields.setdefault("adapter", "tracker")
    try:  # validate the config before decoding any video
        defaults = policy_class(args.policy).config_class(**{k: v for k, v in fields.items() if k != "goal"})
    except (ConfigError, TypeError) as err:
        raise SystemExit(f"error: {err}") from None
    if args.max_episodes is not None and args.max_episodes < 1:
        raise SystemExit(f"error: --max-episodes must be >= 1, got {args.max_episodes}")
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    goal = fields.pop("goal", "auto")
    episodes = []
    for folder in args.dataset:  # the first fixes the goal kind ("auto"); the others must have it
        left = None if args.max_episodes is None else args.max_episodes - len(episodes)
        if left is not None and left <= 0:
            break
        more, goal = load_lerobot_episodes(folder, defaults.image_size, goal, progress=not args.no_progress,
                                           max_episodes=left)
        episodes += more
    dataset = ChunkDataset(episodes, defaults.image_size, defaults.n_obs_steps, defaults.chunk_size, goal,
                           defaults.actions)
    print(f"{' + '.join(args.dataset)}: {dataset.num_episodes} episodes, {len(dataset)} frames, goal {goal!r}, images "
          f"{defaults.image_size}x{defaults.image_size} cached ({dataset.images.numel() / 1e6:.0f} MB) "
          f"in {time.perf_counter() - t0:.1f} s")
    try:
        policy = build_policy(args.policy, dataset, goal=goal, **fields)
        cfg = TrainConfig.for_policy(args.policy, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                                     seed=args.seed, device=args.device, save_every=args.save_every,
                                     log_every=args.log_every)
    except (ConfigError, TypeError, ValueError) as err:
        raise SystemExit(f"error: {err}") from None
    params = sum(p.numel() for p in policy.parameters())
    print(f"training {args.policy} ({params / 1e6:.2f} M parameters) for {cfg.steps} updates of {cfg.batch_size}, "
          f"peak lr {cfg.lr:g}, on {cfg.device} -> {args.out}")
    losses = train(policy, dataset, cfg, Path(args.out), progress=not args.no_progress)
    if losses:
        head, tail = losses[: max(1, len(losses) // 20)], losses[-max(1, len(losses) // 20):]
        print(f"loss {sum(head) / len(head):.4f} (first 5 %) -> {sum(tail) / len(tail):.4f} (last 5 %); "
              f"checkpoint {args.out} (log {Path(args.out) / 'train_log.csv'})")
    else:
        print(f"nothing to do: {args.out} already holds {cfg.steps} updates")
    return 0


def register(sub) -> None:
    p = sub.add_parser("train", help="train a learned policy (act, dp, cnn_bc) on a LeRobot v3 dataset",
                       description="Train ACT, Diffusion Policy or CNN-BC with AirPlayground's Table 9 defaults "
                                   "(ACT 34,650 updates x 32 at lr 1e-5; DP 54,450 x 32 at 1e-4; CNN-BC 5,280 x 256 "
                                   "at 3e-4). Resumes from OUT's newest checkpoint. OUT is the --checkpoint of "
                                   "airplay eval.")
    p.add_argument("--policy", required=True, choices=DEMONSTRATION_POLICIES)
    p.add_argument("--dataset", required=True, nargs="+",
                   help="LeRobot v3 dataset folder(s) (airplay dataset export, airplay dagger's OUT/iter_NN/data)")
    p.add_argument("--out", required=True, help="checkpoint folder (made; resumed if it holds checkpoints)")
    p.add_argument("--max-episodes", type=int, default=None, metavar="N",
                   help="train on the first N episodes only (over the datasets in order; e.g. a scaling study)")
    p.add_argument("--steps", type=int, default=None, help="optimizer updates (default: Table 9)")
    p.add_argument("--batch-size", type=int, default=None, help="samples per update (default: Table 9)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default: Table 9)")
    cli_flags.add_image_size(p, "square images of this size, WxW pixels (default: 224x224)")
    p.add_argument("--execution-horizon", type=int, default=0, help="H stored in the checkpoint (default: policy's)")
    p.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    cli_flags.add_seed(p, help="seed of the weights and the sampling")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    p.add_argument("--save-every", type=int, default=1000, help="checkpoint every N updates (0: only at the end)")
    p.add_argument("--log-every", type=int, default=50, help="CSV log line every N updates")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="policy config field, e.g. --set backbone=small --set dim_model=256 (repeatable)")
    cli_flags.add_no_progress(p)
    p.set_defaults(func=_cmd_train)
