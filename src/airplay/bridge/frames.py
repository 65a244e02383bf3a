"""Conversions between ROS and PX4/MAVLink conventions: the one place that knows NED/FRD.

ROS side (DESIGN.md section 3): world ``map`` is ENU (x east, y north, z up), body
``base_link`` is FLU (x forward, y left, z up), quaternions are ordered (x, y, z, w) and
give the orientation of base_link in map (they rotate FLU vectors into ENU). Yaw is
counter-clockwise from east.

PX4/MAVLink side: world "local" frame is NED (x north, y east, z down), body is FRD
(x forward, y right, z down), quaternions are ordered (w, x, y, z) as in
ATTITUDE_QUATERNION and give the body (FRD) in local (NED). Yaw is clockwise from north.

    ENU -> NED:  (x, y, z) -> (y, x, -z)      (its own inverse)
    FLU -> FRD:  (x, y, z) -> (x, -y, -z)     (its own inverse)
    yaw_ned = pi/2 - yaw_enu, wrapped to [-pi, pi)
    R_ned_frd = P @ R_enu_flu @ F, with P the ENU->NED and F the FRD->FLU axis swaps

The generic conversions (ENU<->NED, FLU<->FRD, quaternion reordering and products, yaw,
angle wrapping, heading frame) are in :mod:`airplay.frames`; this module holds what is
MAVLink-specific: MAV_FRAME values, type masks and the velocity-setpoint conversions.

The policy command (:mod:`airplay.sim.dynamics`) is ``[vx, vy, vz, yaw_rate]``: vx forward
and vy left in the heading frame (base_link FLU rotated by yaw only, i.e. level), vz up,
m/s, yaw_rate rad/s counter-clockwise. :func:`heading_command_to_px4_body_ned` turns it into
a SET_POSITION_TARGET_LOCAL_NED in MAV_FRAME_BODY_NED (forward, right, down; PX4 rotates
it by the vehicle's yaw only, i.e. it is a heading frame too) with the yaw rate clockwise.
"""

from __future__ import annotations

import numpy as np

from airplay import frames

# MAV_FRAME values (common.xml).
MAV_FRAME_LOCAL_NED = 1
MAV_FRAME_BODY_NED = 8
MAV_FRAME_BODY_OFFSET_NED = 9

# POSITION_TARGET_TYPEMASK bits (common.xml); a set bit means "ignore this field".
_IGNORE_PX, _IGNORE_PY, _IGNORE_PZ = 1, 2, 4
_IGNORE_VX, _IGNORE_VY, _IGNORE_VZ = 8, 16, 32
_IGNORE_AX, _IGNORE_AY, _IGNORE_AZ = 64, 128, 256
_IGNORE_YAW, _IGNORE_YAW_RATE = 1024, 2048
#: type_mask for "velocity + yaw rate" setpoints: position, acceleration and yaw ignored (= 1479).
TYPE_MASK_VELOCITY_YAW_RATE = (_IGNORE_PX | _IGNORE_PY | _IGNORE_PZ | _IGNORE_AX | _IGNORE_AY
                               | _IGNORE_AZ | _IGNORE_YAW)

#: type_mask for "position + yaw" setpoints (MAV_FRAME_LOCAL_NED: x north, y east, z down, m; yaw rad
#: clockwise from north): velocity, acceleration and yaw rate ignored (= 2552). The bridge holds
#: position with it (geofence and stale-command holds).
TYPE_MASK_POSITION_YAW = (_IGNORE_VX | _IGNORE_VY | _IGNORE_VZ | _IGNORE_AX | _IGNORE_AY | _IGNORE_AZ
                          | _IGNORE_YAW_RATE)


def heading_command_to_px4_body_ned(cmd) -> tuple[np.ndarray, float]:
    """airplay command ``[vx fwd, vy left, vz up (m/s), yaw_rate CCW (rad/s)]`` in the heading
    frame -> (velocity (3,) m/s forward/right/down, yaw rate rad/s clockwise) for a
    SET_POSITION_TARGET_LOCAL_NED with ``coordinate_frame = MAV_FRAME_BODY_NED`` and
    ``type_mask = TYPE_MASK_VELOCITY_YAW_RATE``.

    PX4 rotates MAV_FRAME_BODY_NED velocities by the current yaw only (level heading frame),
    which is the frame of the airplay command, so only the axis signs change.
    """
    c = np.asarray(cmd, dtype=np.float64)
    if c.shape != (4,):
        raise ValueError(f"command must have shape (4,), got {c.shape}")
    return np.array([c[0], -c[1], -c[2]]), float(-c[3])


def px4_body_ned_to_heading_command(velocity_frd_m_s, yaw_rate_cw_rad_s: float) -> np.ndarray:
    """Inverse of :func:`heading_command_to_px4_body_ned` (used by the MAVLink vehicle endpoint)."""
    v = np.asarray(velocity_frd_m_s, dtype=np.float64)
    if v.shape != (3,):
        raise ValueError(f"velocity must have shape (3,), got {v.shape}")
    return np.array([v[0], -v[1], -v[2], -float(yaw_rate_cw_rad_s)])


def heading_command_to_local_ned(cmd, yaw_enu_rad: float) -> tuple[np.ndarray, float]:
    """airplay heading-frame command -> (velocity (3,) in local NED m/s, yaw rate CW rad/s) for a
    MAV_FRAME_LOCAL_NED setpoint, given the current yaw (ENU, CCW from east).

    For autopilots that do not honour body-frame velocity setpoints.
    """
    c = np.asarray(cmd, dtype=np.float64)
    if c.shape != (4,):
        raise ValueError(f"command must have shape (4,), got {c.shape}")
    v_enu = frames.heading_to_map(c[:3], yaw_enu_rad)
    return frames.enu_to_ned(v_enu), float(-c[3])
