"""A learned policy's open-loop errors on held-out demonstrations (a LeRobot v3 dataset from
``airplay dataset export``), on the 0.2 s horizon of DESIGN.md section 6: what ``airplay
eval-offline`` (:mod:`airplay.commands.eval_offline`) runs and prints.

How predicted commands become a trajectory, the two rollouts (``open-loop``, the default:
the policy sees only the anchor's observation; ``reobserve``: it re-predicts on the recorded
observations every H controls), the baselines (``copycat``, ``zero``, ``hold_last``) and every
metric are documented in :mod:`airplay.eval.offline` (the maths, pure numpy); this module
runs the policy and the baselines on the recorded observations and formats the table.

``airplay offline-vs-closed`` (:mod:`airplay.eval.offline_closed`) relates these errors over a
set of checkpoints to their closed-loop SR / CR.
"""

from __future__ import annotations

import math

UNITS = {"ade_cm": "ADE cm", "fde_cm": "FDE cm", "p95_cm": "P95 cm", "yaw_err_deg": "yaw err deg",
         "motion_dir_err_deg": "motion dir deg", "dtw_cm": "DTW cm", "lateral_dir_err_pct": "lat dir err %",
         "yaw_dir_err_pct": "yaw dir err %", "corner_fde_cm": "corner FDE cm", "lag_ade_cm": "lag ADE cm"}
BASELINES = ("copycat", "zero", "hold_last")
"""Baseline predictors scored beside every policy (:mod:`airplay.eval.offline`)."""


def evaluate_offline(checkpoint: str, dataset: str, horizon: int = 10, execution_horizon: int = 0, stride: int = 1,
                     max_episodes: int = 0, batch_size: int = 64, device: str = "cpu", progress: bool = False,
                     rollout: str = "open-loop") -> dict:
    """The offline metrics of the policy in ``checkpoint`` on the LeRobot dataset ``dataset``:
    ``{"overall": {metric: value}, "per_scene": {scene: {...}}, "baselines": {name: {"overall",
    "per_scene", "ratio": {"ade", "fde"}, "skill": {"ade", "fde"}}}, "meta": {...}}`` (NaN -> None).
    ``rollout``: "open-loop" (the policy sees only each anchor's observation) or "reobserve"
    (it predicts again every H controls on the recorded observations); the baselines are
    rolled out the same way. ``ratio`` is policy / baseline, ``skill`` 1 - ratio."""
    from pathlib import Path

    import numpy as np
    import torch
    from tqdm import tqdm

    from airplay.data.keys import ACTION_IS_PAD_KEY, ACTION_KEY
    from airplay.data.lerobot import LeRobotDataset
    from airplay.eval import offline
    from airplay.frames import yaw_from_quat_xyzw
    from airplay.policies.checkpoint import load_policy
    from airplay.policies.dataset import ChunkDataset, load_lerobot_episodes
    from airplay.policies.motion import copycat_commands

    for name, value in (("horizon", horizon), ("stride", stride), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if rollout not in offline.ROLLOUTS:
        raise ValueError(f"rollout must be one of {', '.join(offline.ROLLOUTS)}, got {rollout!r}")
    policy = load_policy(checkpoint, device=device)
    cfg = policy.config
    if getattr(cfg, "actions", "velocity") != "velocity":
        raise ValueError(f"{checkpoint}: the offline metrics integrate velocity commands; this policy predicts "
                         f"{cfg.actions!r} actions (config 'actions')")
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
            needed.append(starts[e] + offline.rollout_frames(anchors, rollout, horizon, h))
    if not plan:
        raise ValueError(f"{dataset}: no episode is longer than the horizon ({horizon} frames)")
    flat = np.concatenate(needed)
    chunks: dict[int, np.ndarray] = {}
    policy.reset()
    with torch.no_grad():
        for i in tqdm(range(0, len(flat), batch_size), desc="predicting", unit="batch", disable=not progress):
            idx = flat[i:i + batch_size]
            batch = data.batch(idx, device)
            batch.pop(ACTION_KEY), batch.pop(ACTION_IS_PAD_KEY)
            pred = policy.predict_batch(batch).float().cpu().numpy()
            chunks.update(zip(idx.tolist(), pred))

    predictors = ("policy",) + BASELINES
    per_anchor: dict[str, dict[str, list]] = {name: {} for name in predictors}
    scenes, trajectories, corners = [], [], []
    for e, anchors in plan:
        ep, s0 = episodes[e], int(starts[e])
        recorded = np.stack([ep.action[t:t + horizon] for t in anchors]).astype(np.float64)
        positions = ep.state[:, 0:3].astype(np.float64)
        yaws = np.array([yaw_from_quat_xyzw(q) for q in ep.state[:, 3:7]])
        lag = offline.lag_ade(recorded, positions, yaws, anchors, 1.0 / fps)
        sources = {"policy": _Shifted(chunks, s0),
                   "copycat": offline.HeldChunks(copycat_commands(ep.state), horizon),
                   "zero": offline.HeldChunks(np.zeros((len(ep.action), 4)), horizon),
                   "hold_last": offline.HeldChunks(offline.hold_last_commands(ep.action), horizon)}
        for name, source in sources.items():
            predicted = offline.rollout_commands(source, anchors, rollout, horizon, h)
            metrics = offline.anchor_metrics(predicted, recorded, 1.0 / fps)
            metrics["lag_ade_m"] = lag
            for key, value in metrics.items():
                per_anchor[name].setdefault(key, []).append(value)
        scenes += [names[e]] * len(anchors)
        trajectories += [e] * len(anchors)
        corners.append(offline.corner_anchors(positions, anchors))
    scenes, trajectories, corners = np.array(scenes), np.array(trajectories), np.concatenate(corners)

    def clean(d: dict) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else round(v, 4)) for k, v in d.items()}

    summaries = {}
    for name in predictors:
        pa = {k: np.concatenate(v) for k, v in per_anchor[name].items()}
        per_scene = {}
        for s in dict.fromkeys(scenes.tolist()):
            sel = scenes == s
            per_scene[s] = clean(offline.summarize({k: v[sel] for k, v in pa.items()}, scenes[sel],
                                                   trajectories[sel], corners[sel]))
            per_scene[s].update(trajectories=int(len(set(trajectories[sel].tolist()))), anchors=int(sel.sum()),
                                corner_anchors=int(corners[sel].sum()))
        overall = clean(offline.summarize(pa, scenes, trajectories, corners))
        overall.update(scenes=len(per_scene), trajectories=len(plan), anchors=int(len(scenes)),
                       corner_anchors=int(corners.sum()))
        summaries[name] = {"overall": overall, "per_scene": per_scene}
    policy_overall = summaries["policy"]["overall"]
    baselines = {}
    for name in BASELINES:
        b = summaries[name]
        ratios = {m: offline.skill(policy_overall[f"{m}_cm"], b["overall"][f"{m}_cm"]) for m in ("ade", "fde")}
        b["ratio"] = clean({m: r for m, (r, _) in ratios.items()})
        b["skill"] = clean({m: k for m, (_, k) in ratios.items()})
        baselines[name] = b
    meta = {"checkpoint": str(checkpoint), "dataset": str(dataset), "policy": policy.name,
            "horizon_controls": horizon, "horizon_s": horizon / fps, "execution_horizon": h, "stride": stride,
            "rollout": rollout,
            "reference": "recorded commands integrated like the predicted ones (airplay.eval.offline)",
            "baselines": "copycat: the current map velocity in the heading frame and yaw rate from "
                         "observation.state (no image, no goal); zero: hover; hold_last: the previous recorded "
                         "command; rolled out like the policy. ratio = policy / baseline, skill = 1 - ratio "
                         "(> 0: the policy beats the baseline)"}
    return {**summaries["policy"], "baselines": baselines, "meta": meta}


class _Shifted:
    """Frame of an episode -> the chunk predicted at its flat index (episode start + frame)."""

    def __init__(self, chunks: dict, start: int) -> None:
        self.chunks, self.start = chunks, start

    def __getitem__(self, frame: int):
        return self.chunks[self.start + int(frame)]


def format_offline_table(result: dict) -> str:
    """One row per scene and an 'all (equal weight)' row for the policy, then one 'all' row per
    baseline and the policy's skill against each; '-' where a metric is undefined."""
    keys = list(UNITS)
    head = f"{'scene':<20}" + "".join(f"{UNITS[k]:>15}" for k in keys) + f"{'trajectories':>14}{'anchors':>9}"
    lines = [head]

    def row(name: str, d: dict) -> str:
        cells = "".join(f"{'-' if d.get(k) is None else format(d[k], '.2f'):>15}" for k in keys)
        return f"{name:<20}{cells}{d['trajectories']:>14}{d['anchors']:>9}"

    for scene, d in result["per_scene"].items():
        lines.append(row(scene, d))
    lines.append(row("all (equal weight)", result["overall"]))
    baselines = result.get("baselines", {})
    for name, b in baselines.items():
        lines.append(row(f"baseline {name}", b["overall"]))
    m = result["meta"]
    rollout = m.get("rollout", "reobserve")
    how = ("the policy sees only the anchor's observation, its chunk (last command held) gives the "
           f"{m['horizon_controls']} commands" if rollout == "open-loop" else
           f"the policy predicts again every H = {m['execution_horizon']} controls on the recorded observations")
    lines.append(f"\n{m['policy']} from {m['checkpoint']} on {m['dataset']}: horizon {m['horizon_controls']} controls "
                 f"({m['horizon_s']:.2f} s), rollout {rollout} ({how}), every {m['stride']} frame(s) an anchor; "
                 f"{result['overall']['corner_anchors']} corner anchors. Lag ADE: the recorded commands integrated vs "
                 f"the recorded positions (the vehicle's response lag, not the policy's error).")
    if baselines:
        lines.append("Baselines, rolled out the same way: copycat = the current motion from observation.state as the "
                     "command (no image, no goal); zero = hover; hold_last = the previous recorded command.")
        f = lambda v, spec: "-" if v is None else format(v, spec)  # noqa: E731
        for name, b in baselines.items():
            lines.append(f"skill vs {name:<9} (1 - policy/{name}, > 0: the policy is better): "
                         f"ADE {f(b['skill']['ade'], '+.2f')} (ratio {f(b['ratio']['ade'], '.2f')}), "
                         f"FDE {f(b['skill']['fde'], '+.2f')} (ratio {f(b['ratio']['fde'], '.2f')})")
    return "\n".join(lines)
