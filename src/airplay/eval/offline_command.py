"""``airplay eval-offline``: a learned policy's open-loop errors on held-out demonstrations
(a LeRobot v3 dataset of issue 5's export), on the 0.2 s horizon of DESIGN.md section 6.

How predicted commands become a trajectory, and every metric, is documented in
:mod:`airplay.eval.offline` (the maths, pure numpy); this module runs the policy on the
recorded observations and prints the table (or ``--json``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

UNITS = {"ade_cm": "ADE cm", "fde_cm": "FDE cm", "p95_cm": "P95 cm", "yaw_err_deg": "yaw err deg",
         "motion_dir_err_deg": "motion dir deg", "dtw_cm": "DTW cm", "lateral_dir_err_pct": "lat dir err %",
         "yaw_dir_err_pct": "yaw dir err %", "corner_fde_cm": "corner FDE cm", "lag_ade_cm": "lag ADE cm"}


def evaluate_offline(checkpoint: str, dataset: str, horizon: int = 10, execution_horizon: int = 0, stride: int = 1,
                     max_episodes: int = 0, batch_size: int = 64, device: str = "cpu", progress: bool = False) -> dict:
    """The offline metrics of the policy in ``checkpoint`` on the LeRobot dataset ``dataset``:
    ``{"overall": {metric: value}, "per_scene": {scene: {...}}, "meta": {...}}`` (NaN -> None)."""
    from pathlib import Path

    import numpy as np
    import torch
    from tqdm import tqdm

    from airplay.data.lerobot import LeRobotDataset
    from airplay.eval import offline
    from airplay.policies.checkpoint import load_policy
    from airplay.policies.dataset import ChunkDataset, load_lerobot_episodes
    from airplay.policies.expert import yaw_from_quat_xyzw

    for name, value in (("horizon", horizon), ("stride", stride), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    policy = load_policy(checkpoint, device=device)
    cfg = policy.config
    h = int(execution_horizon or cfg.execution_horizon)
    if not 1 <= h <= cfg.chunk_size:
        raise ValueError(f"execution horizon must be in 1..{cfg.chunk_size} (the chunk size of {checkpoint}), got {h}")
    ds = LeRobotDataset(dataset, cache_episodes=1)
    fps = ds.fps
    if fps != 50:
        raise ValueError(f"{Path(dataset) / 'meta/info.json'}: fps {fps}, the offline horizon is defined at 50 Hz")
    names = [str(e.meta.get("scene", Path(dataset).name)) for e in ds.episodes]
    episodes, goal = load_lerobot_episodes(dataset, cfg.image_size, cfg.goal, progress=progress)
    if max_episodes:
        episodes, names = episodes[:max_episodes], names[:max_episodes]
    data = ChunkDataset(episodes, cfg.image_size, cfg.n_obs_steps, cfg.chunk_size, goal)
    starts = np.concatenate([[0], np.cumsum([len(e.rgb) for e in episodes])[:-1]])

    # Which frames need a prediction, all episodes together (flat indices), then predict them in batches.
    plan, needed = [], []
    for e, ep in enumerate(episodes):
        anchors = offline.episode_anchors(len(ep.rgb), horizon, stride)
        if len(anchors):
            plan.append((e, anchors))
            needed.append(starts[e] + offline.prediction_frames(anchors, horizon, h))
    if not plan:
        raise ValueError(f"{dataset}: no episode is longer than the horizon ({horizon} frames)")
    flat = np.concatenate(needed)
    chunks: dict[int, np.ndarray] = {}
    policy.reset()
    with torch.no_grad():
        for i in tqdm(range(0, len(flat), batch_size), desc="predicting", unit="batch", disable=not progress):
            idx = flat[i:i + batch_size]
            batch = data.batch(idx, device)
            batch.pop("action"), batch.pop("action_is_pad")
            pred = policy.predict_batch(batch).float().cpu().numpy()
            chunks.update(zip(idx.tolist(), pred))

    per_anchor: dict[str, list] = {}
    scenes, trajectories, corners = [], [], []
    for e, anchors in plan:
        ep, s0 = episodes[e], int(starts[e])
        predicted = offline.anchor_commands(_Shifted(chunks, s0), anchors, horizon, h)
        recorded = np.stack([ep.action[t:t + horizon] for t in anchors]).astype(np.float64)
        metrics = offline.anchor_metrics(predicted, recorded, 1.0 / fps)
        positions = ep.state[:, 0:3].astype(np.float64)
        yaws = np.array([yaw_from_quat_xyzw(q) for q in ep.state[:, 3:7]])
        metrics["lag_ade_m"] = offline.lag_ade(recorded, positions, yaws, anchors, 1.0 / fps)
        for key, value in metrics.items():
            per_anchor.setdefault(key, []).append(value)
        scenes += [names[e]] * len(anchors)
        trajectories += [e] * len(anchors)
        corners.append(offline.corner_anchors(positions, anchors))
    per_anchor = {k: np.concatenate(v) for k, v in per_anchor.items()}
    scenes, trajectories, corners = np.array(scenes), np.array(trajectories), np.concatenate(corners)

    def clean(d: dict) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else round(v, 4)) for k, v in d.items()}

    per_scene = {}
    for s in dict.fromkeys(scenes.tolist()):
        sel = scenes == s
        per_scene[s] = clean(offline.summarize({k: v[sel] for k, v in per_anchor.items()}, scenes[sel],
                                               trajectories[sel], corners[sel]))
        per_scene[s].update(trajectories=int(len(set(trajectories[sel].tolist()))), anchors=int(sel.sum()),
                            corner_anchors=int(corners[sel].sum()))
    overall = clean(offline.summarize(per_anchor, scenes, trajectories, corners))
    overall.update(scenes=len(per_scene), trajectories=len(plan), anchors=int(len(scenes)),
                   corner_anchors=int(corners.sum()))
    meta = {"checkpoint": str(checkpoint), "dataset": str(dataset), "policy": policy.name,
            "horizon_controls": horizon, "horizon_s": horizon / fps, "execution_horizon": h, "stride": stride,
            "reference": "recorded commands integrated like the predicted ones (airplay.eval.offline)"}
    return {"overall": overall, "per_scene": per_scene, "meta": meta}


class _Shifted:
    """Frame of an episode -> the chunk predicted at its flat index (episode start + frame)."""

    def __init__(self, chunks: dict, start: int) -> None:
        self.chunks, self.start = chunks, start

    def __getitem__(self, frame: int):
        return self.chunks[self.start + int(frame)]


def format_offline_table(result: dict) -> str:
    """One row per scene and an 'all (equal weight)' row; '-' where a metric is undefined."""
    keys = list(UNITS)
    head = f"{'scene':<20}" + "".join(f"{UNITS[k]:>15}" for k in keys) + f"{'trajectories':>14}{'anchors':>9}"
    lines = [head]

    def row(name: str, d: dict) -> str:
        cells = "".join(f"{'-' if d.get(k) is None else format(d[k], '.2f'):>15}" for k in keys)
        return f"{name:<20}{cells}{d['trajectories']:>14}{d['anchors']:>9}"

    for scene, d in result["per_scene"].items():
        lines.append(row(scene, d))
    lines.append(row("all (equal weight)", result["overall"]))
    m = result["meta"]
    lines.append(f"\n{m['policy']} from {m['checkpoint']} on {m['dataset']}: horizon {m['horizon_controls']} controls "
                 f"({m['horizon_s']:.2f} s), H = {m['execution_horizon']}, every {m['stride']} frame(s) an anchor; "
                 f"{result['overall']['corner_anchors']} corner anchors. Lag ADE: the recorded commands integrated vs "
                 f"the recorded positions (the vehicle's response lag, not the policy's error).")
    return "\n".join(lines)


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
                                  progress=not args.no_progress and not args.json)
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
                    "weighted equally (DESIGN.md section 6; definitions in airplay.eval.offline).")
    p.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint folder (airplay train --out)")
    p.add_argument("--dataset", required=True, metavar="DS",
                   help="LeRobot v3 dataset of held-out demonstrations (e.g. EXPORT/unseen)")
    p.add_argument("--horizon", type=int, default=10, help="controls compared per anchor (default 10 = 0.2 s)")
    p.add_argument("--execution-horizon", type=int, default=0, metavar="H",
                   help="commands used from each predicted chunk before predicting again (default: the checkpoint's)")
    p.add_argument("--stride", type=int, default=1, help="every N-th frame is an anchor (default 1: all)")
    p.add_argument("--max-episodes", type=int, default=0, help="only the first N episodes (0: all)")
    p.add_argument("--batch-size", type=int, default=64, help="observations per forward pass")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (default: torch's)")
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    p.add_argument("--out", default=None, metavar="JSON", help="also write the JSON result to this file")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_eval_offline)
