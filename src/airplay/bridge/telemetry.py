"""Autopilot telemetry -> airplay's 13-vector state, in one tested place (through :mod:`airplay.frames`).

Input (MAVLink, NED/FRD): LOCAL_POSITION_NED (position m, velocity m/s, local NED) and
ATTITUDE_QUATERNION (q1..q4 = w, x, y, z of body FRD in local NED; body rates FRD rad/s), or
ATTITUDE (roll, pitch, yaw: aerospace ZYX Euler in NED) where an autopilot sends no quaternion.

Output: ``[position (3) map ENU m, quaternion (4) base_link FLU in map (x, y, z, w),
velocity (3) map ENU m/s, angular velocity (3) base_link FLU rad/s]`` - the state vector of
:meth:`airplay.world.env.AirPlayEnv.state_vector`, which the bridge node publishes as a REP-105
``odom`` (:func:`airplay.nodes.common.odometry_from_state`: the twist in base_link).

The map frame is the autopilot's local frame turned to ENU, then turned and shifted by the
:class:`~airplay.bridge.map_tie.MapTie` ``tie`` (``map = Rz(yaw) local_enu + origin``; the
identity when the map is the autopilot's local frame). :meth:`Telemetry.local_state` gives the
state before the tie.

Messages are ordered by their ``time_boot_ms``: one older than the newest of its kind is
dropped as out of order (counted in :attr:`Telemetry.out_of_order`), unless it is older by
more than ``reboot_s`` (the autopilot rebooted and its clock restarted).
No pymavlink, no rclpy here: plain numbers in.
"""

from __future__ import annotations

import math

import numpy as np

from airplay import frames
from airplay.bridge.map_tie import MapTie


def state_from_ned(position_ned, velocity_ned, q_ned_frd_wxyz, rates_frd, tie: MapTie | None = None) -> np.ndarray:
    """(13,) float64 ENU/FLU state (see the module docstring) from NED/FRD quantities, in the map
    frame of ``tie`` (None: the local frame turned to ENU)."""
    q = frames.quat_ned_frd_wxyz_to_enu_flu_xyzw(q_ned_frd_wxyz)
    p, v = frames.ned_to_enu(position_ned), frames.ned_to_enu(velocity_ned)
    if tie is not None:
        p, v, q = tie.position_to_map(p), tie.vector_to_map(v), tie.quat_to_map_xyzw(q)
    return np.concatenate([p, q, v, frames.frd_to_flu(rates_frd)])


class Telemetry:
    """The latest position/velocity and attitude of the vehicle, kept in NED as received.
    ``tie``: the map frame (:class:`~airplay.bridge.map_tie.MapTie`; ``origin_enu`` alone: a
    shift without a turn); it may be replaced while running (the bridge ties the map to the
    task's start once the vehicle is ready)."""

    def __init__(self, origin_enu=(0.0, 0.0, 0.0), reboot_s: float = 10.0, tie: MapTie | None = None) -> None:
        self.tie = tie if tie is not None else MapTie(tuple(np.asarray(origin_enu, np.float64).reshape(3)))
        self.reboot_s = reboot_s
        self.out_of_order = 0
        self.rejected = 0
        self._position = None        # (time_boot_ms, position_ned, velocity_ned)
        self._attitude = None        # (time_boot_ms, q_wxyz, rates_frd)
        self.updates = 0             # accepted LOCAL_POSITION_NED messages

    def _in_order(self, newest, time_boot_ms: int) -> bool:
        if newest is not None and time_boot_ms < newest[0] and newest[0] - time_boot_ms <= self.reboot_s * 1000:
            self.out_of_order += 1
            return False
        return True

    def on_local_position_ned(self, time_boot_ms: int, position_ned, velocity_ned) -> bool:
        """A LOCAL_POSITION_NED; False where dropped (out of order or non-finite)."""
        p, v = np.asarray(position_ned, np.float64), np.asarray(velocity_ned, np.float64)
        if not (np.isfinite(p).all() and np.isfinite(v).all()):
            self.rejected += 1
            return False
        if not self._in_order(self._position, time_boot_ms):
            return False
        self._position = (int(time_boot_ms), p, v)
        self.updates += 1
        return True

    def on_attitude_quaternion(self, time_boot_ms: int, q_wxyz, rates_frd) -> bool:
        """An ATTITUDE_QUATERNION (q1..q4 = w, x, y, z); False where dropped."""
        q, r = np.asarray(q_wxyz, np.float64), np.asarray(rates_frd, np.float64)
        norm = float(np.linalg.norm(q)) if np.isfinite(q).all() else 0.0
        if not (0.5 < norm < 1.5 and np.isfinite(r).all()):
            self.rejected += 1
            return False
        if not self._in_order(self._attitude, time_boot_ms):
            return False
        self._attitude = (int(time_boot_ms), q / norm, r)
        return True

    def on_attitude_euler(self, time_boot_ms: int, roll_rad: float, pitch_rad: float, yaw_rad: float,
                          rates_frd) -> bool:
        """An ATTITUDE (Euler) - used where no ATTITUDE_QUATERNION is streamed; the two carry the
        same information, so the newer wins."""
        if not all(math.isfinite(a) for a in (roll_rad, pitch_rad, yaw_rad)):
            self.rejected += 1
            return False
        return self.on_attitude_quaternion(time_boot_ms, frames.quat_wxyz_from_euler_zyx(roll_rad, pitch_rad, yaw_rad),
                                           rates_frd)

    @property
    def time_boot_ms(self) -> int | None:
        """Autopilot time of the newest accepted position (ms since its boot)."""
        return None if self._position is None else self._position[0]

    @property
    def origin_enu(self) -> np.ndarray:
        """The map position of the local origin, m (the tie's shift)."""
        return np.asarray(self.tie.origin_enu, np.float64)

    def state(self) -> np.ndarray | None:
        """(13,) ENU/FLU state in the map frame, or None until both a position and an attitude arrived."""
        return self._state(self.tie)

    def local_state(self) -> np.ndarray | None:
        """(13,) ENU/FLU state in the autopilot's local frame turned to ENU (before the tie)."""
        return self._state(None)

    def _state(self, tie: MapTie | None) -> np.ndarray | None:
        if self._position is None or self._attitude is None:
            return None
        _, p, v = self._position
        _, q, r = self._attitude
        return state_from_ned(p, v, q, r, tie)
