"""Frames, quaternions, yaw and angle wrapping: the one place for this maths.

Conventions (DESIGN.md section 3):

* ``map`` is ENU (x east, y north, z up, m); ``base_link`` is FLU (x forward, y left, z up).
* Quaternions on the ROS side are ordered (x, y, z, w) and give the orientation of base_link
  in map (they rotate FLU vectors into ENU); MAVLink orders them (w, x, y, z). Names say
  which: ``_xyzw`` / ``_wxyz``.
* Yaw is counter-clockwise from east (rad) in ENU; NED yaw is clockwise from north.
* The heading frame of a yaw is base_link rotated by that yaw only (level: x forward along
  the heading, y left, z up). The policy command ``[vx, vy, vz, yaw_rate]`` is in it; on ROS
  messages it is named :data:`BASE_STABILIZED` (``cmd_vel``'s frame_id).
* :func:`map_to_body_xyzw` / :func:`body_to_map_xyzw` rotate vectors between map and base_link
  by the full attitude (what a REP-105 twist in base_link needs).

Two angles come from an attitude, and they are different quantities:

* :func:`yaw_from_quat` (the yaw): ``atan2(2 (w z + x y), 1 - 2 (y^2 + z^2)) =
  atan2(R[1, 0], R[0, 0])``, the yaw of the aerospace Z-Y-X Euler decomposition. It is the
  direction of base_link's x axis projected on the horizontal plane (R[:, 0] is that axis).
  Tilted about one body axis only (pure pitch or pure roll), it equals the yaw the attitude
  was built with; tilted about both it differs from it, by up to ~6 degrees at the vehicle's
  acceleration limits (3 m/s^2 horizontal, 4 m/s^2 vertical; test_frames.py measures it).
* :func:`heading_from_quat`: ``atan2(-R[0, 1], R[1, 1])``, the horizontal direction
  perpendicular to base_link's y axis (the yaw of the Z-X-Y decomposition). The simulator
  builds its attitude with y_b = z_b x heading (:func:`airplay.sim.dynamics.attitude_from_acceleration`),
  so this recovers the simulator's yaw to rounding on any tilt; the renderer (a gimbal-stabilised
  camera) and the goal vector use it.

Both agree exactly on level poses. Controllers (the experts, the VLN executor, the bridge)
use the yaw; what must match the simulator's internal yaw on a tilted vehicle uses the heading.

Angles are wrapped to [-pi, pi) by :func:`wrap_angle`: ``(a + pi) mod 2 pi - pi`` with
Python's / numpy's float modulo (the same bits in both, and in numba).

The scalar functions take and return plain floats with ``math`` only, so numba can compile
them (``njit(frames.wrap_angle)``) where a compiled kernel needs them; the ``_xyzw`` / batch
functions take arrays with the components on the last axis.

This module imports only ``math`` and ``numpy`` (and transforms3d inside the Euler-angle conversions,
which nothing compiled uses: the quaternion and yaw maths here are batched over arrays, which
transforms3d's one-quaternion-at-a-time functions are not; test_frames.py checks both agree).
"""

from __future__ import annotations

import math

import numpy as np

TWO_PI = 2.0 * math.pi

MAP = "map"
"""The world frame (ENU, z up): frame_id of odom's pose, goals and /tf's parent."""
BASE_LINK = "base_link"
"""The body frame (FLU): odom's child_frame_id and the frame of its twist."""
BASE_STABILIZED = "base_stabilized"
"""The yaw-only heading frame (x forward along the heading, y left, z up; no roll or pitch):
the frame_id of ``cmd_vel``, whose linear part is the heading-frame velocity (m/s) and angular.z
the yaw rate (rad/s)."""
CAMERA_OPTICAL = "camera_optical"
"""The camera optical frame (z forward, x right, y down)."""

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


# -- angles ------------------------------------------------------------------------------------
def wrap_angle(a):
    """Angle(s) (rad) wrapped to [-pi, pi): ``(a + pi) % 2 pi - pi``.

    A float gives a float, a numpy array an array (elementwise, the same bits); compilable by numba.
    Within a few ulp below +pi, ``a + pi`` rounds to 2 pi and the result is -pi (the same angle).
    """
    return (a + math.pi) % TWO_PI - math.pi


def wrap_angle_deg(a):
    """Angle(s) in degrees wrapped to [-180, 180): ``(a + 180) % 360 - 180``."""
    return (a + 180.0) % 360.0 - 180.0


def yaw_from_quat(x: float, y: float, z: float, w: float) -> float:
    """Yaw (rad, CCW from east, in [-pi, pi]) of base_link in map from the quaternion (x, y, z, w).

    ``atan2(2 (w z + x y), 1 - 2 (y^2 + z^2))``: the Z-Y-X Euler yaw, i.e. the direction of
    base_link's x axis projected on the horizontal plane (see the module docstring for tilted
    poses). Float64 arithmetic; compilable by numba.
    """
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def yaw_from_quat_xyzw(q) -> float:
    """:func:`yaw_from_quat` of a (4,) quaternion (x, y, z, w) (any float dtype, taken as float64)."""
    x, y, z, w = (float(v) for v in q)
    return yaw_from_quat(x, y, z, w)


def yaw_of_state(state) -> float:
    """:func:`yaw_from_quat` of a 13-vector state's quaternion ``state[3:7]`` = (x, y, z, w)."""
    return yaw_from_quat_xyzw(state[3:7])


def yaws_from_quats_xyzw(q_xyzw) -> np.ndarray:
    """(...) :func:`yaw_from_quat` of (..., 4) quaternions (x, y, z, w), vectorised (numpy's arctan2,
    whose last bit can differ from math.atan2's)."""
    q = np.asarray(q_xyzw, np.float64)
    x, y, z, w = (q[..., i] for i in range(4))
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def heading_from_quat(x: float, y: float, z: float, w: float) -> float:
    """Heading (rad, CCW from east) of base_link in map from the quaternion (x, y, z, w).

    ``atan2(-R[0, 1], R[1, 1])`` with R[0, 1] = 2 (x y - z w), R[1, 1] = 1 - 2 (x^2 + z^2): the
    horizontal direction perpendicular to base_link's y axis, which is the simulator's yaw on
    any tilt (module docstring). Equals :func:`yaw_from_quat` on level poses.
    """
    r01 = 2.0 * (x * y - z * w)
    r11 = 1.0 - 2.0 * (x * x + z * z)
    return math.atan2(-r01, r11)


def heading_of_state(state) -> float:
    """:func:`heading_from_quat` of a 13-vector state's quaternion ``state[3:7]`` = (x, y, z, w)."""
    x, y, z, w = (float(v) for v in np.asarray(state, np.float64)[3:7])
    return heading_from_quat(x, y, z, w)


def headings_from_quats_xyzw(q_xyzw) -> np.ndarray:
    """(N,) :func:`heading_from_quat` of (N, 4) quaternions (x, y, z, w), vectorised (numpy's arctan2,
    whose last bit can differ from math.atan2's)."""
    x, y, z, w = (np.asarray(q_xyzw, np.float64)[:, i] for i in range(4))
    return np.arctan2(-2.0 * (x * y - z * w), 1.0 - 2.0 * (x * x + z * z))


def quat_xyzw_from_yaw(yaw_rad: float) -> np.ndarray:
    """(4,) quaternion (x, y, z, w) of a level attitude with yaw ``yaw_rad`` (rotation about z)."""
    return np.array([0.0, 0.0, math.sin(0.5 * yaw_rad), math.cos(0.5 * yaw_rad)])


# -- map <-> heading frame (yaw-only rotation about z) ------------------------------------------
def map_to_heading(v_map, yaw_rad):
    """Map-frame vectors (..., 3) rotated by -yaw about z into the heading frame of ``yaw_rad``
    (a float or an array broadcasting against the vectors' leading axes): x forward, y left, z up.

    ``(c vx + s vy, -s vx + c vy, vz)`` with numpy's cos and sin; float64.
    """
    v = _vec3(v_map)
    yaw = np.asarray(yaw_rad, np.float64)
    c, s = np.cos(yaw)[..., None], np.sin(yaw)[..., None]
    return np.concatenate([c * v[..., :1] + s * v[..., 1:2], -s * v[..., :1] + c * v[..., 1:2], v[..., 2:3]], -1)


def map_to_heading_xyz(dx: float, dy: float, dz: float, yaw_rad: float) -> np.ndarray:
    """(3,) float64: one map vector (dx, dy, dz) in the heading frame of ``yaw_rad``; the same
    operations as :func:`map_to_heading`, without its array handling (for per-step use)."""
    c, s = np.cos(yaw_rad), np.sin(yaw_rad)
    return np.array([c * dx + s * dy, -s * dx + c * dy, dz])


def heading_to_map(v_heading, yaw_rad):
    """Inverse of :func:`map_to_heading`: heading-frame vectors (..., 3) rotated by +yaw into map.

    ``(c vx - s vy, s vx + c vy, vz)``; float64.
    """
    v = _vec3(v_heading)
    yaw = np.asarray(yaw_rad, np.float64)
    c, s = np.cos(yaw)[..., None], np.sin(yaw)[..., None]
    return np.concatenate([c * v[..., :1] - s * v[..., 1:2], s * v[..., :1] + c * v[..., 1:2], v[..., 2:3]], -1)


# -- ENU/FLU <-> NED/FRD ------------------------------------------------------------------------
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


def yaw_enu_to_ned(yaw_enu_rad):
    """Yaw CCW from east (ENU) -> yaw CW from north (NED), pi/2 - yaw, wrapped to [-pi, pi)."""
    return wrap_angle(math.pi / 2 - np.asarray(yaw_enu_rad, dtype=np.float64))


def yaw_ned_to_enu(yaw_ned_rad):
    """Yaw CW from north (NED) -> yaw CCW from east (ENU), pi/2 - yaw, wrapped to [-pi, pi)."""
    return wrap_angle(math.pi / 2 - np.asarray(yaw_ned_rad, dtype=np.float64))


# -- quaternions --------------------------------------------------------------------------------
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
    """Orientation of body (FRD) in local (NED), (w, x, y, z) as in MAVLink ATTITUDE_QUATERNION ->
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


def map_to_body_xyzw(q_xyzw, v_map) -> np.ndarray:
    """Map-frame (ENU) vectors (..., 3) expressed in base_link (FLU): ``R^T v`` with R the rotation
    of the quaternions (x, y, z, w) of base_link in map (..., 4), i.e. rotated by the conjugate.

    Float64; the full attitude (roll, pitch and yaw). Used for odom's twist (REP-105).
    """
    q = quat_xyzw_to_wxyz(q_xyzw)
    return rotate_vector_wxyz(q * np.array([1.0, -1.0, -1.0, -1.0]), v_map)


def body_to_map_xyzw(q_xyzw, v_body) -> np.ndarray:
    """Inverse of :func:`map_to_body_xyzw`: base_link (FLU) vectors (..., 3) in map (ENU), ``R v``.

    Float64; ``body_to_map_xyzw(q, map_to_body_xyzw(q, v))`` is ``v`` up to a few ulp of
    ``|v|`` (not bit-exact).
    """
    return rotate_vector_wxyz(quat_xyzw_to_wxyz(q_xyzw), v_body)


def quat_wxyz_from_euler_zyx(roll_rad: float, pitch_rad: float, yaw_rad: float) -> np.ndarray:
    """(4,) quaternion (w, x, y, z) of aerospace Z-Y-X Euler angles (R = Rz(yaw) Ry(pitch) Rx(roll)),
    in whatever frames the angles are given (e.g. FRD in NED for MAVLink ATTITUDE).
    transforms3d's ``euler2quat`` with rotating axes z, y, x."""
    from transforms3d.euler import euler2quat

    return np.asarray(euler2quat(float(yaw_rad), float(pitch_rad), float(roll_rad), "rzyx"), dtype=np.float64)


def euler_zyx_from_quat_wxyz(q_wxyz) -> tuple[float, float, float]:
    """(roll, pitch, yaw) rad, aerospace Z-Y-X, of a (4,) quaternion (w, x, y, z); inverse of
    :func:`quat_wxyz_from_euler_zyx` (pitch in [-pi/2, pi/2]); transforms3d's ``quat2euler``. The
    yaw equals :func:`yaw_from_quat` (test_frames.py checks it)."""
    from transforms3d.euler import quat2euler

    yaw, pitch, roll = quat2euler(np.asarray(q_wxyz, dtype=np.float64), "rzyx")
    return float(roll), float(pitch), float(yaw)
