"""Is the autopilot's position estimate still one to fly on? The bridge's watch on its estimator.

The bridge flies on the autopilot's estimate (LOCAL_POSITION_NED): its geofence, its position holds
and the mission's rules all read it. An estimate the autopilot itself no longer trusts (GPS lost,
a glitch, dead reckoning) can be metres off the truth while it still looks smooth, so the bridge
watches what the autopilot says about it:

``GPS_RAW_INT``
    ``fix_type`` (a 3D fix or better). A fix that had been 3D and drops below
    is a GPS loss (PX4 SIH: reported about 1 s after the receiver stopped; its EKF dead-reckons
    on for ~5 s with a growing ``eph`` before it gives the position up). A vehicle that never had
    a fix (indoors, a vision estimate) is judged on its estimator's flags alone.
``ESTIMATOR_STATUS`` (PX4)
    ``flags`` (ESTIMATOR_STATUS_FLAGS: a horizontal position, relative or absolute, and a
    horizontal velocity are needed; GPS_GLITCH and ACCEL_ERROR are refused) and
    ``pos_horiz_accuracy`` (the EKF's 1-sigma horizontal error, m: the ``eph`` below).
``EKF_STATUS_REPORT`` (ArduPilot)
    ``flags`` (EKF_STATUS_FLAGS: the same position and velocity bits; EKF_GPS_GLITCH and
    EKF_UNINITIALIZED refused) and ``pos_horiz_variance`` / ``velocity_variance``: ArduPilot's
    normalised innovation test ratios, where 1 fails its own gate (its EKF failsafe acts at
    FS_EKF_THRESH, 0.8 by default).
``STATUSTEXT`` at CRITICAL, ALERT or EMERGENCY
    naming the GPS, the EKF, a glitch, the compass or the position (ArduCopter: "GPS Glitch or
    Compass error"); PreArm/Arm texts (the autopilot's answers on the ground) are not counted.
``LOCAL_POSITION_NED`` itself
    a jump: a new position more than ``jump_m`` from where the previous one and its velocity put
    it (an estimator reset, a glitch taken in: ArduCopter moved its estimate 22 m in one step);
    stale: none for ``stale_s`` while the link is alive.

:meth:`EstimatorWatch.problems` says what is wrong now, each as a sentence (empty: fly on);
:attr:`EstimatorWatch.eph_m` is the horizontal uncertainty the bridge's fence margin grows with.
Times are seconds on the caller's clock (the :class:`~airplay.bridge.mavlink_link.Autopilot`'s,
monotonic); positions local NED metres. No pymavlink and no rclpy here: plain numbers in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields

# ESTIMATOR_STATUS_FLAGS (PX4, common dialect) and EKF_STATUS_FLAGS (ardupilotmega) share the low bits
VELOCITY_HORIZ = 2
POS_HORIZ_REL = 8
POS_HORIZ_ABS = 16
PRED_POS_HORIZ_ABS = 512
PX4_GPS_GLITCH = 1024       # ESTIMATOR_GPS_GLITCH
PX4_ACCEL_ERROR = 2048      # ESTIMATOR_ACCEL_ERROR
AP_UNINITIALIZED = 1024     # EKF_UNINITIALIZED (the same bit as PX4's GPS glitch: read per source)
AP_GPS_GLITCH = 32768       # EKF_GPS_GLITCH
GPS_FIX_3D = 3              # GPS_FIX_TYPE_3D_FIX
SEVERE = 2                  # MAV_SEVERITY_CRITICAL: this and below (ALERT 1, EMERGENCY 0) are severe

ESTIMATOR_WORDS = re.compile(r"gps|ekf|glitch|compass|mag|position|navigation|estimat|yaw|heading", re.IGNORECASE)
"""A severe STATUSTEXT naming one of these is about the estimate."""
GROUND_TEXTS = re.compile(r"^\s*(prearm|pre-arm|arm|preflight)", re.IGNORECASE)
"""Answers to an arming request on the ground, not a failure in flight."""


@dataclass(frozen=True)
class EstimateLimits:
    """When the bridge stops trusting the estimate. ``max_eph_m``: the largest horizontal
    uncertainty (m, 1 sigma) it flies on; ``ekf_variance_max``: the largest ArduPilot EKF test
    ratio; ``jump_m``: a position step (m) beyond what the last velocity explains; ``stale_s``:
    the longest gap between positions (s); ``gps_fix_min``: the GPS fix type a fix that was
    there must keep (3: 3D)."""

    max_eph_m: float = 1.0
    ekf_variance_max: float = 0.8
    jump_m: float = 1.0
    stale_s: float = 1.0
    gps_fix_min: int = GPS_FIX_3D

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"EstimateLimits.{f.name} must be a positive number, got {value!r}")


@dataclass
class _Report:
    time_s: float
    text: str


class EstimatorWatch:
    """What the autopilot said about its estimate, kept as it arrives (the receive thread calls
    the ``on_*`` methods); :meth:`problems` judges it against ``limits`` (:class:`EstimateLimits`;
    the bridge sets its own)."""

    def __init__(self, limits: EstimateLimits | None = None) -> None:
        self.limits = limits if limits is not None else EstimateLimits()
        self.gps_fix: int | None = None
        self.gps_had_fix = False          # a 3D fix was seen: its loss counts
        self.eph_m: float | None = None   # PX4 ESTIMATOR_STATUS pos_horiz_accuracy, m
        self.flags: int | None = None     # the estimator's flags, of ``flags_source``
        self.flags_source: str | None = None  # "px4" (ESTIMATOR_STATUS) or "ardupilot" (EKF_STATUS_REPORT)
        self.ekf_ratios: dict[str, float] = {}
        self.severe_texts: list[_Report] = []
        self.jumps: list[_Report] = []
        self.position_s: float | None = None
        self._last = None                 # (time_boot_ms, position_ned, velocity_ned)

    # -- inputs (the receive thread) -------------------------------------------------------------
    def on_gps(self, fix_type: int) -> None:
        """A GPS_RAW_INT's fix type (GPS_FIX_TYPE)."""
        self.gps_fix = int(fix_type)
        if fix_type >= GPS_FIX_3D:
            self.gps_had_fix = True

    def on_estimator_status(self, flags: int, pos_horiz_accuracy_m: float) -> None:
        """A PX4 ESTIMATOR_STATUS: ESTIMATOR_STATUS_FLAGS and the horizontal accuracy (m)."""
        self.flags, self.flags_source = int(flags), "px4"
        if math.isfinite(pos_horiz_accuracy_m) and pos_horiz_accuracy_m >= 0:
            self.eph_m = float(pos_horiz_accuracy_m)

    def on_ekf_status(self, flags: int, velocity_variance: float, pos_horiz_variance: float) -> None:
        """An ArduPilot EKF_STATUS_REPORT: EKF_STATUS_FLAGS and its test ratios."""
        self.flags, self.flags_source = int(flags), "ardupilot"
        self.ekf_ratios = {"velocity": float(velocity_variance), "horizontal position": float(pos_horiz_variance)}

    def on_statustext(self, time_s: float, severity: int, text: str) -> None:
        """A STATUSTEXT; kept where it is severe and about the estimate."""
        if severity <= SEVERE and ESTIMATOR_WORDS.search(text) and not GROUND_TEXTS.match(text):
            self.severe_texts.append(_Report(time_s, text))
            del self.severe_texts[:-20]

    def on_position(self, time_s: float, time_boot_ms: int, position_ned, velocity_ned) -> None:
        """An accepted LOCAL_POSITION_NED (m, m/s) received at ``time_s``: a jump is kept where the
        step is the limits' ``jump_m`` beyond what the velocities explain over the autopilot's own time between
        the two (``time_boot_ms``: a burst after a stall on this side is no jump)."""
        p = tuple(float(x) for x in position_ned)
        v = tuple(float(x) for x in velocity_ned)
        if self._last is not None:
            t0, p0, v0 = self._last
            dt = max(0.0, (time_boot_ms - t0) / 1000.0)
            # the step from the previous position, less what the two velocities flew (trapezoid)
            jump_m = self.limits.jump_m
            miss = math.sqrt(sum((p[i] - p0[i] - 0.5 * (v0[i] + v[i]) * dt) ** 2 for i in range(3)))
            if miss > jump_m:
                self.jumps.append(_Report(time_s, f"the position estimate jumped {miss:.2f} m (> {jump_m:.2f} m) "
                                                  f"beyond its velocity in {dt:.2f} s"))
                del self.jumps[:-20]
        self._last = (int(time_boot_ms), p, v)
        self.position_s = time_s

    # -- judgement -------------------------------------------------------------------------------
    def problems(self, now_s: float, since_s: float = -math.inf, last_message_s: float | None = None) -> list[str]:
        """What makes the estimate unfit to fly on now, one sentence each (empty: none). Texts and
        jumps count from ``since_s`` on (the start of the bridge's control). Staleness: the newest
        position older than ``stale_s`` than ``last_message_s`` (the newest message of the autopilot,
        any kind): the link is alive, the positions are not (where nothing comes at all, the
        link watch is in charge)."""
        limits = self.limits
        out: list[str] = []
        if self.gps_had_fix and self.gps_fix is not None and self.gps_fix < limits.gps_fix_min:
            out.append(f"GPS lost: GPS_RAW_INT fix type {self.gps_fix} (< {limits.gps_fix_min}, had a 3D fix)")
        if self.flags is not None:
            f, src = self.flags, self.flags_source
            if not f & (POS_HORIZ_ABS | POS_HORIZ_REL):
                out.append(f"the estimator has no horizontal position (flags 0x{f:x})")
            elif not f & VELOCITY_HORIZ:
                out.append(f"the estimator has no horizontal velocity (flags 0x{f:x})")
            if src == "px4" and f & PX4_GPS_GLITCH:
                out.append(f"the estimator reports a GPS glitch (flags 0x{f:x})")
            if src == "px4" and f & PX4_ACCEL_ERROR:
                out.append(f"the estimator reports an accelerometer error (flags 0x{f:x})")
            if src == "ardupilot" and f & AP_GPS_GLITCH:
                out.append(f"the EKF reports a GPS glitch (flags 0x{f:x})")
            if src == "ardupilot" and f & AP_UNINITIALIZED:
                out.append(f"the EKF is not initialised (flags 0x{f:x})")
        for name, ratio in self.ekf_ratios.items():
            if math.isfinite(ratio) and ratio > limits.ekf_variance_max:
                out.append(f"the EKF's {name} test ratio is {ratio:.2f} (> {limits.ekf_variance_max:.2f})")
        if self.eph_m is not None and self.eph_m > limits.max_eph_m:
            out.append(f"horizontal uncertainty {self.eph_m:.2f} m (> max_eph_m {limits.max_eph_m:.2f} m)")
        texts = [r.text for r in self.severe_texts if r.time_s >= since_s]
        if texts:
            out.append(f"the autopilot says: {'; '.join(texts[-3:])}")
        jumps = [r.text for r in self.jumps if r.time_s >= since_s]
        if jumps:
            out.append(jumps[-1])
        if last_message_s is not None and self.position_s is not None \
                and last_message_s - self.position_s > limits.stale_s:
            out.append(f"no position estimate for {now_s - self.position_s:.2f} s (> {limits.stale_s:.2f} s) "
                       "while the autopilot's other messages come")
        return out
