"""The expert's tuning, shared by its path smoothing, reference trajectory and tracker."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ExpertSettings:
    """Tuning of the expert; speeds m/s, accelerations m/s^2, lengths m, gains 1/s."""

    cruise_speed_m_s: float = 2.0
    accel_fraction: float = 0.6  # share of the vehicle's acceleration limits the reference uses
    lateral_accel_m_s2: float = 1.5
    vertical_speed_fraction: float = 0.8  # share of the vehicle's climb / descent limits
    preferred_extra_clearance_m: float = 0.45
    wall_penalty: float = 2.0  # step-cost weight at the planning clearance (0 at the preferred one)
    corner_cut_max_m: float = 1.2
    position_gain: float = 1.5
    yaw_gain: float = 2.5
    yaw_lookahead_m: float = 0.6
    governor_error_m: tuple[float, float] = (0.25, 0.6)  # full speed below, stop above
    governor_yaw_deg: tuple[float, float] = (25.0, 70.0)  # full speed below, stop above
    governor_slew_per_s: float = 0.5

