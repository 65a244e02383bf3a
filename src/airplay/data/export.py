"""Episode bags -> LeRobot v3.0 datasets, one dataset per scene split (``airplay dataset export``).

Splits follow AirPlayground's Table 5: each scene is "seen" (train) or "unseen" (held-out
scenes) in its scene.yaml, and every episode bag carries it in its metadata. The export
writes ONE DATASET PER SPLIT, ``OUT/seen/`` and ``OUT/unseen/``, each a complete LeRobot
dataset whose info.json has ``"splits": {"<split>": "0:N"}`` and an ``"airplay"`` block
(split, scenes, source); training opens ``OUT/seen`` and can never see unseen scenes by
accident. ``OUT/export.json`` lists what was exported and what was skipped (and why).

The export is atomic: everything is written under ``OUT/../.<name>.partial/`` and renamed to
``OUT`` at the end; an existing non-empty ``OUT`` is never overwritten.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from airplay.data.lerobot import TASK_TEXT, LeRobotWriter
from airplay.frames import headings_from_quats_xyzw, map_to_heading

SPLITS = ("seen", "unseen")


class ExportError(ValueError):
    """Bags that cannot go into one dataset; the message names the bag and the field."""


def goal_vectors(state: np.ndarray, goal_position: np.ndarray) -> np.ndarray:
    """(T, 3) goal minus position in the heading frame (x fwd, y left, z up; m) per frame.

    Vectorised :func:`airplay.world.env.goal_in_heading_frame` with the heading of each state.
    """
    d = np.asarray(goal_position, np.float64)[None, :] - state[:, :3]
    yaw = headings_from_quats_xyzw(state[:, 3:7])
    return map_to_heading(d, yaw)


@dataclass
class _SplitWriter:
    writer: LeRobotWriter
    setting: str
    shape: tuple[int, int]
    has_goal_image: bool
    first_bag: Path
    scenes: set[str] = field(default_factory=set)
    frames: int = 0


def _episode_meta(ep, bag: Path) -> dict:
    md = ep.metadata
    meta = {k: md.get(k) for k in ("scene", "split", "setting", "task_id", "seed", "index", "status", "success",
                                   "steps", "source")}
    meta = {k: v for k, v in meta.items() if v is not None}
    meta["bag"] = str(bag)
    meta["start_stamp_ns"] = int(ep.stamps_ns[0])
    if ep.goal_position is not None:
        meta["goal_position"] = [float(v) for v in ep.goal_position]
        meta["goal_yaw"] = float(ep.goal_yaw)
    if "task" in md:
        meta["task"] = md["task"]
    return meta


def export_bags(bag_dirs, out_root, *, split: str = "all", depth: bool = False, include_failures: bool = False,
                crf: int = 18, progress: bool = True) -> dict:
    """Convert episode bags to LeRobot datasets ``OUT/<split>/`` and return a summary dict.

    bag_dirs: bag folders or folders of bags (searched recursively);
    split: "all" (every split found) or one of "seen"/"unseen" (only that split);
    depth: also export ``observation.depth`` (the bags must have depth images);
    include_failures: also export episodes whose outcome was not a success;
    crf: H.264 quality of the videos (lower = closer to the rendered RGB).
    Skipped (with the reason in the summary): bags never finalized (writer killed), failed
    flights (unless include_failures), bags of another split.
    """
    from tqdm import tqdm

    from airplay.data.bag import BagError, iter_episode_bags, read_episode

    if split != "all" and split not in SPLITS:
        raise ExportError(f"split {split!r}: expected 'all', 'seen' or 'unseen'")
    out_root = Path(out_root)
    if out_root.exists() and (not out_root.is_dir() or any(out_root.iterdir())):
        raise FileExistsError(f"{out_root}: exists and is not empty; refusing to overwrite (choose a new folder)")
    bags = iter_episode_bags(bag_dirs)
    if not bags:
        raise ExportError(f"no episode bags under {', '.join(str(b) for b in bag_dirs)}")
    out_root.parent.mkdir(parents=True, exist_ok=True)
    partial = out_root.parent / f".{out_root.name}.partial"
    if partial.exists():
        shutil.rmtree(partial)  # left by an interrupted export
    partial.mkdir()
    t0 = time.perf_counter()
    writers: dict[str, _SplitWriter] = {}
    skipped: list[dict] = []
    try:
        for bag in tqdm(bags, unit="bag", disable=not progress, dynamic_ncols=True, desc="export"):
            try:
                ep = read_episode(bag)
            except BagError as err:
                skipped.append({"bag": str(bag), "reason": str(err)})
                continue
            md = ep.metadata
            reason = None
            if not ep.complete:
                reason = "bag was never finalized (writer interrupted)"
            elif md.get("split") not in SPLITS:
                reason = f"metadata field 'split' is {md.get('split')!r}, expected 'seen' or 'unseen'"
            elif split != "all" and md["split"] != split:
                reason = f"split {md['split']} not exported"
            elif not include_failures and not md.get("success", False):
                reason = f"flight outcome {md.get('status')!r} (not a success)"
            if reason:
                skipped.append({"bag": str(bag), "reason": reason})
                continue
            _add(writers, partial, md["split"], ep, bag, depth, crf)
        if not writers:
            raise ExportError(f"none of the {len(bags)} bags could be exported: "
                              + "; ".join(f"{s['bag']}: {s['reason']}" for s in skipped[:5]))
        datasets = {}
        for name, sw in writers.items():
            sw.writer.extra_info.update({"split": name, "scenes": sorted(sw.scenes), "setting": sw.setting,
                                         "source": "airplay dataset export"})
            info = sw.writer.finalize()
            datasets[name] = {"path": str(out_root / name), "episodes": info["total_episodes"],
                              "frames": info["total_frames"], "duration_s": info["total_frames"] / info["fps"],
                              "scenes": sorted(sw.scenes), "setting": sw.setting}
        summary = {"out": str(out_root), "bags": len(bags), "datasets": datasets, "skipped": skipped,
                   "seconds": time.perf_counter() - t0}
        (partial / "export.json").write_text(json.dumps(summary, indent=2))
        if out_root.exists():
            out_root.rmdir()  # empty (checked above)
        os.rename(partial, out_root)
    except BaseException:
        for sw in writers.values():
            if not sw.writer._finalized:
                sw.writer.abort()
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return summary


def _add(writers: dict[str, _SplitWriter], partial: Path, split: str, ep, bag: Path, depth: bool, crf: int) -> None:
    md = ep.metadata
    setting = md.get("setting") or ("pointgoal" if ep.goal_position is not None else "goalfree")
    shape = tuple(ep.rgb.shape[1:3])
    sw = writers.get(split)
    if sw is None:
        writer = LeRobotWriter(partial / split, image_shape=shape, goal=ep.goal_position is not None,
                               goal_image=ep.goal_image is not None, depth=depth, crf=crf,
                               splits={split: "0:0"}, extra_info={})
        sw = writers[split] = _SplitWriter(writer, setting, shape, ep.goal_image is not None, bag)
    if setting != sw.setting:
        raise ExportError(f"{bag}: setting {setting!r} differs from {sw.setting!r} of {sw.first_bag} in split "
                          f"{split}; export different settings into different folders")
    if shape != sw.shape:
        raise ExportError(f"{bag}: images are {shape[1]}x{shape[0]}, {sw.first_bag} has "
                          f"{sw.shape[1]}x{sw.shape[0]} (one dataset needs one image size)")
    if (ep.goal_image is not None) != sw.has_goal_image:
        raise ExportError(f"{bag}: /goal_image {'present' if ep.goal_image is not None else 'missing'}, "
                          f"unlike {sw.first_bag}")
    if depth and ep.depth is None:
        raise ExportError(f"{bag}: --depth asked but the bag has no /camera/depth/image_raw")
    goal = goal_vectors(ep.state, ep.goal_position) if ep.goal_position is not None else None
    n = sw.writer.add_episode(ep.rgb, ep.state, ep.action, goal=goal, goal_image=ep.goal_image,
                              depth=ep.depth if depth else None, task=TASK_TEXT.get(setting, setting),
                              meta=_episode_meta(ep, bag))
    sw.writer.splits[split] = f"0:{n + 1}"
    sw.scenes.add(str(md.get("scene", "")))
    sw.frames += len(ep)


def format_export_summary(summary: dict) -> str:
    """A readable table of an export summary."""
    lines = [f"{'split':8} {'episodes':>8} {'frames':>8} {'duration s':>10}  scenes"]
    for name, d in summary["datasets"].items():
        lines.append(f"{name:8} {d['episodes']:8d} {d['frames']:8d} {d['duration_s']:10.1f}  {', '.join(d['scenes'])}")
    lines.append(f"{len(summary['skipped'])} of {summary['bags']} bags skipped; written to {summary['out']} "
                 f"in {summary['seconds']:.1f} s")
    reasons: dict[str, int] = {}
    for s in summary["skipped"]:
        reasons[s["reason"]] = reasons.get(s["reason"], 0) + 1
    lines.extend(f"  skipped {n}: {r}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    return "\n".join(lines)
