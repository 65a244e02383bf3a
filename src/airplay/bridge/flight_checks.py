"""Checks of the flight sequence: readiness to arm, the take-off's end, the autopilot's fence.

Positions and heights are map ENU metres (z up); times are seconds on the autopilot link's
clock. Used by :class:`~airplay.bridge.flight.FlightController` in its ``checking`` and
``taking_off`` phases.
"""

from __future__ import annotations

import logging
import math

from pymavlink.dialects.v20 import common as mavlink

from airplay.bridge.autopilot_fence import AutopilotFenceError, FenceTransfer, InstalledFence
from airplay.bridge.autopilot_fence import install as install_autopilot_fence
from airplay.bridge.autopilot_fence import request_from_supervisor
from airplay.bridge.estimator_watch import POS_HORIZ_ABS
from airplay.bridge.flight_config import PREARM_FRESH_S, AutopilotTookOver, FlightConfig, FlightFailure
from airplay.bridge.mavlink_link import CommandError

log = logging.getLogger("airplay.bridge")


PX4_ALT_ACCEPT_DEFAULT_M = 0.8
"""PX4's NAV_MC_ALT_RAD default (m): where it cannot be read, the altitude acceptance radius of
PX4's take-off (PX4 calls a multicopter take-off reached once its altitude is above the target
minus this radius, or minus half the take-off height where that is smaller)."""

PX4_ALT_REPORT_SLACK_M = 0.3
"""Metres the altitude in the last GLOBAL_POSITION_INT may lag PX4's own when its mode changes
(a climb of ~1.5 m/s, reports at ~5 Hz)."""

TAKEOFF_MIN_FRACTION = 0.5
"""A take-off is over only at a height (estimate, above the take-off's ground) of at least this
fraction of ``takeoff_height_m`` ..."""
TAKEOFF_MIN_HEIGHT_M = 0.3
"""... and never below this many metres, whatever the autopilot's own acceptance radius (PX4's
NAV_MC_ALT_RAD put its end of a 0.9 m take-off below home)."""

FAILSAFE_STATES = frozenset({mavlink.MAV_STATE_CRITICAL, mavlink.MAV_STATE_EMERGENCY,
                             mavlink.MAV_STATE_FLIGHT_TERMINATION})
"""HEARTBEAT system_status values of an autopilot in a failsafe (PX4 v1.17-dev SITL: a geofence
breach during AUTO.TAKEOFF -> AUTO.LOITER with MAV_STATE_CRITICAL; a normal take-off ends in
AUTO.LOITER with MAV_STATE_ACTIVE)."""


def px4_takeoff_reached_amsl(autopilot, height_m: float, timeout_s: float = 1.0,
                             base_amsl_m: float | None = None) -> float | None:
    """The altitude (m AMSL) above which PX4 calls a take-off of ``height_m`` above ``base_amsl_m``
    (the take-off's ground altitude; None: home's) reached, lowered by
    :data:`PX4_ALT_REPORT_SLACK_M`; None where neither is known. Reads NAV_MC_ALT_RAD
    (:data:`PX4_ALT_ACCEPT_DEFAULT_M` where it cannot be read)."""
    home = autopilot.status.home_amsl_m if base_amsl_m is None else base_amsl_m
    if home is None:
        return None
    try:
        radius = float(FenceTransfer(autopilot, timeout_s, retries=2).get_param("NAV_MC_ALT_RAD"))
    except AutopilotFenceError as exc:
        log.warning("NAV_MC_ALT_RAD not read (%s): taking PX4's default %.1f m", exc, PX4_ALT_ACCEPT_DEFAULT_M)
        radius = PX4_ALT_ACCEPT_DEFAULT_M
    if 0 < height_m < radius:
        radius = height_m / 2.0
    return home + height_m - radius - PX4_ALT_REPORT_SLACK_M


class TakeoffDone:
    """When the take-off is over; raises :class:`~airplay.bridge.flight_config.AutopilotTookOver`
    when the autopilot ended it by itself instead.

    Over: the vehicle within ``tolerance_m`` of ``target_z_m`` (map z), or, for PX4, PX4's own
    report: AUTO.TAKEOFF -> AUTO.LOITER, not in a failsafe (HEARTBEAT system_status, see
    :data:`FAILSAFE_STATES`) and at PX4's altitude of a reached take-off (``px4_reached_amsl_m``,
    :func:`px4_takeoff_reached_amsl`; None: not checked). PX4 climbs to its own home-relative
    height, which an estimate that drifted on the ground puts elsewhere, hence its report.

    Either way the vehicle must be off the ground: the autopilot's landed state (EXTENDED_SYS_STATE,
where it reports one) "in air", and the estimate at least ``max(TAKEOFF_MIN_FRACTION *
takeoff_height_m, TAKEOFF_MIN_HEIGHT_M)`` above ``ground_z_m``; until then the take-off goes on
(and ``takeoff_timeout_s`` runs). After PX4's report the estimate must also have come within
``tolerance_m`` below the target: PX4 calls a take-off reached NAV_MC_ALT_RAD (0.8 m by default)
short of it, so a 0.9 m take-off "ends" at 0.1 m, with SIH's true height still 0.00 m (10 of 10
runs beside busy loops). :attr:`short_of_target` then says the caller must have PX4 climb on
(:meth:`~airplay.bridge.mavlink_link.Autopilot.climb_in_hold`).

    Taken over: PX4 left AUTO.TAKEOFF any other way (a failsafe's Hold, Land or Return, the pilot's
    switch, a Hold below the take-off's altitude), or ArduPilot left GUIDED, its take-off mode:
    entering offboard control then would override the autopilot or the pilot.
    """

    def __init__(self, autopilot, target_z_m: float, tolerance_m: float,
                 px4_reached_amsl_m: float | None = None, ground_z_m: float | None = None) -> None:
        self.autopilot, self.target_z_m, self.tolerance_m = autopilot, target_z_m, tolerance_m
        self.px4_reached_amsl_m = px4_reached_amsl_m
        self.seen_takeoff_mode = False
        self.px4_reported = False
        self.short_of_target = False   # PX4 reported its take-off done below target - tolerance
        self.ground_z_m = ground_z_m
        height = None if ground_z_m is None else target_z_m - ground_z_m
        self.min_height_m = None if height is None else max(TAKEOFF_MIN_FRACTION * height, TAKEOFF_MIN_HEIGHT_M)
        self._waiting_logged = False

    def off_the_ground(self, st, z: float) -> bool:
        """The landed state (where reported) says in the air and the estimate is high enough."""
        low = self.min_height_m is not None and not (z - self.ground_z_m >= self.min_height_m)
        grounded = st.landed_state is not None and st.landed_state != "in_air"
        if (low or grounded) and not self._waiting_logged:
            self._waiting_logged = True
            log.info("take-off: not off the ground yet (landed state %s, height %.2f m, needed %.2f m): waiting",
                     st.landed_state or "not reported", z - (self.ground_z_m or 0.0), self.min_height_m or 0.0)
        return not (low or grounded)

    def __call__(self) -> bool:
        st = self.autopilot.status
        state = self.autopilot.telemetry.state()
        z = math.nan if state is None else float(state[2])
        if st.flavour == "px4":
            if st.mode == "AUTO.TAKEOFF":
                self.seen_takeoff_mode = True
            elif self.seen_takeoff_mode and st.armed:
                if not self.px4_reported:
                    self._px4_left_takeoff(st, z)
                    self.px4_reported = True
                elif st.mode != "AUTO.LOITER":
                    raise AutopilotTookOver(f"the autopilot left AUTO.LOITER before the vehicle was off the ground "
                                            f"(now {st.mode}, at z={z:.2f} m{self._failsafe_text(st)})"
                                            f"{self.autopilot.takeover_context(with_status=False)}")
                self.short_of_target = not (z >= self.target_z_m - self.tolerance_m)
                return self.off_the_ground(st, z) and not self.short_of_target
        elif st.flavour == "ardupilot" and st.mode and st.mode != "GUIDED" and st.armed:
            raise AutopilotTookOver(f"the autopilot left GUIDED during the take-off (now {st.mode}, at z={z:.2f} m"
                                    f"{self._failsafe_text(st)}){self.autopilot.takeover_context(with_status=False)}")
        return abs(z - self.target_z_m) <= self.tolerance_m and self.off_the_ground(st, z)

    def _px4_left_takeoff(self, st, z: float) -> None:
        """PX4 left AUTO.TAKEOFF: return if that is its take-off's end, else raise AutopilotTookOver."""
        altitude, reached = st.altitude_amsl_m, self.px4_reached_amsl_m
        low = reached is not None and altitude is not None and altitude < reached
        if st.mode == "AUTO.LOITER" and st.system_status not in FAILSAFE_STATES and not low:
            log.info("take-off complete by PX4's report (AUTO.TAKEOFF -> AUTO.LOITER) at z=%.2f m", z)
            return
        why = (" below its take-off's altitude" f" ({altitude:.2f} m AMSL < {reached:.2f})" if low else "")
        raise AutopilotTookOver(f"the autopilot ended the take-off by itself (now {st.mode}{why}, at z={z:.2f} m"
                                f"{self._failsafe_text(st)}){self.autopilot.takeover_context(with_status=False)}")

    @staticmethod
    def _failsafe_text(st) -> str:
        return "; in a failsafe: system_status CRITICAL or worse" if st.system_status in FAILSAFE_STATES else ""


PX4_CLIMB_RESEND_S = 3.0
"""Seconds between DO_REPOSITION climbs while PX4, its take-off reported, is still short of the target."""


class PX4ClimbOn:
    """Has PX4 climb on to the take-off's altitude where it called its take-off done short of it
    (:attr:`TakeoffDone.short_of_target`): DO_REPOSITION in Hold to ``base_amsl_m + height_m`` (m
    AMSL, the altitude the take-off was computed from), sent at once and again every
    :data:`PX4_CLIMB_RESEND_S` while the vehicle is short. A refusal raises
    :class:`~airplay.bridge.flight_config.FlightFailure` (the bridge then lands). Called as a
    predicate of the take-off's wait: always returns False (it never ends the wait)."""

    def __init__(self, autopilot, base_amsl_m: float | None, height_m: float, timeout_s: float = 1.0) -> None:
        self.autopilot, self.base_amsl_m, self.height_m, self.timeout_s = autopilot, base_amsl_m, height_m, timeout_s
        self.sent_at: float | None = None

    def __call__(self, done: "TakeoffDone") -> bool:
        if not done.short_of_target or self.base_amsl_m is None:
            return False
        now = self.autopilot.clock()
        if self.sent_at is not None and now - self.sent_at < PX4_CLIMB_RESEND_S:
            return False
        altitude = self.base_amsl_m + self.height_m
        state = self.autopilot.telemetry.state()
        z = math.nan if state is None else float(state[2])
        log.info("take-off: PX4 called it done short of z=%.2f m (now z=%.2f m): climbing on in Hold to %.2f m AMSL "
                 "(DO_REPOSITION)", done.target_z_m, z, altitude)
        self.sent_at = now
        try:
            self.autopilot.climb_in_hold(altitude, self.timeout_s)
        except CommandError as exc:
            raise FlightFailure(f"PX4 ended its take-off short of its height and refused the climb on: {exc}") from None
        return False


class EstimateStillness:
    """Whether the position estimate of a vehicle standing on the ground has settled: over the last
    ``window_s`` (s, on the caller's clock) every sample lies within ``spread_m`` (m, 3-D) of their
    mean. An EKF that is still converging after its boot (PX4 SIH: its height moved by 0.5-1.2 m in
    the first 8 s, "Ready for takeoff!" already said) would tie the map to a pose it then leaves."""

    def __init__(self, window_s: float = 2.0, spread_m: float = 0.1) -> None:
        self.window_s, self.spread_m = float(window_s), float(spread_m)
        self.samples: list[tuple[float, tuple[float, float, float]]] = []

    def add(self, t_s: float, position) -> None:
        self.samples.append((float(t_s), tuple(float(v) for v in position[:3])))
        while self.samples and self.samples[0][0] < t_s - 2.0 * self.window_s:
            self.samples.pop(0)

    def spread(self, now_s: float) -> float | None:
        """The largest distance from the window's mean (m), None while the window is not full."""
        recent = [p for t, p in self.samples if t >= now_s - self.window_s]
        if not self.samples or self.samples[0][0] > now_s - self.window_s or len(recent) < 2:
            return None
        mean = [sum(p[i] for p in recent) / len(recent) for i in range(3)]
        return max(math.dist(p, mean) for p in recent)

    def settled(self, now_s: float) -> bool:
        spread = self.spread(now_s)
        return spread is not None and spread <= self.spread_m


def prearm_missing(autopilot) -> list[str]:
    """What keeps the autopilot from being ready to arm (empty: ready): no position estimate;
    where reported and fresh (``PREARM_FRESH_S``), a failing SYS_STATUS pre-arm bit or (ArduPilot)
    no absolute horizontal position in EKF_STATUS_REPORT."""
    st, now = autopilot.status, autopilot.clock()

    def fresh(stamp_s: float | None) -> bool:  # a stale reading (no longer streamed) decides nothing
        return stamp_s is not None and now - stamp_s <= PREARM_FRESH_S

    missing = []
    if autopilot.telemetry.state() is None:
        missing.append("no position estimate yet (no LOCAL_POSITION_NED with attitude)")
    if st.prearm_ok is False and fresh(st.prearm_s):
        missing.append("the autopilot's pre-arm checks fail (SYS_STATUS)")
    if st.ekf_flags is not None and fresh(st.ekf_s) and not st.ekf_flags & POS_HORIZ_ABS:
        missing.append("the EKF has no absolute horizontal position yet (EKF_STATUS_REPORT)")
    return missing


def install_flight_fence(autopilot, config: FlightConfig, ground_z_m: float) -> InstalledFence:
    """The bridge's fence (``config.supervisor``) as the autopilot's own hard limit
    (:mod:`airplay.bridge.autopilot_fence`), its floor relative to ``ground_z_m`` (map z, m);
    :class:`~airplay.bridge.flight_config.FlightFailure` when no fence is set or it cannot be
    installed and read back."""
    cfg = config
    request = request_from_supervisor(cfg.supervisor, ground_z_m, cfg.autopilot_fence_action,
                                      cfg.autopilot_fence_margin_m, cfg.autopilot_ceiling_margin_m)
    if request is None:
        raise FlightFailure("autopilot_fence is true but no fence is set (fence_box, fence_polygon or fence_z_max)")
    try:
        return install_autopilot_fence(autopilot, request, autopilot.telemetry.tie, cfg.ack_timeout_s)
    except AutopilotFenceError as exc:
        raise FlightFailure(f"autopilot_fence: {exc}") from None
