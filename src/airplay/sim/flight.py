"""Dynamics, collision and bounds for N vehicles in one compiled call per control step.

:class:`FlightSim` is what the environment steps: the flight model of
:mod:`airplay.sim.dynamics`, then the sphere-vs-SDF and region checks of
:mod:`airplay.sim.collision`, fused so one vehicle costs about a microsecond per 50 Hz
step instead of several Python-level calls.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from airplay.episode_status import EpisodeStatus
from airplay.sim.collision import CollisionChecker, outside_point
from airplay.sim.dynamics import PARALLEL_MIN_VEHICLES, QuadrotorBatch, VehicleParams, _odometry, _step_one
from airplay.sim.sdf import trilinear_at

RUNNING, COLLISION, OUT_OF_BOUNDS = 0, 1, 2
CODE_STATUS = {RUNNING: EpisodeStatus.RUNNING, COLLISION: EpisodeStatus.COLLISION,
               OUT_OF_BOUNDS: EpisodeStatus.OUT_OF_BOUNDS}


@njit(cache=True)
def _commands_finite(cmd):
    for i in range(cmd.shape[0]):
        for j in range(4):
            if not np.isfinite(cmd[i, j]):
                return False
    return True


@njit(cache=True, inline="always")
def _check_one(i, state, values, origin, inv_res, radius, poly, z_min, z_max, codes):
    x, y, z = state[i, 0], state[i, 1], state[i, 2]
    if trilinear_at(values, origin, inv_res, x, y, z) < radius:
        codes[i] = 1
    elif outside_point(poly, z_min, z_max, x, y, z):
        codes[i] = 2
    else:
        codes[i] = 0


@njit(cache=True)
def _step_check_serial(state, rot, omega, cmd, prm, values, origin, inv_res, radius, poly, z_min, z_max, codes):
    if not _commands_finite(cmd):
        return False
    for i in range(state.shape[0]):
        _step_one(i, state, rot, omega, cmd, prm)
        _check_one(i, state, values, origin, inv_res, radius, poly, z_min, z_max, codes)
    return True


@njit(cache=True)
def _check_serial(state, values, origin, inv_res, radius, poly, z_min, z_max, codes):
    for i in range(state.shape[0]):
        _check_one(i, state, values, origin, inv_res, radius, poly, z_min, z_max, codes)


@njit(cache=True, parallel=True)
def _step_check_parallel(state, rot, omega, cmd, prm, values, origin, inv_res, radius, poly, z_min, z_max, codes):
    if not _commands_finite(cmd):
        return False
    for i in prange(state.shape[0]):
        _step_one(i, state, rot, omega, cmd, prm)
        _check_one(i, state, values, origin, inv_res, radius, poly, z_min, z_max, codes)
    return True


@njit(cache=True)
def _step_check_observe(state, rot, omega, cmd4, prm, values, origin, poly, scalars, codes, goal, obs_state):
    """One vehicle (row 0): :func:`_step_check_serial` under ``cmd4`` (4,) (float32 or float64,
    taken as float64), then what an environment step reads.

    scalars: [1 / SDF resolution, radius, z_min, z_max]. Fills codes[0] and obs_state (float32, 13):
    position, quaternion xyzw, map velocity, body rates. Returns (status code, distance moved,
    distance to ``goal``, goal - position (3), yaw); the norms are sqrt((x*x + y*y) + z*z), the
    order np.linalg.norm sums a 3-vector in. The code is -1 (nothing stepped) when the command
    is not finite.
    """
    cmd = np.empty((1, 4))
    for j in range(4):
        cmd[0, j] = cmd4[j]
    if not _commands_finite(cmd):
        return -1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    bx, by, bz = state[0, 0], state[0, 1], state[0, 2]
    _step_one(0, state, rot, omega, cmd, prm)
    _check_one(0, state, values, origin, scalars[0], scalars[1], poly, scalars[2], scalars[3], codes)
    px, py, pz = state[0, 0], state[0, 1], state[0, 2]
    dx, dy, dz = px - bx, py - by, pz - bz
    gx, gy, gz = goal[0] - px, goal[1] - py, goal[2] - pz
    _odometry(state, rot, omega, 0, obs_state)
    return (np.int64(codes[0]), math.sqrt(dx * dx + dy * dy + dz * dz), math.sqrt(gx * gx + gy * gy + gz * gz),
            gx, gy, gz, state[0, 9])


class FlightSim:
    """N vehicles in one scene: ``step(cmd)`` moves them and returns their status codes.

    Codes (int8, one per vehicle): 0 running, 1 collision (the sphere of
    ``params.radius_m`` reaches the mesh), 2 out of bounds (centre outside the navigable
    polygon or height band); collision wins when both hold. ``CODE_STATUS`` maps them to
    :class:`EpisodeStatus`. Vehicle state is read through :attr:`vehicles`.
    """

    def __init__(self, params: VehicleParams, checker: CollisionChecker, n: int = 1) -> None:
        self.vehicles = QuadrotorBatch(params, n)
        self.checker = checker
        sdf = checker.sdf
        self._values = sdf.values
        self._origin = np.ascontiguousarray(sdf.origin_m, dtype=np.float64)
        self._inv_res = 1.0 / sdf.resolution_m
        self._poly = np.ascontiguousarray(checker.region.polygon, dtype=np.float64)
        self._band = (float(checker.region.z_min), float(checker.region.z_max))
        self._radius = float(checker.radius_m)
        self.codes = np.zeros(n, dtype=np.int8)
        self._kernel = _step_check_parallel if n >= PARALLEL_MIN_VEHICLES else _step_check_serial
        self._dt = params.control_dt_s
        self._scalars = np.array([self._inv_res, self._radius, self._band[0], self._band[1]])

    def reset(self, positions: np.ndarray, yaws: np.ndarray) -> np.ndarray:
        """Place the vehicles at rest; returns the status codes at those positions."""
        self.vehicles.reset(positions, yaws)
        pos = self.vehicles.position
        collided, outside = self.checker.collided(pos), self.checker.out_of_bounds(pos)
        self.codes[:] = np.where(collided, COLLISION, np.where(outside, OUT_OF_BOUNDS, RUNNING))
        return self.codes

    def step(self, cmd: np.ndarray) -> np.ndarray:
        """Advance one control period under ``cmd`` (N, 4) and return the (N,) int8 status codes."""
        v = self.vehicles
        cmd = np.ascontiguousarray(cmd, dtype=np.float64).reshape(v.n, 4)
        if not self._kernel(v.state, v.rotation, v.angular_velocity_body, cmd, v._prm, self._values, self._origin,
                            self._inv_res, self._radius, self._poly, self._band[0], self._band[1], self.codes):
            raise ValueError("non-finite velocity command; the safety layer must refuse it before the vehicle")
        v.time_s += v.params.control_dt_s
        return self.codes

    def move(self, cmd: np.ndarray) -> None:
        """The flight-model half of :meth:`step`: advance every vehicle one control period under
        ``cmd`` (N, 4) without checking it against the scene (:meth:`check` does). ``move`` then
        ``check`` leave the state and codes :meth:`step` leaves (the same per-vehicle arithmetic)."""
        self.vehicles.step(cmd)

    def check(self) -> np.ndarray:
        """The collision half of :meth:`step`: the (N,) int8 status codes of the vehicles where they are."""
        _check_serial(self.vehicles.state, self._values, self._origin, self._inv_res, self._radius, self._poly,
                      self._band[0], self._band[1], self.codes)
        return self.codes

    def reset_rows(self, rows: np.ndarray, positions: np.ndarray, yaws: np.ndarray) -> None:
        """Place vehicles ``rows`` (indices) at rest at ``positions`` (len(rows), 3) with headings
        ``yaws``, as :meth:`reset` places all of them; the others are left as they are. The
        codes of those rows are not updated (:meth:`check` does)."""
        self.vehicles.reset_rows(rows, positions, yaws)

    def step_observe(self, cmd: np.ndarray, goal: np.ndarray, obs_state: np.ndarray) -> tuple:
        """One vehicle (n = 1): :meth:`step` under ``cmd`` (4,) float32 or float64 array, fused
        with what the environment reads afterwards (one compiled call instead of a dozen numpy ones).

        Fills ``obs_state`` (13,) float32 (position m, quaternion xyzw, map velocity m/s, body
        rates rad/s, as :meth:`airplay.world.env.AirPlayEnv.state_vector`) and returns (status
        code, distance moved (m), distance to ``goal`` ((3,) float64 map m), goal - position
        (3 floats, map m), yaw (rad)). Raises ValueError (nothing stepped) for a non-finite
        command.
        """
        v = self.vehicles
        if v.n != 1:
            raise ValueError(f"step_observe steps one vehicle, this FlightSim has {v.n}")
        out = _step_check_observe(v.state, v.rotation, v.angular_velocity_body, cmd, v._prm, self._values,
                                  self._origin, self._poly, self._scalars, self.codes, goal, obs_state)
        if out[0] < 0:
            raise ValueError("non-finite velocity command; the safety layer must refuse it before the vehicle")
        v.time_s += self._dt
        return out
