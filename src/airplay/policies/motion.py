"""The vehicle's own motion as a command: what the copycat baseline predicts, and what a learned
policy reads of the state with ``state_features: velocity`` (:mod:`airplay.policies.observation`).
Offline evaluation (:mod:`airplay.eval.offline`) scores the copycat with these functions."""

from __future__ import annotations

import numpy as np

from airplay.frames import map_to_heading, yaws_from_quats_xyzw


def heading_frame(vectors: np.ndarray, yaw: np.ndarray) -> np.ndarray:
    """Map-frame vectors (..., 3) in the heading frame of ``yaw`` (...): :func:`airplay.frames.map_to_heading`."""
    return map_to_heading(vectors, yaw)


def copycat_commands(states: np.ndarray) -> np.ndarray:
    """The copycat predictor: (..., 13) ``observation.state`` -> (..., 4) commands that copy the
    vehicle's current motion, with no image and no goal.

    State: [x y z (map ENU, m), qx qy qz qw (base_link in map), vx vy vz (map, m/s),
    wx wy wz (body rates FLU, rad/s)]. Command: [vx vy vz (heading frame: x forward, y left,
    z up; m/s), yaw_rate (rad/s)]: the map velocity rotated into the heading frame of the yaw
    :func:`airplay.frames.yaw_from_quat`, and the body rates rotated into the map frame, their
    z component (the yaw rate up to terms in the tilt; the exact body z rate when level)."""
    s = np.asarray(states, np.float64)
    if s.shape[-1] != 13:
        raise ValueError(f"states must be (..., 13), got {s.shape}")
    x, y, z, w = (s[..., i] for i in range(3, 7))
    yaw = yaws_from_quats_xyzw(s[..., 3:7])
    v = heading_frame(s[..., 7:10], yaw)
    # Third row of the rotation matrix of (x, y, z, w) times the body rates: world-z angular rate.
    yaw_rate = (2.0 * (x * z - w * y) * s[..., 10] + 2.0 * (y * z + w * x) * s[..., 11]
                + (1.0 - 2.0 * (x * x + y * y)) * s[..., 12])
    return np.concatenate([v, yaw_rate[..., None]], axis=-1)
