"""Checks of the flight sequence: readiness to arm, the take-off's end, the autopilot's fence.

Positions and heights are map ENU metres (z up); times are seconds on the autopilot link's
clock. Used by :class:`~airplay.bridge.flight.FlightController` in its ``checking`` and
``taking_off`` phases.
"""

from __future__ import annotations

import logging
import math

from airplay.bridge.autopilot_fence import AutopilotFenceError, InstalledFence
from airplay.bridge.autopilot_fence import install as install_autopilot_fence
from airplay.bridge.autopilot_fence import request_from_supervisor
from airplay.bridge.flight_config import EKF_POS_HORIZ_ABS, PREARM_FRESH_S, FlightConfig, FlightFailure

log = logging.getLogger("airplay.bridge")


class TakeoffDone:
    """The take-off is over when the vehicle is within ``tolerance_m`` of ``target_z_m`` (map z), or,
    for PX4, when PX4 itself says so: its mode goes from AUTO.TAKEOFF to AUTO.LOITER (PX4 climbs to
    its own home-relative height, which an estimate that drifted on the ground puts elsewhere)."""

    def __init__(self, autopilot, target_z_m: float, tolerance_m: float) -> None:
        self.autopilot, self.target_z_m, self.tolerance_m = autopilot, target_z_m, tolerance_m
        self.seen_takeoff_mode = False

    def __call__(self) -> bool:
        st = self.autopilot.status
        state = self.autopilot.telemetry.state()
        if state is not None and abs(float(state[2]) - self.target_z_m) <= self.tolerance_m:
            return True
        if st.flavour == "px4":
            if st.mode == "AUTO.TAKEOFF":
                self.seen_takeoff_mode = True
            elif self.seen_takeoff_mode and st.mode == "AUTO.LOITER" and st.armed:
                log.info("take-off complete by PX4's report (AUTO.TAKEOFF -> AUTO.LOITER) at z=%.2f m",
                         math.nan if state is None else float(state[2]))
                return True
        return False


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
    if st.ekf_flags is not None and fresh(st.ekf_s) and not st.ekf_flags & EKF_POS_HORIZ_ABS:
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
        return install_autopilot_fence(autopilot, request, autopilot.telemetry.origin_enu, cfg.ack_timeout_s)
    except AutopilotFenceError as exc:
        raise FlightFailure(f"autopilot_fence: {exc}") from None
