"""Episode bags as ``airplay collect`` writes them, for the LeRobot export: camera-like frames,
flight states with unit quaternions, an episode's records, and a plan of bags over scenes, splits
and settings written with their metadata (test_lerobot_export, test_lerobot_compat)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from airplay.data import messages as M
from airplay.data.bag import write_episode_bag

H, W = 48, 64


def smooth_frames(t: int, phase: float, h: int = H, w: int = W) -> np.ndarray:
    """Camera-like frames (smooth gradients drifting with time), uint8 (t, h, w, 3)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    k = np.arange(t, dtype=np.float32)[:, None, None]
    rgb = [128 + 100 * np.sin((xx + 2 * k) / 11.0 + phase), 128 + 100 * np.cos((yy - k) / 9.0 + phase),
           128 + 60 * np.sin((xx + yy + 3 * k) / 17.0)]
    return np.clip(np.stack(rgb, axis=-1), 0, 255).astype(np.uint8)


def flight_states(t: int, rng: np.random.Generator) -> np.ndarray:
    """(t, 13) states with unit quaternions of a yawing, slightly tilted vehicle."""
    yaw = np.cumsum(rng.normal(0, 0.05, t)) + rng.uniform(-3, 3)
    roll = rng.normal(0, 0.05, t)
    cr, sr, cy, sy = np.cos(roll / 2), np.sin(roll / 2), np.cos(yaw / 2), np.sin(yaw / 2)
    quat = np.stack([sr * cy, sr * sy, cr * sy, cr * cy], axis=1)  # yaw then roll about body x
    pos = np.cumsum(rng.normal(0, 0.03, (t, 3)), axis=0) + [1.0, 2.0, 1.5]
    return np.concatenate([pos, quat, rng.normal(0, 1, (t, 6))], axis=1)


class Intrinsics:
    K = np.array([[40.0, 0, W / 2], [0, 40.0, H / 2], [0, 0, 1]])
    width, height = W, H


def episode_records(t: int, seed: int, setting: str, start_ns: int = 10 * M.CONTROL_DT_NS, odometry=M.odometry_cdr):
    """An episode's bag records (t commanded observations + the terminal one) and its arrays
    (``odometry``: the /odom builder)."""
    rng = np.random.default_rng(seed)
    src = {"rgb": smooth_frames(t + 1, seed), "state": flight_states(t + 1, rng),
           "action": rng.normal(size=(t, 4)).astype(np.float32), "goal": rng.uniform(-5, 5, 3),
           "goal_yaw": 0.3, "goal_image": smooth_frames(1, 20 + seed)[0]}
    stamps = start_ns + M.CONTROL_DT_NS * np.arange(t + 1, dtype=np.int64)
    recs = [("/episode/status", start_ns, M.json_cdr({"episode": 0, "status": "started", "stamp_ns": int(start_ns)})),
            ("/goal_pose", start_ns, M.pose_cdr(src["goal"], src["goal_yaw"], start_ns))]
    if setting == "imagegoal":
        recs.append(("/goal_image", start_ns, M.image_rgb_cdr(src["goal_image"], start_ns)))
    for k, s in enumerate(stamps):
        recs += [("/camera/image_raw", s, M.image_rgb_cdr(src["rgb"][k], s)),
                 ("/camera/camera_info", s, M.camera_info_cdr(Intrinsics, s)),
                 ("/odom", s, odometry(src["state"][k], s))]
        if k < t:
            recs.append(("/cmd_vel", s, M.twist_cdr(src["action"][k], s)))
    recs.append(("/episode/status", stamps[-1], M.json_cdr({"episode": 0, "status": "success", "steps": t})))
    return recs, src


def write_bags(root: Path, plan) -> dict[str, dict]:
    """plan: (scene, split, setting, k, steps, success); returns task_id -> source arrays."""
    sources = {}
    for i, (scene, split, setting, k, steps, success) in enumerate(plan):
        tid = f"{scene}-{setting}-0-{k}"
        recs, src = episode_records(steps, seed=i, setting=setting)
        meta = {"scene": scene, "scene_dir": f"/scenes/{scene}", "split": split, "setting": setting, "seed": 0,
                "index": k, "task_id": tid, "task": {"task_id": tid}, "status": "success" if success else "collision",
                "success": success, "steps": steps, "fps": 50, "source": "airplay collect", "airplay_version": "test"}
        write_episode_bag(root, scene, tid, recs, metadata=meta)
        sources[tid] = src
    return sources


BAG_PLAN = [("indoor_1", "seen", "pointgoal", 0, 21, True), ("indoor_1", "seen", "pointgoal", 1, 13, True),
            ("urban_2", "seen", "pointgoal", 0, 17, True), ("urban_2", "seen", "pointgoal", 1, 9, False),
            ("vegetation_3", "unseen", "imagegoal", 0, 19, True), ("vegetation_3", "unseen", "imagegoal", 1, 11, True)]
