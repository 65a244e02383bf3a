"""Quadrotor flight model, vectorised over N vehicles, commanded like AirPlayground's data.

Command (50 Hz, one row per vehicle): ``[vx, vy, vz, yaw_rate]`` with vx forward and vy
left in the *heading frame* (base_link FLU rotated by yaw only, i.e. level), vz up along
map z, in m/s, and yaw_rate in rad/s counter-clockwise. This is what a PX4 offboard
velocity setpoint in the body frame does, and what the policy node publishes as
``cmd_vel`` (DESIGN.md section 4).

Model (integrated at ``inner_rate_hz``, semi-implicit Euler):

* the commanded velocity, rotated to map ENU and clipped to the horizontal and vertical
  speed limits, is tracked by a first-order lag of time constant
  ``velocity_time_constant_s`` horizontally and ``vertical_velocity_time_constant_s``
  vertically, with the horizontal and vertical acceleration clipped to their limits;
* the yaw rate follows the command through a first-order lag
  (``yaw_rate_time_constant_s``), clipped to ``max_yaw_rate_rad_s``;
* attitude follows from the acceleration as for a real multirotor (differential
  flatness): the thrust axis is parallel to ``a + g z``, so the vehicle tilts into its
  acceleration; the angular velocity is that of the resulting orientation.

State (all in map ENU unless named *_body): position (m), velocity (m/s), yaw (rad),
yaw rate (rad/s), orientation quaternion (x, y, z, w) of base_link in map, angular
velocity in base_link (rad/s). Parameters come from ``config/vehicle.yaml``, which cites
the PX4 defaults they follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from numba import njit, prange

from airplay.config import config_dir
from airplay.yaml_config import ConfigError, load_yaml


@dataclass(frozen=True)
class VehicleParams:
    """Limits and time constants of the flight model; SI units (see config/vehicle.yaml)."""

    control_rate_hz: float = 50.0
    inner_rate_hz: float = 250.0
    max_speed_xy_m_s: float = 5.0
    max_speed_up_m_s: float = 3.0
    max_speed_down_m_s: float = 1.5
    max_accel_xy_m_s2: float = 3.0
    max_accel_z_m_s2: float = 4.0
    max_yaw_rate_rad_s: float = 1.5708
    velocity_time_constant_s: float = 0.15
    yaw_rate_time_constant_s: float = 0.10
    radius_m: float = 0.25
    vertical_velocity_time_constant_s: float = 0.15
    gravity_m_s2: float = 9.80665

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"vehicle parameter {f.name} must be a positive number, got {value!r}")
        ratio = self.inner_rate_hz / self.control_rate_hz
        if abs(ratio - round(ratio)) > 1e-9 or round(ratio) < 1:
            raise ValueError(f"inner_rate_hz ({self.inner_rate_hz}) must be a whole multiple of "
                             f"control_rate_hz ({self.control_rate_hz})")

    @property
    def control_dt_s(self) -> float:
        return 1.0 / self.control_rate_hz

    @property
    def substeps(self) -> int:
        return int(round(self.inner_rate_hz / self.control_rate_hz))


PROFILE_KEY = "profile"
"""The mapping of a vehicle file that describes where its numbers came from (an identified profile,
config/vehicles/: the autopilot, the fit's errors, the command delay, the estimate's error); not a
parameter of the flight model."""


def load_vehicle_profile(path: str | Path) -> tuple[VehicleParams, dict]:
    """(parameters, its ``profile`` mapping or {}) of a vehicle file (:func:`load_vehicle_params`)."""
    params = load_vehicle_params(path)
    data = load_yaml(Path(path), what="vehicle parameter file")
    profile = data.get(PROFILE_KEY) or {}
    if not isinstance(profile, dict):
        raise ConfigError(Path(path), f"must be a mapping, got {profile!r}", PROFILE_KEY)
    return params, profile


def load_vehicle_params(path: str | Path | None = None) -> VehicleParams:
    """Read ``config/vehicle.yaml`` (or ``path``, e.g. an identified profile of config/vehicles/, whose
    ``profile`` mapping is left out); a :class:`~airplay.yaml_config.ConfigError` names the file and
    the field."""
    path = Path(path) if path is not None else config_dir() / "vehicle.yaml"
    data = dict(load_yaml(path, what="vehicle parameter file"))
    data.pop(PROFILE_KEY, None)
    known = {f.name for f in fields(VehicleParams)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(path, f"unknown vehicle parameters {unknown}; known: {sorted(known)}")
    values = {}
    for key, value in data.items():
        try:
            values[key] = float(value)
        except (TypeError, ValueError):
            raise ConfigError(path, f"must be a number, got {value!r}", key) from None
    try:
        return VehicleParams(**values)
    except (TypeError, ValueError) as err:
        raise ConfigError(path, str(err)) from None


def _quat_xyzw_from_matrix(r: np.ndarray) -> np.ndarray:
    """(N, 4) quaternions (x, y, z, w), w >= 0, from rotation matrices (N, 3, 3).

    Shepperd's method: each row is computed from its largest of w, x, y, z, so rotations
    near 180 degrees (heading west, yaw = +-pi) are as exact as any other.
    """
    r = np.ascontiguousarray(r, dtype=np.float64).reshape(-1, 3, 3)
    out = np.empty((r.shape[0], 4))
    _shepperd(r, out)
    return out


@njit(cache=True)
def _shepperd(r, out):
    """:func:`_quat_xyzw_from_matrix` into ``out`` (compiled: it runs on every control step)."""
    for i in range(r.shape[0]):
        m00, m11, m22 = r[i, 0, 0], r[i, 1, 1], r[i, 2, 2]
        d21, d02, d10 = r[i, 2, 1] - r[i, 1, 2], r[i, 0, 2] - r[i, 2, 0], r[i, 1, 0] - r[i, 0, 1]
        s01, s02, s12 = r[i, 0, 1] + r[i, 1, 0], r[i, 0, 2] + r[i, 2, 0], r[i, 1, 2] + r[i, 2, 1]
        trace = m00 + m11 + m22
        case, best = 0, trace  # the first of the largest, as np.argmax
        if m00 > best:
            case, best = 1, m00
        if m11 > best:
            case, best = 2, m11
        if m22 > best:
            case = 3
        if case == 0:
            t = 1.0 + m00 + m11 + m22
        elif case == 1:
            t = 1.0 + m00 - m11 - m22
        elif case == 2:
            t = 1.0 - m00 + m11 - m22
        else:
            t = 1.0 - m00 - m11 + m22
        s = 0.5 / math.sqrt(max(t, 1e-300))  # 1 / (4 * largest component)
        big = 0.5 * math.sqrt(max(t, 0.0))
        if case == 0:
            x, y, z, w = d21 * s, d02 * s, d10 * s, big
        elif case == 1:
            x, y, z, w = big, s01 * s, s02 * s, d21 * s
        elif case == 2:
            x, y, z, w = s01 * s, big, s12 * s, d02 * s
        else:
            x, y, z, w = s02 * s, s12 * s, big, d10 * s
        if w < 0.0:
            x, y, z, w = -x, -y, -z, -w
        n = math.sqrt(x * x + y * y + z * z + w * w)
        out[i, 0], out[i, 1], out[i, 2], out[i, 3] = x / n, y / n, z / n, w / n


@njit(cache=True)
def _odometry(state, rot, omega, i, out):
    """out (13,) = vehicle i's position, quaternion xyzw (:func:`_shepperd`), map velocity, body rates."""
    quat = np.empty((1, 4))
    _shepperd(rot[i:i + 1], quat)
    out[0], out[1], out[2] = state[i, 0], state[i, 1], state[i, 2]
    out[3], out[4], out[5], out[6] = quat[0, 0], quat[0, 1], quat[0, 2], quat[0, 3]
    out[7], out[8], out[9] = state[i, 3], state[i, 4], state[i, 5]
    out[10], out[11], out[12] = omega[i, 0], omega[i, 1], omega[i, 2]


# Columns of the packed state array (one row per vehicle).
POS, VEL, ACC, YAW, YAW_RATE = slice(0, 3), slice(3, 6), slice(6, 9), 9, 10
STATE_WIDTH = 11


@njit(cache=True, inline="always")
def _attitude(ax, ay, az, yaw, gravity, out):
    """base_link-in-map rotation with z along (a + g z) and heading yaw, into out (3, 3)."""
    tz = az + gravity
    nrm = math.sqrt(ax * ax + ay * ay + tz * tz)
    zx, zy, zz = ax / nrm, ay / nrm, tz / nrm
    cx, cy = math.cos(yaw), math.sin(yaw)
    # y_b = z_b x x_c, with x_c = (cx, cy, 0)
    yx, yy, yz = -zz * cy, zz * cx, zx * cy - zy * cx
    n2 = math.sqrt(yx * yx + yy * yy + yz * yz)
    yx, yy, yz = yx / n2, yy / n2, yz / n2
    # x_b = y_b x z_b
    xx, xy, xz = yy * zz - yz * zy, yz * zx - yx * zz, yx * zy - yy * zx
    out[0, 0], out[1, 0], out[2, 0] = xx, xy, xz
    out[0, 1], out[1, 1], out[2, 1] = yx, yy, yz
    out[0, 2], out[1, 2], out[2, 2] = zx, zy, zz


@njit(cache=True)
def _step_one(i, state, rot, omega, cmd, prm):
    vmax_xy, vmax_up, vmax_dn = prm[0], prm[1], prm[2]
    amax_xy, amax_z, rmax = prm[3], prm[4], prm[5]
    tau_v, tau_r, gravity, dt, substeps, control_dt = prm[6], prm[7], prm[8], prm[9], int(prm[10]), prm[11]
    tau_vz = prm[12]
    r_cmd = min(max(cmd[i, 3], -rmax), rmax)
    vz_des = min(max(cmd[i, 2], -vmax_dn), vmax_up)
    r00, r01, r02 = rot[i, 0, 0], rot[i, 0, 1], rot[i, 0, 2]
    r10, r11, r12 = rot[i, 1, 0], rot[i, 1, 1], rot[i, 1, 2]
    r20, r21, r22 = rot[i, 2, 0], rot[i, 2, 1], rot[i, 2, 2]
    for _ in range(substeps):
        yaw = state[i, 9]
        c, s = math.cos(yaw), math.sin(yaw)
        vx_des = c * cmd[i, 0] - s * cmd[i, 1]
        vy_des = s * cmd[i, 0] + c * cmd[i, 1]
        sp = math.sqrt(vx_des * vx_des + vy_des * vy_des)
        if sp > vmax_xy:
            vx_des *= vmax_xy / sp
            vy_des *= vmax_xy / sp
        ax = (vx_des - state[i, 3]) / tau_v
        ay = (vy_des - state[i, 4]) / tau_v
        az = (vz_des - state[i, 5]) / tau_vz
        axy = math.sqrt(ax * ax + ay * ay)
        if axy > amax_xy:
            ax *= amax_xy / axy
            ay *= amax_xy / axy
        az = min(max(az, -amax_z), amax_z)
        state[i, 3] += ax * dt
        state[i, 4] += ay * dt
        state[i, 5] += az * dt
        state[i, 0] += state[i, 3] * dt
        state[i, 1] += state[i, 4] * dt
        state[i, 2] += state[i, 5] * dt
        state[i, 6], state[i, 7], state[i, 8] = ax, ay, az
        state[i, 10] += (r_cmd - state[i, 10]) * (dt / tau_r)
        yaw = yaw + state[i, 10] * dt
        if yaw > math.pi:
            yaw -= 2.0 * math.pi
        elif yaw <= -math.pi:
            yaw += 2.0 * math.pi
        state[i, 9] = yaw
    _attitude(state[i, 6], state[i, 7], state[i, 8], state[i, 9], gravity, rot[i])
    # Body angular velocity from R_prev^T R over the period (small-angle vee map).
    d21 = r02 * rot[i, 0, 1] + r12 * rot[i, 1, 1] + r22 * rot[i, 2, 1]
    d12 = r01 * rot[i, 0, 2] + r11 * rot[i, 1, 2] + r21 * rot[i, 2, 2]
    d02 = r00 * rot[i, 0, 2] + r10 * rot[i, 1, 2] + r20 * rot[i, 2, 2]
    d20 = r02 * rot[i, 0, 0] + r12 * rot[i, 1, 0] + r22 * rot[i, 2, 0]
    d10 = r01 * rot[i, 0, 0] + r11 * rot[i, 1, 0] + r21 * rot[i, 2, 0]
    d01 = r00 * rot[i, 0, 1] + r10 * rot[i, 1, 1] + r20 * rot[i, 2, 1]
    omega[i, 0] = 0.5 * (d21 - d12) / control_dt
    omega[i, 1] = 0.5 * (d02 - d20) / control_dt
    omega[i, 2] = 0.5 * (d10 - d01) / control_dt


@njit(cache=True)
def _step_serial(state, rot, omega, cmd, prm):
    for i in range(state.shape[0]):
        _step_one(i, state, rot, omega, cmd, prm)


@njit(cache=True, parallel=True)
def _step_parallel(state, rot, omega, cmd, prm):
    for i in prange(state.shape[0]):
        _step_one(i, state, rot, omega, cmd, prm)


PARALLEL_MIN_VEHICLES = 2048
"""Below this many vehicles a step runs on one thread (thread start-up would dominate)."""


class QuadrotorBatch:
    """N quadrotors stepped together by a compiled kernel (see the module docstring).

    Read the state through the properties (views into one packed array); change it only
    through :meth:`reset` and :meth:`step`.
    """

    def __init__(self, params: VehicleParams, n: int = 1) -> None:
        if n < 1:
            raise ValueError(f"need at least one vehicle, got n={n}")
        self.params = params
        self.n = n
        self.state = np.zeros((n, STATE_WIDTH))
        self.rotation = np.tile(np.eye(3), (n, 1, 1))
        self.angular_velocity_body = np.zeros((n, 3))
        self.time_s = 0.0
        p = params
        self._prm = np.array([
            p.max_speed_xy_m_s, p.max_speed_up_m_s, p.max_speed_down_m_s, p.max_accel_xy_m_s2,
            p.max_accel_z_m_s2, p.max_yaw_rate_rad_s, p.velocity_time_constant_s, p.yaw_rate_time_constant_s,
            p.gravity_m_s2, p.control_dt_s / p.substeps, float(p.substeps), p.control_dt_s,
            p.vertical_velocity_time_constant_s,
        ])
        self._kernel = _step_parallel if n >= PARALLEL_MIN_VEHICLES else _step_serial

    position = property(lambda self: self.state[:, POS], doc="(N, 3) map ENU, m")
    velocity = property(lambda self: self.state[:, VEL], doc="(N, 3) map ENU, m/s")
    acceleration = property(lambda self: self.state[:, ACC], doc="(N, 3) map ENU, m/s^2")
    yaw = property(lambda self: self.state[:, YAW], doc="(N,) rad, CCW from east")
    yaw_rate = property(lambda self: self.state[:, YAW_RATE], doc="(N,) rad/s")

    @property
    def quat_xyzw(self) -> np.ndarray:
        """(N, 4) orientation of base_link in map, (x, y, z, w)."""
        return _quat_xyzw_from_matrix(self.rotation)

    def odometry(self, i: int = 0) -> np.ndarray:
        """(13,) float64 state of vehicle ``i``: position (m), orientation quaternion (x, y, z, w),
        map velocity (m/s), body angular velocity (rad/s); the concatenation of the properties'
        rows (one compiled call)."""
        if not -self.n <= i < self.n:
            raise IndexError(f"vehicle {i} out of range for {self.n} vehicles")
        out = np.empty(13)
        _odometry(self.state, self.rotation, self.angular_velocity_body, i % self.n, out)
        return out

    def reset(self, positions: np.ndarray, yaws: np.ndarray) -> None:
        """Hover at ``positions`` (N, 3) map m with headings ``yaws`` (N,) rad, at rest."""
        self.state[:] = 0.0
        self.state[:, POS] = np.asarray(positions, dtype=np.float64).reshape(self.n, 3)
        yaws = np.asarray(yaws, dtype=np.float64).reshape(self.n)
        self.state[:, YAW] = np.where((yaws > -np.pi) & (yaws <= np.pi), yaws,
                                      np.pi - np.mod(np.pi - yaws, 2.0 * np.pi))
        self.rotation = attitude_from_acceleration(np.zeros((self.n, 3)), self.state[:, YAW], self.params.gravity_m_s2)
        self.angular_velocity_body[:] = 0.0
        self.time_s = 0.0

    def reset_rows(self, rows: np.ndarray, positions: np.ndarray, yaws: np.ndarray) -> None:
        """:meth:`reset` for vehicles ``rows`` (indices) only, at ``positions`` (len(rows), 3) and
        ``yaws`` (len(rows),); the same state :meth:`reset` gives them. ``time_s`` is kept."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        k = len(rows)
        yaws = np.asarray(yaws, dtype=np.float64).reshape(k)
        self.state[rows] = 0.0
        self.state[rows, POS] = np.asarray(positions, dtype=np.float64).reshape(k, 3)
        self.state[rows, YAW] = np.where((yaws > -np.pi) & (yaws <= np.pi), yaws,
                                         np.pi - np.mod(np.pi - yaws, 2.0 * np.pi))  # as reset wraps them
        self.rotation[rows] = attitude_from_acceleration(np.zeros((k, 3)), self.state[rows, YAW],
                                                         self.params.gravity_m_s2)
        self.angular_velocity_body[rows] = 0.0

    def step(self, cmd: np.ndarray) -> None:
        """Advance one control period (1 / control_rate_hz) under commands ``cmd`` (N, 4)."""
        cmd = np.ascontiguousarray(cmd, dtype=np.float64).reshape(self.n, 4)
        if not np.isfinite(cmd).all():
            raise ValueError("non-finite velocity command; the safety layer must refuse it before the vehicle")
        self._kernel(self.state, self.rotation, self.angular_velocity_body, cmd, self._prm)
        self.time_s += self.params.control_dt_s


def attitude_from_acceleration(accel_map: np.ndarray, yaw: np.ndarray, gravity: float) -> np.ndarray:
    """(N, 3, 3) base_link-in-map rotations whose z axis is along ``accel + g z`` with heading ``yaw``."""
    out = np.empty((len(yaw), 3, 3))
    for i in range(len(yaw)):
        _attitude(accel_map[i, 0], accel_map[i, 1], accel_map[i, 2], yaw[i], gravity, out[i])
    return out
