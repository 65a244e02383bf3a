"""The flight sequence's configuration and vocabulary: :class:`Phase`, :class:`FlightConfig`
(heights m, times s), the rules' names, and :func:`default_flight_config` (the supervisor limits
of config/vehicle.yaml). The sequence itself is :mod:`airplay.bridge.flight`. No rclpy."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields, replace

from airplay.bridge.autopilot_fence import FENCE_ACTIONS
from airplay.bridge.estimator_watch import EstimateLimits
from airplay.bridge.supervisor_config import SupervisorConfig


class Phase(str, enum.Enum):
    """Phases of the flight sequence (the module docstring); the value is what ``vehicle/phase`` says."""

    CONNECTING = "connecting"
    CHECKING = "checking"
    READY = "ready"
    ARMING = "arming"
    TAKING_OFF = "taking_off"
    WARMING_UP = "warming_up"
    POSITIONING = "positioning"
    FLYING = "flying"
    LINK_LOST = "link_lost"
    LANDING = "landing"
    LANDED = "landed"
    HOLDING = "holding"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


PHASES = tuple(p.value for p in Phase)
TERMINAL_PHASES = frozenset({Phase.LANDED, Phase.HOLDING, Phase.FAILED})
OFFBOARD_PHASES = frozenset({Phase.POSITIONING, Phase.FLYING})
"""Phases in which the bridge flies the vehicle under offboard control (OFFBOARD / GUIDED)."""
LINK_RETURN_RULES = ("land", "resume")
FAILURE_OUTCOMES = ("land", "hold")
MAP_TIES = ("origin", "task_start")
END_ACTIONS = ("land", "hold")
PX4_ARMING_MODES = ("POSCTL", "ALTCTL", "MANUAL", "STABILIZED", "AUTO.LOITER")
"""PX4 modes the bridge arms in; from any other it switches to AUTO.LOITER first."""
PREARM_FRESH_S = 3.0
"""A SYS_STATUS pre-arm bit (or EKF_STATUS_REPORT) older than this (s) is not waited on: ArduPilot SITL under load was
seen to stop streaming SYS_STATUS on the companion's link with the bit last unhealthy; the
arming retries then get the autopilot's own answer."""
ARM_BACKOFF_S = (0.5, 4.0)
"""First and largest wait between arming attempts, s (doubling)."""


class FlightFailure(RuntimeError):
    """A step of the flight sequence failed; the message says which and why."""


class AutopilotTookOver(RuntimeError):
    """The autopilot (its failsafe, or the pilot's mode switch) took the vehicle during the
    take-off: the bridge yields as it does in flight; the message says what the autopilot did."""


@dataclass(frozen=True)
class FlightConfig:
    """The flight sequence; heights m, times s, angles rad. ``flight_time_s`` 0: fly until told to
    land. ``link_return``: "land" or "resume" (after a heartbeat loss); ``on_failure``: "land" or
    "hold" (airborne failures). With a mission (:mod:`airplay.bridge.flight_mission`):
    ``map_tie`` "origin" (the telemetry's tie as given) or "task_start" (tied at the task's start
    once ready, and its estimate still within ``estimate_settle_spread_m`` for
    ``estimate_settle_s``); ``positioning_*`` the hand-over at the start pose (0.25 m horizontally:
    PX4 SIH's own position hold wanders ~0.2 m with its GPS; 0.1 m vertically: tasks start 0.1 m
    above the height band; settled for 1 s: PX4 dips after its climb); ``end_hold_s`` and
    ``end_action`` ("land" or "hold") what follows the mission's end. ``max_eph_m``,
    ``ekf_variance_max``, ``position_jump_m`` and ``position_stale_s``: when the estimate is no
    longer flown on (:class:`~airplay.bridge.estimator_watch.EstimateLimits`, :meth:`estimate_limits`)."""

    takeoff_height_m: float = 1.5
    altitude_tolerance_m: float = 0.15
    setpoint_warmup_s: float = 0.5
    heartbeat_wait_s: float = 30.0
    ready_timeout_s: float = 90.0
    ack_timeout_s: float = 1.0
    takeoff_timeout_s: float = 30.0
    flight_time_s: float = 0.0
    telemetry_rate_hz: float = 50.0
    link_lost_timeout_s: float = 30.0
    landing_timeout_s: float = 60.0
    shutdown_timeout_s: float = 20.0
    link_return: str = "land"
    on_failure: str = "land"
    autopilot_fence: bool = False
    autopilot_fence_action: str = "land"
    autopilot_fence_margin_m: float = 1.0
    autopilot_ceiling_margin_m: float = 4.0
    map_tie: str = "origin"
    estimate_settle_s: float = 2.0
    estimate_settle_spread_m: float = 0.1
    positioning_tolerance_m: float = 0.25
    positioning_z_tolerance_m: float = 0.1
    positioning_yaw_tolerance_rad: float = math.radians(5.0)
    positioning_speed_m_s: float = 0.25
    positioning_settle_s: float = 1.0
    positioning_timeout_s: float = 30.0
    end_hold_s: float = 2.0
    end_action: str = "land"
    max_eph_m: float = 1.0
    ekf_variance_max: float = 0.8
    position_jump_m: float = 1.0
    position_stale_s: float = 1.0
    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "supervisor":
                continue
            if f.name == "autopilot_fence":
                if not isinstance(value, bool):
                    raise ValueError(f"FlightConfig.autopilot_fence must be true or false, got {value!r}")
                continue
            if f.name in ("link_return", "on_failure", "autopilot_fence_action", "map_tie", "end_action"):
                allowed = {"link_return": LINK_RETURN_RULES, "on_failure": FAILURE_OUTCOMES,
                           "autopilot_fence_action": FENCE_ACTIONS, "map_tie": MAP_TIES,
                           "end_action": END_ACTIONS}[f.name]
                if value not in allowed:
                    raise ValueError(f"FlightConfig.{f.name} must be one of {', '.join(allowed)}, got {value!r}")
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (value == 0 and f.name not in ("flight_time_s", "autopilot_fence_margin_m",
                                                                         "autopilot_ceiling_margin_m", "end_hold_s",
                                                                         "positioning_settle_s")):
                raise ValueError(f"FlightConfig.{f.name} must be a positive number, got {value!r}")


    def estimate_limits(self) -> EstimateLimits:
        """The :class:`~airplay.bridge.estimator_watch.EstimateLimits` of this flight."""
        return EstimateLimits(max_eph_m=self.max_eph_m, ekf_variance_max=self.ekf_variance_max,
                              jump_m=self.position_jump_m, stale_s=self.position_stale_s)


def supervisor_config_from_vehicle(params=None, **overrides) -> SupervisorConfig:
    """SupervisorConfig whose speed, acceleration and yaw-rate limits are those of
    ``config/vehicle.yaml`` (or ``params``, a VehicleParams), then ``overrides``."""
    if params is None:
        from airplay.sim.dynamics import load_vehicle_params

        params = load_vehicle_params()
    names = ("max_speed_xy_m_s", "max_speed_up_m_s", "max_speed_down_m_s", "max_accel_xy_m_s2",
             "max_accel_z_m_s2", "max_yaw_rate_rad_s")
    values = {name: float(getattr(params, name)) for name in names}
    values["control_period_s"] = float(params.control_dt_s)
    values.update(overrides)
    return SupervisorConfig(**values)


def default_flight_config(**overrides) -> FlightConfig:
    """FlightConfig with the supervisor limits of config/vehicle.yaml; ``overrides`` may name
    FlightConfig fields or SupervisorConfig fields."""
    flight_names = {f.name for f in fields(FlightConfig)} - {"supervisor"}
    sup = {k: v for k, v in overrides.items() if k not in flight_names}
    flight = {k: v for k, v in overrides.items() if k in flight_names}
    return replace(FlightConfig(**flight), supervisor=supervisor_config_from_vehicle(**sup))
