"""A synthetic episode's arrays and bag records (random images, depth, full-mantissa states,
commands, goal pose and goal image) and bag metadata to write it with (test_bag, test_view,
test_foxglove_layout)."""

from __future__ import annotations

import numpy as np

from airplay.data import messages as M

DT = M.CONTROL_DT_NS
H, W = 24, 32


class Intrinsics:
    K = np.array([[30.0, 0, 16.0], [0, 30.0, 12.0], [0, 0, 1]])
    width, height = W, H


def unit_quaternions(state: np.ndarray) -> np.ndarray:
    """``state`` with its quaternions (columns 3:7) normalized, as a vehicle's are."""
    state[..., 3:7] /= np.linalg.norm(state[..., 3:7], axis=-1, keepdims=True)
    return state


def synthetic_episode(T: int, seed: int = 0, start_ns: int = 7 * DT, depth: bool = True, imagegoal: bool = True,
                      odometry=M.odometry_cdr):
    """Arrays of an episode with T commanded observations (+ the terminal one) and its records
    (``odometry``: the /odom builder)."""
    rng = np.random.default_rng(seed)
    ep = {
        "rgb": rng.integers(0, 256, (T + 1, H, W, 3), dtype=np.uint8),
        "depth": rng.uniform(0.1, 40.0, (T + 1, H, W)).astype(np.float32),
        "state": unit_quaternions(rng.standard_normal((T + 1, 13)) * np.pi),  # full float64 mantissas
        "action": rng.standard_normal((T, 4)).astype(np.float32),
        "stamps": start_ns + DT * np.arange(T + 1, dtype=np.int64),
        "goal": rng.standard_normal(3), "goal_yaw": 1.234, "goal_image": rng.integers(0, 256, (H, W, 3), np.uint8),
    }
    records = [("/episode/status", start_ns, M.json_cdr({"episode": 0, "status": "started", "stamp_ns": start_ns})),
               ("/goal_pose", start_ns, M.pose_cdr(ep["goal"], ep["goal_yaw"], start_ns))]
    if imagegoal:
        records.append(("/goal_image", start_ns, M.image_rgb_cdr(ep["goal_image"], start_ns)))
    for k, s in enumerate(ep["stamps"]):
        records.append(("/camera/image_raw", s, M.image_rgb_cdr(ep["rgb"][k], s)))
        if depth:
            records.append(("/camera/depth/image_raw", s, M.image_depth_cdr(ep["depth"][k], s)))
        records.append(("/camera/camera_info", s, M.camera_info_cdr(Intrinsics, s)))
        records.append(("/odom", s, odometry(ep["state"][k], s)))
        if k < T:
            records.append(("/cmd_vel", s, M.twist_cdr(ep["action"][k], s)))
    records.append(("/episode/status", ep["stamps"][-1],
                    M.json_cdr({"episode": 0, "status": "success", "steps": T, "trajectory": []})))
    return ep, records


META = {"scene": "sc", "split": "seen", "setting": "imagegoal", "seed": 0, "index": 3, "task_id": "sc-imagegoal-0-3",
        "status": "success", "success": True, "steps": 30, "fps": 50, "source": "test"}
