"""The supervisor's configuration: speed, acceleration and yaw-rate limits, timeouts, the fence.

SI units (m, m/s, m/s^2, rad/s, s); the fence in map ENU metres. The rules that use these
values are described in :mod:`airplay.bridge.supervisor`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airplay.bridge.geofence import signed_area


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"SupervisorConfig.{name} must be a positive finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class SupervisorConfig:
    """Limits and behaviour of :class:`~airplay.bridge.supervisor.SafetySupervisor`; SI units, fence in map ENU metres.

    Fence: at most one of ``fence_polygon_xy_m`` (vertices (x, y) of a simple polygon, either
    orientation) and ``fence_box_xy_m`` ``(x_min, y_min, x_max, y_max)``, plus an optional
    altitude band ``fence_z_min_m``/``fence_z_max_m`` (map z). None everywhere: no fence.
    ``heartbeat_timeout_s=None`` disables heartbeat monitoring (simulation).

    Fence braking (:mod:`airplay.bridge.supervisor`, rules 3 and 5): ``fence_margin_m`` (m) is the stand-off
    kept from the fence (and the distance inside it at which a hold point is latched);
    ``fence_brake_accel_m_s2`` (m/s^2, every fence part, horizontal and vertical) the
    deceleration the braking envelope plans with, well below the autopilot's limits (PX4
    MPC_ACC_HOR 3 m/s^2) so that a lagging vehicle can follow it; ``fence_response_s``
    (s, >= 0) how long the vehicle keeps its approach speed before it brakes: the time
    constant of the autopilot's velocity response plus odometry and command latency. The
    default 0.7 s covers PX4's horizontal velocity loop (MPC_XY_VEL_P_ACC 1.8 /s: 0.56 s)
    plus attitude response and link latency; ArduCopter, which stopped 0.8 m after a
    zero-velocity command at 1.48 m/s in SITL, has about 0.55 s. A vehicle that lags by up
    to about 0.3 s more still stops inside the fence (eating into the margin); raise it for
    slower vehicles. A larger value costs stand-off only at speed (braking starts
    ``v * fence_response_s`` earlier), not where the vehicle stops.

    ``limit_command_accel``: the command's change from one output to the next is limited to
    ``max_accel_*`` (a slew limit); false: left to the vehicle, whose own controller limits its
    acceleration (airplay's flight model, PX4's MPC_ACC_HOR). A policy trained in airplay's
    simulator saw no slew limit: on the rehearsal vehicle the limit, filtering a small CNN-BC's
    step-to-step command changes (0.46 m/s in one period), turned its reaching the goal into a
    collision; the bridge sets it from its ``command_accel_limit`` parameter.

    ``fence_margin_per_eph``: the stand-off grows with the autopilot's reported horizontal
    uncertainty ``eph`` (m, 1 sigma; PX4's ESTIMATOR_STATUS ``pos_horiz_accuracy``): it is
    ``max(fence_margin_m, fence_margin_per_eph * eph)`` (:meth:`SafetySupervisor.on_estimate_uncertainty
    <airplay.bridge.supervisor.SafetySupervisor.on_estimate_uncertainty>`; 0: the margin stays fixed).
    The bridge ends its control where ``eph`` exceeds its ``max_eph_m``.

    ``future_stamp_tolerance_s``: a command stamped at most this far ahead of the supervisor's
    clock (clock skew between the policy's computer and the bridge's) is taken, its stamp clamped
    to now; one further ahead is refused. A future stamp kept as it came would make every
    correctly stamped command after it "out of order".
    """

    max_speed_xy_m_s: float = 5.0
    max_speed_up_m_s: float = 3.0
    max_speed_down_m_s: float = 1.5
    max_accel_xy_m_s2: float = 3.0
    max_accel_z_m_s2: float = 4.0
    max_yaw_rate_rad_s: float = 1.5708
    control_period_s: float = 0.02
    command_timeout_s: float = 0.25
    heartbeat_timeout_s: float | None = 1.5
    fence_polygon_xy_m: tuple[tuple[float, float], ...] | None = None
    fence_box_xy_m: tuple[float, float, float, float] | None = None
    fence_z_min_m: float | None = None
    fence_z_max_m: float | None = None
    fence_margin_m: float = 0.5
    fence_margin_per_eph: float = 2.0
    fence_brake_accel_m_s2: float = 1.5
    fence_response_s: float = 0.7
    geofence_hold_s: float = 2.0
    landing_speed_m_s: float = 0.5
    limit_command_accel: bool = True
    future_stamp_tolerance_s: float = 0.1

    def __post_init__(self) -> None:
        for name in ("max_speed_xy_m_s", "max_speed_up_m_s", "max_speed_down_m_s", "max_accel_xy_m_s2",
                     "max_accel_z_m_s2", "max_yaw_rate_rad_s", "control_period_s", "command_timeout_s",
                     "fence_margin_m", "fence_brake_accel_m_s2", "geofence_hold_s", "landing_speed_m_s",
                     "future_stamp_tolerance_s"):
            _positive(name, getattr(self, name))
        for name in ("fence_response_s", "fence_margin_per_eph"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0:
                raise ValueError(f"SupervisorConfig.{name} must be a finite number >= 0, got {value!r}")
        value = self.fence_response_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"SupervisorConfig.fence_response_s must be a finite number >= 0, got {value!r}")
        if self.heartbeat_timeout_s is not None:
            _positive("heartbeat_timeout_s", self.heartbeat_timeout_s)
        for name in ("fence_z_min_m", "fence_z_max_m"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ValueError(f"SupervisorConfig.{name} must be a finite number or None, got {value!r}")
        z_min, z_max = self.fence_z_min_m, self.fence_z_max_m
        if z_min is not None and z_max is not None and z_min >= z_max:
            raise ValueError(f"SupervisorConfig.fence_z_min_m ({self.fence_z_min_m}) must be below "
                             f"fence_z_max_m ({self.fence_z_max_m})")
        if self.fence_polygon_xy_m is not None and self.fence_box_xy_m is not None:
            raise ValueError("SupervisorConfig.fence_polygon_xy_m and fence_box_xy_m: give at most one")
        if self.fence_box_xy_m is not None:
            try:
                box = np.asarray(self.fence_box_xy_m, dtype=np.float64)
            except (TypeError, ValueError):
                box = np.array([np.nan])
            if box.shape != (4,) or not np.all(np.isfinite(box)) or box[0] >= box[2] or box[1] >= box[3]:
                raise ValueError("SupervisorConfig.fence_box_xy_m must be finite (x_min, y_min, x_max, y_max) "
                                 f"with x_min < x_max and y_min < y_max, got {self.fence_box_xy_m!r}")
        if self.fence_polygon_xy_m is not None:
            try:
                poly = np.asarray(self.fence_polygon_xy_m, dtype=np.float64)
            except (TypeError, ValueError):
                poly = np.array([np.nan])
            if poly.ndim != 2 or poly.shape[1] != 2 or len(poly) < 3 or not np.all(np.isfinite(poly)):
                raise ValueError("SupervisorConfig.fence_polygon_xy_m must be at least 3 finite (x, y) vertices, "
                                 f"got {self.fence_polygon_xy_m!r}")
            if abs(signed_area(poly)) < 1e-9:
                raise ValueError("SupervisorConfig.fence_polygon_xy_m has zero area")

    @property
    def has_fence(self) -> bool:
        return (self.fence_polygon_xy_m is not None or self.fence_box_xy_m is not None
                or self.fence_z_min_m is not None or self.fence_z_max_m is not None)

    def fence_vertices_ccw(self) -> np.ndarray | None:
        """(K, 2) fence vertices in map x/y metres, counter-clockwise; None without a horizontal fence."""
        if self.fence_box_xy_m is not None:
            x0, y0, x1, y1 = (float(v) for v in self.fence_box_xy_m)
            return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
        if self.fence_polygon_xy_m is not None:
            poly = np.asarray(self.fence_polygon_xy_m, dtype=np.float64)
            return poly if signed_area(poly) > 0 else poly[::-1].copy()
        return None
