"""The tie between the scene's ``map`` frame and the autopilot's local frame: a yaw and a shift.

An autopilot's local frame (PX4, ArduPilot: NED, turned to ENU at the bridge's boundary by
:mod:`airplay.bridge.telemetry`) starts where the vehicle booted, with its x axis north. The
scene's ``map`` frame (ENU, z up) is the one the policy was trained in. The two share the
vertical, so one rotation about z and one translation relate them::

    p_map = Rz(yaw_rad) @ p_local_enu + origin_enu        (positions, m)
    v_map = Rz(yaw_rad) @ v_local_enu                      (velocities, m/s)
    yaw_map = yaw_local_enu + yaw_rad                      (headings, rad CCW from x)
    q_map = qz(yaw_rad) * q_local                          (orientations of base_link)

Two ways to set it (bridge parameter ``map_tie``):

- ``origin``: ``origin_x/y/z`` (the map position of the local origin) and ``origin_yaw_deg``
  (the map angle of the local east axis, CCW from map x), given by hand.
- ``task_start`` (:meth:`MapTie.at_pose`): the vehicle, disarmed on the ground, stands on the
  task's start with its nose along the task's start heading; the tie makes its estimated pose
  at that moment the start on the ground (x, y of the start, the ground's z, the start's yaw).
  On a real field: mark the start on the ground, set the vehicle on it facing the start
  heading, and start the graph (docs/vehicle.md "Fly a learned policy").

No rclpy, no pymavlink: plain numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airplay import frames


@dataclass(frozen=True)
class MapTie:
    """``map = Rz(yaw_rad) @ local_enu + origin_enu`` (module docstring). origin_enu: (3,) map
    metres of the local origin; yaw_rad: the local frame's heading in the map, rad CCW."""

    origin_enu: tuple[float, float, float] = (0.0, 0.0, 0.0)
    yaw_rad: float = 0.0
    source: str = "origin"

    def __post_init__(self) -> None:
        origin = tuple(float(v) for v in self.origin_enu)
        if len(origin) != 3 or not all(math.isfinite(v) for v in origin) or not math.isfinite(self.yaw_rad):
            raise ValueError(f"map tie: origin_enu must be 3 finite numbers and yaw_rad finite, "
                             f"got {self.origin_enu!r}, {self.yaw_rad!r}")
        object.__setattr__(self, "origin_enu", origin)
        object.__setattr__(self, "yaw_rad", float(frames.wrap_angle(float(self.yaw_rad))))

    @classmethod
    def at_pose(cls, local_position_enu, local_yaw_rad: float, map_position, map_yaw_rad: float,
                source: str = "task_start") -> MapTie:
        """The tie under which the local pose (``local_position_enu`` m, ``local_yaw_rad`` rad CCW
        from local east) is the map pose (``map_position`` m, ``map_yaw_rad``)."""
        yaw = float(map_yaw_rad) - float(local_yaw_rad)
        rotated = _rotate(np.asarray(local_position_enu, np.float64), yaw)
        return cls(tuple(np.asarray(map_position, np.float64) - rotated), yaw, source)

    # -- local -> map ----------------------------------------------------------------------
    def position_to_map(self, p_local_enu) -> np.ndarray:
        return _rotate(np.asarray(p_local_enu, np.float64), self.yaw_rad) + np.asarray(self.origin_enu)

    def vector_to_map(self, v_local_enu) -> np.ndarray:
        return _rotate(np.asarray(v_local_enu, np.float64), self.yaw_rad)

    def yaw_to_map(self, yaw_local_rad: float) -> float:
        return float(frames.wrap_angle(float(yaw_local_rad) + self.yaw_rad))

    def quat_to_map_xyzw(self, q_local_xyzw) -> np.ndarray:
        """base_link's orientation (x, y, z, w) in the local ENU frame -> in the map frame."""
        half = 0.5 * self.yaw_rad
        qz = np.array([math.cos(half), 0.0, 0.0, math.sin(half)])  # w, x, y, z
        q = frames.quat_multiply_wxyz(qz, frames.quat_xyzw_to_wxyz(q_local_xyzw))
        return frames.quat_wxyz_to_xyzw(q)

    # -- map -> local ----------------------------------------------------------------------
    def position_to_local(self, p_map) -> np.ndarray:
        return _rotate(np.asarray(p_map, np.float64) - np.asarray(self.origin_enu), -self.yaw_rad)

    def vector_to_local(self, v_map) -> np.ndarray:
        return _rotate(np.asarray(v_map, np.float64), -self.yaw_rad)

    def yaw_to_local(self, yaw_map_rad: float) -> float:
        return float(frames.wrap_angle(float(yaw_map_rad) - self.yaw_rad))

    def to_dict(self) -> dict:
        """JSON-ready: what the bridge publishes on ``vehicle/map_tie``."""
        return {"origin_enu": list(self.origin_enu), "yaw_rad": self.yaw_rad,
                "yaw_deg": math.degrees(self.yaw_rad), "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> MapTie:
        return cls(tuple(d["origin_enu"]), float(d["yaw_rad"]), str(d.get("source", "origin")))


def _rotate(v: np.ndarray, yaw: float) -> np.ndarray:
    """``v`` (3,) or (N, 3) turned by ``yaw`` rad about z (CCW)."""
    c, s = math.cos(yaw), math.sin(yaw)
    out = np.array(v, np.float64, copy=True)
    x, y = v[..., 0], v[..., 1]
    out[..., 0] = c * x - s * y
    out[..., 1] = s * x + c * y
    return out
