"""The flight's link and mode watch: a lost autopilot link, its return, the autopilot taking over.

A mixin of :class:`~airplay.bridge.flight.FlightController` (it uses the controller's
autopilot, config, phase, lock and flags; see that class), run from its control period.
Heartbeat loss while armed (or this process stalled as long) -> ``link_lost``: nothing is sent,
the autopilot's failsafe is in charge; its return -> the ``link_return`` rule (land or resume).
The autopilot leaving offboard control by itself while ``flying`` (or ending the take-off by
itself, :class:`~airplay.bridge.flight_checks.TakeoffDone`) -> the bridge yields (``holding``,
AUTOPILOT_TOOK_OVER). Times are seconds on the controller's clock.
"""

from __future__ import annotations

import logging
import threading

from airplay.bridge.flight_config import OFFBOARD_PHASES, FlightFailure, Phase
from airplay.bridge.interventions import Intervention, InterventionKind
from airplay.bridge.mavlink_link import CommandError
from airplay.bridge.modes import MODE_NAMES

log = logging.getLogger("airplay.bridge")


class LinkWatch:
    """Link loss, link return and take-over handling of a :class:`~airplay.bridge.flight.FlightController`."""

    def _watch_link(self, now: float) -> None:
        """Heartbeat loss while armed -> ``link_lost``; its return -> the ``link_return`` rule."""
        cfg = self.config
        timeout = cfg.supervisor.heartbeat_timeout_s
        if timeout is None:
            return
        age = self.autopilot.link_age_s()
        lost = age > timeout
        phase = self.phase
        stalled_s = 0.0 if self._last_tick_s is None else now - self._last_tick_s
        self._last_tick_s = now
        airborne_phases = (Phase.TAKING_OFF, Phase.WARMING_UP, Phase.POSITIONING, Phase.FLYING, Phase.LANDING)
        if stalled_s > timeout and phase in airborne_phases:
            # this process stalled (SIGSTOP, swap): nothing was sent, the autopilot's failsafe may have acted
            log.error("the bridge itself stalled for %.2f s (> heartbeat_timeout_s %.2f s)", stalled_s, timeout)
            lost, age = True, max(age, stalled_s)
        if phase in airborne_phases and lost:
            with self._lock:
                self._link_lost_since = now - age
                self._phase_before_loss = phase
            reason = (f"no autopilot heartbeat for {age:.2f} s (> {timeout:.2f} s) in phase {phase}: stopped "
                      "sending, the autopilot's failsafe is in charge")
            log.error("%s", reason)
            self._in_offboard = False
            self._set_phase(Phase.LINK_LOST)
            self.on_intervention(Intervention(now, InterventionKind.HEARTBEAT_LOST, reason,
                                              None if self.last_output is None else self.last_output.command, None))
        elif phase == Phase.LINK_LOST:
            lost_s = now - self._link_lost_since
            if not lost:
                self._on_link_return(lost_s)
            elif lost_s > cfg.link_lost_timeout_s:
                self.error = self.error or (f"autopilot heartbeat lost for {lost_s:.1f} s (> link_lost_timeout_s "
                                            f"{cfg.link_lost_timeout_s:.0f} s); its failsafe is in charge")
                log.error("%s", self.error)
                with self._lock:
                    self.streaming = False
                self._set_phase(Phase.FAILED)

    def _watch_mode(self, now: float) -> None:
        """The autopilot left offboard control by itself (its fence, a failsafe, the pilot's switch)
        while ``positioning`` or ``flying``: the bridge yields. It stops sending, reports
        AUTOPILOT_TOOK_OVER and ends in ``holding`` with an error; the autopilot (or the pilot) keeps
        control."""
        if not self._in_offboard or self.phase not in OFFBOARD_PHASES:
            return
        st = self.autopilot.status
        offboard = MODE_NAMES.get(st.flavour, {}).get("offboard")
        if offboard is None or st.mode == offboard or not st.mode:
            return
        with self._lock:
            if not self._in_offboard or self.phase not in OFFBOARD_PHASES:
                return
            self._in_offboard = False
            self.streaming = False
        why = self.autopilot.takeover_context()  # its reason: what it said and reports
        self._yield_to_autopilot(now, f"the autopilot left {offboard} by itself (now {st.mode}){why}: it is in "
                                      "control; the bridge stopped sending")

    def _yield_to_autopilot(self, now: float, reason: str) -> None:
        """The autopilot (or the pilot) has the vehicle: send nothing more, report
        AUTOPILOT_TOOK_OVER, end in ``holding`` with ``reason`` as the error."""
        with self._lock:
            self._in_offboard = False
            self.streaming = False
        self.error = self.error or reason
        log.error("%s", reason)
        self.on_intervention(Intervention(now, InterventionKind.AUTOPILOT_TOOK_OVER, reason,
                                          None if self.last_output is None else self.last_output.command, None))
        self._set_phase(Phase.HOLDING)

    def _on_link_return(self, lost_s: float) -> None:
        st, cfg = self.autopilot.status, self.config
        what = f"autopilot heartbeat lost for {lost_s:.1f} s"
        log.warning("%s, back now: vehicle %s in %s", what, "armed" if st.armed else "disarmed", st.mode)
        with self._lock:
            self.phase = self._phase_before_loss  # leave link_lost (not via _set_phase: no report of a
            self._landing_requested = False       # return to a phase already reported)
        if not st.armed:
            if self._phase_before_loss != Phase.LANDING:
                self.error = self.error or f"{what}; the autopilot landed and disarmed (its failsafe)"
            with self._lock:
                self.streaming = False
            self._set_phase(Phase.LANDED)
            return
        deadline_passed = (cfg.flight_time_s > 0 and self._flying_since is not None
                           and self.clock() - self._flying_since >= cfg.flight_time_s)
        if (cfg.link_return == "land" or self._land_after_loss or self._phase_before_loss == Phase.LANDING
                or self.error is not None or deadline_passed):
            if cfg.link_return == "land" and not self._land_after_loss and not deadline_passed:
                self.error = self.error or f"{what}; link_return land"
            self._request_land(f"{what}: landing", force=True)
            return
        log.warning("%s; link_return resume: back to offboard control", what)
        threading.Thread(target=self._resume, name="resume", daemon=True).start()

    def _resume(self) -> None:
        try:
            self._enter_offboard()
        except (FlightFailure, CommandError, TimeoutError) as exc:
            self._fail(f"resuming after the link loss: {exc}")
