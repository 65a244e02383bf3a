"""The bridge's core, without ROS: autopilot + safety supervisor + the flight sequence.

:class:`FlightController` owns an :class:`~airplay.bridge.mavlink_link.Autopilot` and a
:class:`~airplay.bridge.supervisor.SafetySupervisor`. The ROS node (``mavlink_bridge``, a
lifecycle node) and the tests drive it the same way: :meth:`FlightController.start` connects
and checks (the lifecycle's *configure*), :meth:`FlightController.request_arm` is the explicit
request to arm and fly (*activate*; nothing arms the vehicle without it),
:meth:`FlightController.land` lands (*deactivate*), :meth:`FlightController.shutdown` lands
and waits for the touchdown (Ctrl-C, SIGTERM, *shutdown*); :meth:`FlightController.on_command`
for each policy command and :meth:`FlightController.tick` once per control period.

The flight sequence is an explicit state machine (:class:`Phase`):

``connecting``
    waiting for the autopilot's HEARTBEAT (``heartbeat_wait_s``; flavour px4 or ardupilot). An
    autopilot that is already armed is not taken over (failed).
``checking``
    pre-arm checks, up to ``ready_timeout_s``: telemetry (LOCAL_POSITION_NED and attitude, i.e.
    a position estimate) arrives; where the autopilot reports them, its SYS_STATUS pre-arm check
    bit is healthy and (ArduPilot) its EKF_STATUS_REPORT has an absolute horizontal position.
    What is missing is logged every 5 s with the autopilot's STATUSTEXTs. With
    ``autopilot_fence`` the fence is then installed in the autopilot as its own hard limit and
    read back (:mod:`airplay.bridge.autopilot_fence`); a failure there fails on the ground.
``ready``
    disarmed on the ground, waiting for :meth:`request_arm`.
``arming``
    (ArduPilot: GUIDED first; PX4: AUTO.LOITER first where its mode is not one to arm in, e.g.
    OFFBOARD after an earlier flight) ARM; a refusal other than UNSUPPORTED is retried with back-off
    (0.5 s doubling to 4 s) until ``ready_timeout_s`` after the request, logging the autopilot's
    reason (STATUSTEXT).
``taking_off``
    NAV_TAKEOFF to ``takeoff_height_m``; within ``takeoff_timeout_s`` the vehicle must be within
    ``altitude_tolerance_m`` of it, and in the air. PX4 reports its take-off done (AUTO.TAKEOFF ->
    AUTO.LOITER, no failsafe) NAV_MC_ALT_RAD short of the target: the bridge then has PX4 climb on
    in Hold (DO_REPOSITION to the take-off's altitude) until the estimate is there. The autopilot
    ending the take-off any other way (its failsafe, the pilot's switch; ArduPilot leaving GUIDED) -> the bridge yields as
    in ``flying``: ``holding``, AUTOPILOT_TOOK_OVER, no offboard control.
``warming_up``
    the supervisor's output streamed (hover until the policy commands) for
    ``setpoint_warmup_s``, then PX4: OFFBOARD, checked in the HEARTBEAT.
``positioning``
    with a mission (:mod:`airplay.bridge.flight_mission`): position setpoints to the task's
    start pose until the vehicle has settled there; then the policy flies. (The map was tied to
    the task's start, with ``map_tie`` "task_start", when the checks passed.)
``flying
    every tick sends the supervisor's output: a velocity + yaw-rate setpoint (MAV_FRAME_LOCAL_NED,
    turned into the world frame with the current yaw), or a position + yaw setpoint while the
    supervisor holds. The autopilot leaving offboard control by itself (its fence or another
    failsafe, the pilot's mode switch) -> the bridge stops sending and ends in ``holding`` with an
    error (AUTOPILOT_TOOK_OVER): it never takes the vehicle back. With a mission, the task's end
    rules are judged every tick; at the end the policy is no longer flown: hold, then land.
``estimate_lost`` (an outcome, not a phase)
    from the take-off on, the autopilot's estimate is watched
    (:mod:`airplay.bridge.estimator_watch`: GPS fix, the estimator's flags and uncertainty,
    severe STATUSTEXTs, jumps, staleness). Where it is no longer fit to fly on, the bridge stops
    sending setpoints at once (no position setpoint on that estimate, not even a hold),
    reports ESTIMATE_DISTRUSTED with the reason and commands the autopilot's LAND
    (``landing``; PX4's AUTO.LAND and ArduCopter's LAND descend without a horizontal position
    where they have none): it never takes control back (the flight ends with an error). The
    same checks keep the bridge in ``checking`` before arming, and refuse OFFBOARD/GUIDED.
    Meanwhile the fence's stand-off grows with the reported horizontal uncertainty
    (:meth:`~airplay.bridge.supervisor.SafetySupervisor.on_estimate_uncertainty`).
``link_lost``
    nothing from the autopilot (HEARTBEAT or telemetry) for ``heartbeat_timeout_s`` while
    armed, or this process stalled that long (no control period ran): nothing is sent (the
    autopilot's own offboard-loss failsafe is in charge). The flight-time clock keeps running.
    When HEARTBEATs return: the vehicle already disarmed -> ``landed`` (an error); else
    ``link_return`` "land" (the default) -> ``landing``, "resume" -> ``warming_up`` -> ``flying``.
    No HEARTBEAT for ``link_lost_timeout_s`` -> ``failed``.
``landing``
    NAV_LAND, re-sent every second until acknowledged (meanwhile the supervisor's descent is
    streamed), then nothing more is sent; the vehicle must disarm within ``landing_timeout_s``.
``landed`` / ``holding`` / ``failed``
    the end: on the ground and disarmed / left to the autopilot (its hold mode with
    ``on_failure`` "hold", or a mode it chose itself) / could not reach either by itself. The
    autopilot's previous fence is restored by :meth:`FlightController.close` once disarmed.

Failures (a refused or unanswered command, a timeout) have one outcome each: airborne (a
take-off was commanded and the vehicle is armed) -> land (``on_failure`` "land", the default)
or the autopilot's hold mode ("hold"); on the ground -> disarm. :attr:`FlightController.error`
then says what failed (the node exits 1). The operator stop, a geofence landing, the policy's
stop and ``flight_time_s`` land without an error.

Time: ``clock`` seconds (wall time, ``time.time`` by default: ROS message stamps on the
vehicle are wall time, and command stamps must be on the supervisor's clock).

The parts: this module holds the sequence up to ``flying`` and the control period;
:mod:`airplay.bridge.flight_checks` the readiness, take-off and autopilot-fence checks;
:mod:`airplay.bridge.flight_ending` failures, landing, shutdown and close;
:mod:`airplay.bridge.flight_link` the link loss, its return and the autopilot taking over;
:mod:`airplay.bridge.flight_mission` the mission (tie, positioning, end);
:mod:`airplay.bridge.flight_config` the configuration and the phases.
"""

from __future__ import annotations

import logging
import math
import threading
import time

from airplay.bridge.autopilot_fence import InstalledFence
from airplay.bridge.flight_checks import (EstimateStillness, PX4ClimbOn, TakeoffDone, install_flight_fence,
                                          prearm_missing, px4_takeoff_reached_amsl)
from airplay.bridge.flight_config import (ARM_BACKOFF_S, PX4_ARMING_MODES, TERMINAL_PHASES, AutopilotTookOver,
                                          FlightConfig, FlightFailure, Phase)
from airplay.bridge.flight_ending import FlightEnding
from airplay.bridge.flight_link import LinkWatch
from airplay.bridge.flight_mission import MissionControl
from airplay.bridge.interventions import Intervention, InterventionKind, Mode
from airplay.bridge.mavlink_link import CommandError
from airplay.bridge.supervisor import SafetySupervisor
from airplay.frames import yaw_of_state

log = logging.getLogger("airplay.bridge")

ESTIMATE_WATCH_HZ = 5.0
"""Rate (Hz) asked for GPS_RAW_INT and ESTIMATOR_STATUS (PX4) / EKF_STATUS_REPORT (ArduPilot)."""
EKF_STATUS_REPORT_ID = 193
"""MAVLINK_MSG_ID_EKF_STATUS_REPORT (ardupilotmega dialect)."""
GROUND_RECENT_S = 5.0
"""Before the take-off, a severe STATUSTEXT or a jump of the estimate holds the arming back for
this long (s): an EKF settling on the ground (its origin set, a first GPS fix) is not a fault."""


class FlightController(FlightEnding, LinkWatch, MissionControl):
    """See the module docstring. ``on_intervention(intervention)``, ``on_phase(phase)``,
    ``on_tie(map_tie)`` and ``on_mission_end(ending)`` are called from the thread that caused
    them. ``judge``: the mission (:class:`~airplay.bridge.mission.MissionJudge`; None: the policy
    flies until told to land)."""

    def __init__(self, autopilot, config: FlightConfig | None = None, clock=time.time,
                 on_intervention=None, on_phase=None, judge=None, on_tie=None, on_mission_end=None) -> None:
        self.autopilot = autopilot
        self.config = config if config is not None else FlightConfig()
        self.clock = clock
        self.supervisor = SafetySupervisor(self.config.supervisor)
        self.on_intervention = on_intervention or (lambda iv: None)
        self.on_phase = on_phase or (lambda phase: None)
        self.judge = judge
        self.on_tie = on_tie or (lambda tie: None)
        self.on_mission_end = on_mission_end or (lambda ending: None)
        self.phase = Phase.CONNECTING
        self.error: str | None = None
        self.streaming = False
        self.sent = 0
        self.last_output = None
        self._lock = threading.RLock()
        self._arm_requested = threading.Event()
        self._landing_requested = False
        self._takeoff_commanded = False
        self._arm_commanded = False  # the bridge asked this vehicle to arm: only then may it disarm it
        self._flying_since: float | None = None
        self._link_lost_since: float | None = None
        self._land_after_loss = False
        self._phase_before_loss = Phase.FLYING
        self._in_offboard = False    # flying under offboard control, confirmed by the HEARTBEAT
        self._watch_since: float | None = None  # the Autopilot's clock at the take-off: the estimate is watched
        self.estimate_distrusted: str | None = None  # why the bridge stopped flying on the estimate
        autopilot.estimate.limits = self.config.estimate_limits()
        self.autopilot_fence: InstalledFence | None = None
        self._last_tick_s: float | None = None
        self._worker: threading.Thread | None = None
        self._stop = threading.Event()

    # -- inputs ------------------------------------------------------------------------------
    def on_command(self, cmd, stamp_s: float) -> None:
        """A policy command ``[vx, vy, vz m/s, yaw_rate rad/s]`` (heading frame) stamped ``stamp_s``."""
        with self._lock:
            refusal = self.supervisor.on_command(cmd, stamp_s, self.clock())
        if refusal is not None:
            log.debug("refused: %s", refusal)

    def operator_stop(self, reason: str = "operator stop") -> None:
        """Land now (latched); the supervisor reports OPERATOR_STOP_LAND. Before take-off: no arming."""
        with self._lock:
            self.supervisor.operator_stop(self.clock(), reason)
            streaming = self.streaming
        if not streaming:  # nothing streams the supervisor's descent: land (or stay on the ground) now
            self._request_land(reason)

    def land(self, reason: str = "mission end") -> None:
        """Normal landing: NAV_LAND on a worker thread, then stop streaming (before take-off: no arming)."""
        log.info("landing: %s", reason)
        self._request_land(reason)

    @property
    def airborne(self) -> bool:
        """A take-off was commanded and the vehicle is armed (it may be in the air)."""
        return self._takeoff_commanded and self.autopilot.status.armed

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    # -- the sequence -------------------------------------------------------------------------
    def start(self) -> None:
        """Connect and check (in the background); arming waits for :meth:`request_arm`."""
        self._worker = threading.Thread(target=self._sequence, name="flight-sequence", daemon=True)
        self._worker.start()

    def request_arm(self) -> bool:
        """The explicit request to arm, take off and fly: carried out once the checks pass.
        False (nothing happens) when the flight has ended or a landing was requested."""
        if self.finished or self._landing_requested:
            log.warning("arm request refused: the flight is %s", "over" if self.finished else "landing")
            return False
        log.info("arm request accepted (phase %s)", self.phase)
        self._arm_requested.set()
        return True

    def cancel_arm(self) -> None:
        """Withdraw an arm request not yet carried out (lifecycle deactivate before arming)."""
        self._arm_requested.clear()

    def _set_phase(self, phase: Phase) -> None:
        with self._lock:
            if phase == self.phase or self.phase in TERMINAL_PHASES:
                return
            log.info("phase %s -> %s", self.phase, phase)
            self.phase = phase
        self.on_phase(phase)

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _check_going(self, what: str) -> None:
        if self._stop.is_set():
            raise FlightFailure(f"stopped during {what}")
        if self.phase == Phase.LINK_LOST:
            raise FlightFailure(f"autopilot heartbeat lost during {what}")

    def _sequence(self) -> None:
        from pymavlink.dialects.v20 import common as mavlink

        ap, cfg = self.autopilot, self.config
        try:
            try:
                status = ap.wait_heartbeat(cfg.heartbeat_wait_s)
            except TimeoutError as exc:
                raise FlightFailure(str(exc)) from None
            log.info("autopilot: %s system %s, mode %s, %s", status.flavour, status.system, status.mode,
                     "ARMED" if status.armed else "disarmed")
            if status.armed:
                # an observer from here: no command, and no heartbeat either, which ArduPilot would
                # count as its ground station's and so put off its GCS failsafe
                ap.heartbeats = False
                raise FlightFailure("the autopilot is already armed: airplay arms only a vehicle that is disarmed "
                                    "on the ground, and does not take over one that flies (the bridge only "
                                    "watches it: no command, no heartbeat)")
            for msg_id in (mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED, mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION):
                ap.request_message_interval(msg_id, cfg.telemetry_rate_hz, cfg.ack_timeout_s)
            ap.request_message_interval(mavlink.MAVLINK_MSG_ID_SYS_STATUS, 2.0, cfg.ack_timeout_s)  # pre-arm bit
            ap.request_message_interval(mavlink.MAVLINK_MSG_ID_EXTENDED_SYS_STATE, 2.0, cfg.ack_timeout_s)  # landed
            # the estimate's health (estimator_watch): the GPS fix, the estimator's flags and uncertainty
            ap.request_message_interval(mavlink.MAVLINK_MSG_ID_GPS_RAW_INT, ESTIMATE_WATCH_HZ, cfg.ack_timeout_s)
            ap.request_message_interval(mavlink.MAVLINK_MSG_ID_ESTIMATOR_STATUS if status.flavour == "px4"
                                        else EKF_STATUS_REPORT_ID, ESTIMATE_WATCH_HZ, cfg.ack_timeout_s)
            self._set_phase(Phase.CHECKING)
            self._wait_ready()
            self._tie_at_start()
            if cfg.autopilot_fence:
                self._install_autopilot_fence()
            self._set_phase(Phase.READY)
            while not self._arm_requested.is_set():
                if self._stop.is_set() or self._landing_requested:
                    return
                self._arm_requested.wait(0.1)
            if self._landing_requested:
                return
            self._set_phase(Phase.ARMING)
            self._arm()
            self._set_phase(Phase.TAKING_OFF)
            ground_z = self._current_z()
            self._watch_since = ap.clock()
            self._takeoff_commanded = True
            base_amsl = ap.takeoff(cfg.takeoff_height_m, cfg.ack_timeout_s)
            target = ground_z + cfg.takeoff_height_m
            reached_amsl = (px4_takeoff_reached_amsl(ap, cfg.takeoff_height_m, cfg.ack_timeout_s, base_amsl)
                            if ap.status.flavour == "px4" else None)
            climbed = TakeoffDone(ap, target, cfg.altitude_tolerance_m, reached_amsl, ground_z_m=ground_z)
            climb_on = PX4ClimbOn(ap, base_amsl, cfg.takeoff_height_m, cfg.ack_timeout_s)
            try:
                ap.wait_for(lambda: climbed() or climb_on(climbed) or self._stop.is_set() or self._landing_requested
                            or self.phase == Phase.LINK_LOST or bool(self._estimate_problems()),
                            cfg.takeoff_timeout_s,
                            f"the take-off to z={target:.2f} m")
            except TimeoutError as exc:
                raise FlightFailure(f"{exc} (takeoff_timeout_s; at z={self._current_z():.2f} m)") from None
            if self._landing_requested:
                return
            self._check_going("the take-off")
            problems = self._estimate_problems()
            if problems:  # the autopilot flies its take-off: no offboard control on this estimate
                self._distrust(self.clock(), problems, "during the take-off")
                return
            self._enter_offboard()
        except AutopilotTookOver as exc:
            self._yield_to_autopilot(self.clock(), f"{exc}: it is in control; the bridge does not take it back")
        except (FlightFailure, CommandError, TimeoutError) as exc:
            self._fail(str(exc))

    def _wait_ready(self) -> None:
        """``checking``: telemetry (a position estimate) and a healthy pre-arm bit where reported;
        with a map tied at the task's start, also an estimate that has stopped moving
        (:class:`~airplay.bridge.flight_checks.EstimateStillness`)."""
        ap, cfg = self.autopilot, self.config
        deadline = time.monotonic() + cfg.ready_timeout_s
        next_report = time.monotonic() + 5.0
        still = EstimateStillness(cfg.estimate_settle_s, cfg.estimate_settle_spread_m) \
            if self.mission is not None and cfg.map_tie == "task_start" else None
        while True:
            missing = prearm_missing(self.autopilot) + self._ground_estimate_problems()
            if still is not None:
                local = ap.telemetry.local_state()
                if local is not None:
                    still.add(time.monotonic(), local[0:3])
                if not still.settled(time.monotonic()):
                    spread = still.spread(time.monotonic())
                    missing.append(f"the position estimate has not settled on the ground yet (moved "
                                   f"{'?' if spread is None else f'{spread:.2f}'} m in {cfg.estimate_settle_s:.0f} s, "
                                   f"> {cfg.estimate_settle_spread_m:.2f} m)")
            if not missing:
                log.info("pre-arm checks pass: position estimate, %s", "pre-arm checks healthy"
                         if ap.status.prearm_ok else "no pre-arm bit reported")
                return
            self._check_going("the pre-arm checks")
            now = time.monotonic()
            if now >= deadline:
                raise FlightFailure(f"not ready after {cfg.ready_timeout_s:.0f} s (ready_timeout_s): "
                                    f"{'; '.join(missing)}{self.autopilot.recent_texts()}")
            if now >= next_report:
                log.info("waiting for the autopilot: %s%s", "; ".join(missing), self.autopilot.recent_texts())
                next_report = now + 5.0
            self._sleep(0.1)

    def _install_autopilot_fence(self) -> None:
        """``checking``: the bridge's fence as the autopilot's own hard limit (:mod:`.autopilot_fence`)."""
        self.autopilot_fence = install_flight_fence(self.autopilot, self.config, self._current_z())

    def _arm(self) -> None:
        """``arming``: (ArduPilot GUIDED,) ARM, retried with back-off while the refusal may pass."""
        ap, cfg = self.autopilot, self.config
        problems = self._ground_estimate_problems()
        if problems:
            raise FlightFailure(f"not arming: {'; '.join(problems)}")
        deadline = time.monotonic() + cfg.ready_timeout_s
        delay, attempt = ARM_BACKOFF_S[0], 0
        while True:
            attempt += 1
            try:
                if ap.status.flavour == "ardupilot" and ap.status.mode != "GUIDED":
                    ap.set_mode("offboard", cfg.ack_timeout_s, verify_s=2.0)
                elif ap.status.flavour == "px4" and ap.status.mode not in PX4_ARMING_MODES:
                    # e.g. OFFBOARD or AUTO.LAND left over from a previous flight: PX4 refuses to arm there
                    ap.set_mode("hold", cfg.ack_timeout_s, verify_s=2.0)
                self._arm_commanded = True
                ap.arm(cfg.ack_timeout_s)
                try:
                    ap.wait_for(lambda: ap.status.armed, 2.0, "ARMED in the autopilot's HEARTBEAT")
                except TimeoutError as exc:
                    raise CommandError(str(exc)) from None
                log.info("armed (attempt %d)", attempt)
                return
            except CommandError as exc:
                self._check_going("arming")
                if self._landing_requested:
                    raise FlightFailure("landing requested while arming") from None
                if not exc.retryable or time.monotonic() + delay > deadline:
                    raise FlightFailure(f"arming failed after {attempt} attempt(s): {exc}") from None
                log.warning("arming not possible yet (attempt %d: %s); retrying in %.1f s", attempt, exc, delay)
                self._sleep(delay)
                delay = min(2 * delay, ARM_BACKOFF_S[1])

    def _enter_offboard(self) -> None:
        """``warming_up``: stream the supervisor's hover, then OFFBOARD (PX4); then ``flying``."""
        ap, cfg = self.autopilot, self.config
        if self.estimate_distrusted is not None:
            raise FlightFailure(f"no offboard control again: {self.estimate_distrusted}")
        self._set_phase(Phase.WARMING_UP)
        with self._lock:
            self.supervisor.reset()
            self.streaming = True
        self._sleep(cfg.setpoint_warmup_s)
        self._check_going("the setpoint warm-up")
        if self._landing_requested:
            return  # landing already (the geofence, the operator): no switch to offboard control
        problems = self._estimate_problems()
        if problems:
            self._distrust(self.clock(), problems, "before the switch to offboard control")
            return
        try:
            if ap.status.flavour == "px4" or ap.status.mode != "GUIDED":
                ap.set_mode("offboard", cfg.ack_timeout_s, verify_s=2.0)
        except CommandError:
            if self._landing_requested:
                return  # the landing asked for meanwhile took the autopilot out of it: not a failure
            raise
        if self._landing_requested:
            return
        self._check_going("the switch to offboard control")
        self._in_offboard = True
        self._position_at_start()
        if self._landing_requested or self.phase not in (Phase.WARMING_UP, Phase.POSITIONING):
            return
        self._start_mission(self.clock())
        if self._flying_since is None:
            self._flying_since = self.clock()
        self._set_phase(Phase.FLYING)

    # -- the estimate ---------------------------------------------------------------------------
    def _estimate_problems(self, since_s: float | None = None) -> list[str]:
        """What makes the autopilot's estimate unfit to fly on now (empty: none), counting its texts
        and jumps from ``since_s`` (the Autopilot's clock; None: from the take-off on, and nothing
        before it)."""
        ap = self.autopilot
        since_s = self._watch_since if since_s is None else since_s
        if since_s is None:
            return []
        return ap.estimate.problems(ap.clock(), since_s=since_s, last_message_s=ap.status.last_message_s)

    def _ground_estimate_problems(self) -> list[str]:
        """Before the take-off: the estimate's problems now (texts and jumps of the last
        :data:`GROUND_RECENT_S`), each prefixed for the pre-arm report."""
        return [f"the estimate: {p}" for p in self._estimate_problems(self.autopilot.clock() - GROUND_RECENT_S)]

    def _watch_estimate(self, now: float) -> None:
        """While the bridge streams (warming up, positioning, flying): an estimate not to be flown
        on ends its control (:meth:`_distrust`)."""
        if self.estimate_distrusted is not None or not self.streaming or self.phase not in (
                Phase.WARMING_UP, Phase.POSITIONING, Phase.FLYING):
            return
        problems = self._estimate_problems()
        if problems:
            self._distrust(now, problems, f"in phase {self.phase}")

    def _distrust(self, now: float, problems: list[str], when: str) -> None:
        """The estimate is not to be flown on: stop sending (no setpoint computed on it), report
        ESTIMATE_DISTRUSTED, command the autopilot's LAND; never fly offboard again this flight."""
        with self._lock:
            if self.estimate_distrusted is not None:
                return
            self.streaming = False
            self._in_offboard = False
            reason = (f"the autopilot's position estimate is not fit to fly on {when}: {'; '.join(problems)}; "
                      "the bridge stopped sending setpoints and hands the vehicle to the autopilot's LAND")
            self.estimate_distrusted = reason
        self.error = self.error or reason
        log.error("%s", reason)
        self.on_intervention(Intervention(now, InterventionKind.ESTIMATE_DISTRUSTED, reason,
                                          None if self.last_output is None else self.last_output.command, None))
        self._request_land(reason, force=True)

    def _current_z(self) -> float:
        state = self.autopilot.telemetry.state()
        return math.nan if state is None else float(state[2])

    # -- the control period ---------------------------------------------------------------
    def tick(self):
        """Once per control period: feed the supervisor, watch the link, send the supervisor's
        output while streaming. Returns the SupervisorOutput (None while not streaming)."""
        now = self.clock()
        ap, cfg = self.autopilot, self.config
        with self._lock:
            sup = self.supervisor
            if ap.last_heard_s is not None:  # the link is alive while any message of the autopilot comes
                sup.on_heartbeat(ap.last_heard_s)
            state = ap.telemetry.state()
            yaw = None if state is None else yaw_of_state(state)
            if state is not None:
                sup.on_state(state[0:3], state[7:10], yaw, now)
            sup.on_estimate_uncertainty(ap.estimate.eph_m)
        self._watch_link(now)
        self._watch_mode(now)
        self._watch_estimate(now)
        with self._lock:
            if not self.streaming or self.phase == Phase.LINK_LOST:
                return None
            out = sup.output(now)
            self.last_output = out
            goto = self._goto_setpoint(out)
            if out.command is not None:
                if goto is not None:  # positioning at the task's start, or the mission's end: hold there
                    ap.send_position(*goto)
                elif out.hold_position_enu is not None:  # the supervisor holds: a position setpoint, no drift
                    ap.send_position(out.hold_position_enu, out.hold_yaw_rad)
                else:  # world-frame velocity: what the supervisor checked against the fence
                    ap.send_velocity(out.command, yaw)
                self.sent += 1
        for intervention in out.interventions:
            self.on_intervention(intervention)
        self._judge_mission(now, state)
        if out.mode is Mode.LANDING and not self._landing_requested:
            self._request_land("the supervisor lands (operator stop or geofence)")
        elif (self.phase == Phase.FLYING and cfg.flight_time_s > 0 and self._flying_since is not None
              and now - self._flying_since >= cfg.flight_time_s):
            self.land(f"flight_time_s {cfg.flight_time_s:.1f} s elapsed")
        return out
