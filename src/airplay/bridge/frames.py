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
    yaw_ned = pi/2 - yaw_enu, wrapped to (-pi, pi]
    R_ned_frd = P @ R_enu_flu @ F, with P the ENU->NED and F the FRD->FLU axis swaps

Every function accepts a single vector/quaternion or a batch with the components on the
last axis and returns float64 arrays of the same shape.

The policy command (:mod:`airplay.sim.dynamics`) is ``[vx, vy, vz, yaw_rate]``: vx forward
and vy left in the heading frame (base_link FLU rotated by yaw only, i.e. level), vz up,
m/s, yaw_rate rad/s counter-clockwise. :func:`heading_command_to_px4_body_ned` turns it into
a SET_POSITION_TARGET_LOCAL_NED in MAV_FRAME_BODY_NED (forward, right, down; PX4 rotates
it by the vehicle's yaw only, i.e. it is a heading frame too) with the yaw rate clockwise.
"""

from __future__ import annotations

import math

import numpy as np

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

_SQRT_HALF = math.sqrt(0.5)
#: ENU->NED axis swap (rotation by pi about (1, 1, 0)/sqrt 2) as a quaternion (w, x, y, z).
_Q_NED_FROM_ENU_WXYZ = np.array([0.0, _SQRT_HALF, _SQRT_HALF, 0.0])
#: FRD->FLU axis swap (rotation by pi about x) as a quaternion (w, x, y, z).
_Q_FLU_FROM_FRD_WXYZ = np.array([0.0, 1.0, 0.0, 0.0])


def _vec3(v) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if a.shape[-1:] != (3,):
        raise ValueError(f"expected 3-vectors on the last axis, got shape {a.shape}")
    return a


def _quat(q) -> np.ndarray:
    a = np.asarray(q, dtype=np.float64)
    if a.shape[-1:] != (4,):
        raise ValueError(f"expected quaternions (4 components) on the last axis, got shape {a.shape}")
    return a


def enu_to_ned(v_enu) -> np.ndarray:
    """Position (m) or velocity (m/s) in map ENU -> local NED: (x, y, z) -> (y, x, -z)."""
    v = _vec3(v_enu)
    return np.stack([v[..., 1], v[..., 0], -v[..., 2]], axis=-1)


def ned_to_enu(v_ned) -> np.ndarray:
    """Position (m) or velocity (m/s) in local NED -> map ENU: (x, y, z) -> (y, x, -z)."""
    return enu_to_ned(v_ned)


def flu_to_frd(v_flu) -> np.ndarray:
    """Body vector (velocity m/s, angular velocity rad/s, ...) FLU -> FRD: (x, -y, -z)."""
    v = _vec3(v_flu)
    return np.stack([v[..., 0], -v[..., 1], -v[..., 2]], axis=-1)


def frd_to_flu(v_frd) -> np.ndarray:
    """Body vector FRD -> FLU: (x, -y, -z)."""
    return flu_to_frd(v_frd)


# Angular velocity is a body vector like any other; named aliases for readability at call sites.
angular_velocity_flu_to_frd = flu_to_frd
angular_velocity_frd_to_flu = frd_to_flu


def wrap_angle_rad(angle_rad):
    """Wrap to (-pi, pi] (scalar or array)."""
    a = np.pi - np.mod(np.pi - np.asarray(angle_rad, dtype=np.float64), 2.0 * np.pi)
    return float(a) if a.ndim == 0 else a


def yaw_enu_to_ned(yaw_enu_rad):
    """Yaw CCW from east (ENU) -> yaw CW from north (NED), wrapped to (-pi, pi]."""
    return wrap_angle_rad(np.pi / 2 - np.asarray(yaw_enu_rad, dtype=np.float64))


def yaw_ned_to_enu(yaw_ned_rad):
    """Yaw CW from north (NED) -> yaw CCW from east (ENU), wrapped to (-pi, pi]."""
    return wrap_angle_rad(np.pi / 2 - np.asarray(yaw_ned_rad, dtype=np.float64))


def quat_multiply_wxyz(a_wxyz, b_wxyz) -> np.ndarray:
    """Hamilton product a * b of quaternions ordered (w, x, y, z); broadcasts over leading axes."""
    a, b = _quat(a_wxyz), _quat(b_wxyz)
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.stack([
        aw * bw - ax * bx - ay * by - az * bz,
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
    ], axis=-1)


def _canonical(q_wxyz: np.ndarray) -> np.ndarray:
    """Unit quaternion (w, x, y, z) with w >= 0 (q and -q are the same rotation)."""
    q = q_wxyz / np.linalg.norm(q_wxyz, axis=-1, keepdims=True)
    return np.where(q[..., :1] < 0.0, -q, q)


def quat_xyzw_to_wxyz(q_xyzw) -> np.ndarray:
    """Reorder (x, y, z, w) -> (w, x, y, z); no frame change."""
    q = _quat(q_xyzw)
    return np.concatenate([q[..., 3:], q[..., :3]], axis=-1)


def quat_wxyz_to_xyzw(q_wxyz) -> np.ndarray:
    """Reorder (w, x, y, z) -> (x, y, z, w); no frame change."""
    q = _quat(q_wxyz)
    return np.concatenate([q[..., 1:], q[..., :1]], axis=-1)


def quat_enu_flu_xyzw_to_ned_frd_wxyz(q_enu_flu_xyzw) -> np.ndarray:
    """Orientation of base_link (FLU) in map (ENU), (x, y, z, w) -> body (FRD) in local (NED), (w, x, y, z).

    q_ned_frd = q_ned_from_enu * q_enu_flu * q_flu_from_frd; returned unit-norm with w >= 0.
    """
    q = quat_xyzw_to_wxyz(q_enu_flu_xyzw)
    return _canonical(quat_multiply_wxyz(quat_multiply_wxyz(_Q_NED_FROM_ENU_WXYZ, q), _Q_FLU_FROM_FRD_WXYZ))


def quat_ned_frd_wxyz_to_enu_flu_xyzw(q_ned_frd_wxyz) -> np.ndarray:
    """Orientation of body (FRD) in local (NED), (w, x, y, z) as in ATTITUDE_QUATERNION ->
    base_link (FLU) in map (ENU), (x, y, z, w) as on ROS messages; unit-norm with w >= 0.

    Both axis swaps are rotations by pi, hence their own inverses (up to sign).
    """
    q = _quat(q_ned_frd_wxyz)
    q_enu_flu = _canonical(quat_multiply_wxyz(quat_multiply_wxyz(_Q_NED_FROM_ENU_WXYZ, q), _Q_FLU_FROM_FRD_WXYZ))
    return quat_wxyz_to_xyzw(q_enu_flu)


def rotate_vector_wxyz(q_wxyz, v) -> np.ndarray:
    """Rotate 3-vectors ``v`` by unit quaternions (w, x, y, z): v' = q v q*."""
    q, v = _quat(q_wxyz), _vec3(v)
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * np.cross(u, v)
    return v + w * t + np.cross(u, t)


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
    v = _vec3(velocity_frd_m_s)
    return np.array([v[0], -v[1], -v[2], -float(yaw_rate_cw_rad_s)])


def heading_command_to_local_ned(cmd, yaw_enu_rad: float) -> tuple[np.ndarray, float]:
    """airplay heading-frame command -> (velocity (3,) in local NED m/s, yaw rate CW rad/s) for a
    MAV_FRAME_LOCAL_NED setpoint, given the current yaw (ENU, CCW from east).

    For autopilots that do not honour body-frame velocity setpoints.
    """
    c = np.asarray(cmd, dtype=np.float64)
    if c.shape != (4,):
        raise ValueError(f"command must have shape (4,), got {c.shape}")
    cy, sy = math.cos(yaw_enu_rad), math.sin(yaw_enu_rad)
    v_enu = np.array([cy * c[0] - sy * c[1], sy * c[0] + cy * c[1], c[2]])
    return enu_to_ned(v_enu), float(-c[3])
