"""The supervisor's vocabulary: its modes, the kinds of intervention, one intervention, one output.

Commands are airplay velocity commands ``[vx, vy, vz, yaw_rate]``: vx forward and vy left in
the heading frame (base_link FLU rotated by yaw only), vz up, m/s; yaw_rate rad/s
counter-clockwise. Positions are map ENU metres. Times are seconds on the caller's clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

CHANGE_TOLERANCE = 1e-6
"""m/s (rad/s for yaw rate): a limit is enforced, and reported, only when exceeded by more than this."""


class Mode(enum.Enum):
    WAITING_FOR_HEARTBEAT = "waiting_for_heartbeat"
    FLYING = "flying"
    HOLD = "hold"
    LANDING = "landing"
    STOPPED_NO_HEARTBEAT = "stopped_no_heartbeat"


class InterventionKind(enum.Enum):
    CLAMPED_SPEED = "clamped_speed"
    CLAMPED_ACCEL = "clamped_accel"
    CLAMPED_YAW_RATE = "clamped_yaw_rate"
    REFUSED_NON_FINITE = "refused_non_finite"
    REFUSED_MALFORMED = "refused_malformed"
    REFUSED_OUT_OF_ORDER = "refused_out_of_order"
    STALE_COMMAND_HOLD = "stale_command_hold"
    GEOFENCE_HOLD = "geofence_hold"
    GEOFENCE_OUTWARD_REMOVED = "geofence_outward_removed"
    GEOFENCE_BRAKE = "geofence_brake"
    GEOFENCE_LAND = "geofence_land"
    OPERATOR_STOP_LAND = "operator_stop_land"
    HEARTBEAT_LOST = "heartbeat_lost"
    AUTOPILOT_TOOK_OVER = "autopilot_took_over"
    ESTIMATE_DISTRUSTED = "estimate_distrusted"


@dataclass(frozen=True)
class Intervention:
    """One refusal or modification. ``command_in``/``command_out``: (4,) heading-frame commands
    (m/s, rad/s) or None where there was none (e.g. a malformed input, or nothing sent)."""

    time_s: float
    kind: InterventionKind
    reason: str
    command_in: np.ndarray | None = None
    command_out: np.ndarray | None = None

    def to_dict(self) -> dict:
        """JSON-ready form (for publishing on a std_msgs/String topic)."""
        def as_list(c):
            return None if c is None else [float(x) for x in c]

        return {"time_s": self.time_s, "kind": self.kind.value, "reason": self.reason,
                "command_in": as_list(self.command_in), "command_out": as_list(self.command_out)}

    def __str__(self) -> str:
        return f"[{self.time_s:.3f} s] {self.kind.name}: {self.reason}"


@dataclass(frozen=True)
class SupervisorOutput:
    """What to send now: ``command`` (4,) heading-frame [vx, vy, vz m/s, yaw_rate rad/s] or None
    (send nothing), the ``mode``, and the interventions reported since the last output.

    In HOLD with a known vehicle position: ``hold_position_enu`` (3,) map ENU metres and
    ``hold_yaw_rad`` (map ENU yaw, rad, counter-clockwise from east), the pose latched when
    this HOLD began (see the module docstring), for a position setpoint; ``command`` is then
    still the zero-velocity hover. Otherwise both None."""

    command: np.ndarray | None
    mode: Mode
    interventions: tuple[Intervention, ...] = ()
    hold_position_enu: np.ndarray | None = None
    hold_yaw_rad: float | None = None


def format_vector(v) -> str:
    """``[a, b, c]`` with three significant digits, for intervention reasons and logs."""
    return "[" + ", ".join(f"{float(x):.3g}" for x in v) + "]"
