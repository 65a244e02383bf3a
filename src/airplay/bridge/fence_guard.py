"""The supervisor's fence rules on a velocity command: crossing prediction, outward removal, braking.

Positions map ENU metres, velocities m/s (map ENU, or the heading frame for commands
``[vx forward, vy left, vz up, yaw_rate]``), yaw rad CCW from east. The rules (3, 5a and 5b)
and the braking envelope are described in :mod:`airplay.bridge.supervisor`; this module
computes them and says why, and the supervisor reports the interventions.
"""

from __future__ import annotations

import math

import numpy as np

from airplay import frames
from airplay.bridge.geofence import Geofence
from airplay.bridge.interventions import CHANGE_TOLERANCE, format_vector as _fmt
from airplay.bridge.supervisor_config import SupervisorConfig


class FenceGuard:
    """The fence rules for one :class:`~airplay.bridge.geofence.Geofence` and the
    :class:`~airplay.bridge.supervisor_config.SupervisorConfig` that sets their margin,
    braking deceleration, response time and the autopilot's acceleration limits."""

    def __init__(self, fence: Geofence, config: SupervisorConfig) -> None:
        self.fence, self.config = fence, config
        self.margin_m = config.fence_margin_m  # the stand-off now (m): grown with the estimate's uncertainty

    def predicted_crossing(self, p: np.ndarray, v: np.ndarray) -> str | None:
        """Why the vehicle at ``p`` (m) moving at ``v`` (m/s, map ENU) cannot stop before the
        fence even at the autopilot's acceleration limit after ``fence_response_s`` (rule 3),
        for the worst fence part; None when it can."""
        cfg = self.config
        worst, why = 0.0, None
        for part in self.fence.parts(p):
            speed = float(np.dot(v, part.direction))
            if speed <= CHANGE_TOLERANCE:
                continue
            a = cfg.max_accel_z_m_s2 if part.vertical else cfg.max_accel_xy_m_s2
            stop_m = speed * cfg.fence_response_s + speed * speed / (2.0 * a)
            if stop_m - part.distance_m > worst:
                worst = stop_m - part.distance_m
                why = (f"{speed:.2f} m/s towards {part.name} {part.distance_m:.2f} m away, stopping distance "
                       f"{stop_m:.2f} m ({cfg.fence_response_s:.2f} s response, {a:.2f} m/s^2)")
        return why

    def remove_outward(self, cmd: np.ndarray, p: np.ndarray, yaw_rad: float) -> tuple[np.ndarray, list[str]]:
        """Rule 5a: within the margin (:attr:`margin_m`: ``fence_margin_m`` or more) of a fence
        part, the command's outward component removed. The command (modified in place when something is removed) and what was removed."""
        removed: list[str] = []
        normals, names = self.fence.near_normals(p, self.margin_m)
        if normals:
            v_enu = frames.heading_to_map(cmd[:3], yaw_rad)
            for _ in range(3):  # repeat for corners, where removing one component can add another
                for n, name in zip(normals, names):
                    outward = float(np.dot(v_enu, n))
                    if outward > CHANGE_TOLERANCE:
                        v_enu = v_enu - outward * n
                        removed.append(f"{outward:.2f} m/s towards {name}")
            if removed:
                cmd[:3] = frames.map_to_heading(v_enu, yaw_rad)
                cmd[np.abs(cmd) < 1e-12] = 0.0
        return cmd, removed

    def brake(self, cmd: np.ndarray, p: np.ndarray, v_meas: np.ndarray,
              yaw_rad: float) -> tuple[np.ndarray, str | None]:
        """Rule 5b: the command with its velocity towards every fence part capped by the braking
        envelope, from the measured position ``p`` and velocity ``v_meas``; and why (None: unchanged)."""
        cfg = self.config
        v_enu = frames.heading_to_map(cmd[:3], yaw_rad)
        speed = float(np.linalg.norm(v_enu))
        limits = []   # (part, cap m/s) for the parts whose cap can bind
        for part in self.fence.parts(p):
            approach = max(0.0, float(np.dot(v_meas, part.direction)))
            room_m = part.distance_m - self.margin_m - approach * cfg.fence_response_s
            cap = math.sqrt(2.0 * cfg.fence_brake_accel_m_s2 * max(0.0, room_m))
            if cap < speed:
                limits.append((part, cap))
        if not limits:
            return cmd, None
        v = v_enu.copy()
        for _ in range(100):  # cyclic projection onto the half-spaces v . w <= cap (0 satisfies them all)
            changed = False
            for part, cap in limits:
                excess = float(np.dot(v, part.direction)) - cap
                if excess > CHANGE_TOLERANCE:
                    v = v - excess * part.direction
                    changed = True
            if not changed:
                break
        towards = [(float(np.dot(v, part.direction)), cap) for part, cap in limits]
        if any(t - cap > CHANGE_TOLERANCE for t, cap in towards):  # not converged: scale down (caps >= 0)
            v = v * min(cap / t for t, cap in towards if t > cap)
        if float(np.max(np.abs(v - v_enu))) <= CHANGE_TOLERANCE:
            return cmd, None
        before = cmd.copy()
        cmd = cmd.copy()
        cmd[:3] = frames.map_to_heading(v, yaw_rad)
        binding = [f"{float(np.dot(v_enu, part.direction)):.2f} -> {cap:.2f} m/s towards {part.name} "
                   f"{part.distance_m:.2f} m away" for part, cap in limits
                   if float(np.dot(v_enu, part.direction)) > cap + CHANGE_TOLERANCE]
        return cmd, ("braking for the geofence: " + "; ".join(binding[:4])
                     + f" ({_fmt(before)} -> {_fmt(cmd)}; {cfg.fence_brake_accel_m_s2:.2f} m/s^2, "
                     f"{cfg.fence_response_s:.2f} s response, {self.margin_m:.2f} m margin)")

