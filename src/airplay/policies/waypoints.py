"""Waypoint action labels: the poses a demonstration reached, relative to the pose of each frame.

A policy trained with ``actions = "waypoint"`` (:class:`airplay.policies.learned.LearnedConfig`)
predicts, at frame t, K waypoints ``[x, y, z, yaw]``: waypoint k is the pose recorded at frame
t + k + 1, minus the pose at t, in t's heading frame (x forward, y left, z up; m) and its yaw
change (rad, wrapped to [-pi, pi)). That is what the ``tracker`` adapter
(:mod:`airplay.policies.adapters`) executes: waypoint k reached (k + 1) control periods after
the prediction. Yaw is :func:`airplay.frames.yaw_from_quat`, the adapter's.
"""

from __future__ import annotations

import numpy as np

from airplay.frames import map_to_heading, wrap_angle, yaws_from_quats_xyzw

ACTION_SPACES = ("velocity", "waypoint")
"""What a learned policy's chunk holds (config field ``actions``): heading-frame velocity and
yaw rate commands (executed by prefix / hold / ensemble), or waypoints (executed by tracker)."""


def episode_waypoints(states: np.ndarray, chunk_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Waypoint labels of one episode of recorded (T, 13) ``states`` (map position, quaternion
    x y z w, ...): ((T, K, 4) float32 waypoints, (T, K) bool padding) for K = ``chunk_size``.

    Frames past the episode's last repeat its last pose and are flagged as padding (the
    velocity labels' convention); the last frame's chunk is all padding."""
    s = np.asarray(states, np.float64)
    if s.ndim != 2 or s.shape[1] < 7 or len(s) < 1:
        raise ValueError(f"states must be (T >= 1, 13), got shape {s.shape}")
    t, k = len(s), int(chunk_size)
    if k < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size!r}")
    position, yaw = s[:, 0:3], yaws_from_quats_xyzw(s[:, 3:7])
    future = np.arange(t)[:, None] + np.arange(1, k + 1)  # (T, K) frame of each waypoint
    is_pad = future > t - 1
    future = np.minimum(future, t - 1)
    xyz = map_to_heading(position[future] - position[:, None], yaw[:, None])
    dyaw = wrap_angle(yaw[future] - yaw[:, None])
    return np.concatenate([xyz, dyaw[..., None]], -1).astype(np.float32), is_pad
