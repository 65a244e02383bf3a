"""How a flight ends: the failure outcome, landing, disarming on the ground, shutdown, close.

A mixin of :class:`~airplay.bridge.flight.FlightController` (it uses the controller's
autopilot, config, supervisor, phase, lock and flags; see that class). Rules: a failure while
airborne lands (``on_failure`` "land") or leaves the vehicle in the autopilot's hold mode
("hold"); on the ground it disarms. NAV_LAND is re-sent every second until acknowledged
(meanwhile the supervisor's descent is streamed), and the vehicle must disarm within
``landing_timeout_s``. Times are seconds (``time.monotonic`` for the deadlines).
"""

from __future__ import annotations

import logging
import threading
import time

from airplay.bridge.autopilot_fence import AutopilotFenceError
from airplay.bridge.flight_config import TERMINAL_PHASES, Phase
from airplay.bridge.mavlink_link import CommandError

log = logging.getLogger("airplay.bridge")


class FlightEnding:
    """Failure, landing and shutdown of a :class:`~airplay.bridge.flight.FlightController`."""

    def _fail(self, reason: str) -> None:
        """The one outcome of a failure: airborne -> land (or hold), on the ground -> disarm."""
        if self.error is None:
            self.error = reason
        log.error("flight sequence failed: %s", reason)
        if self.phase == Phase.LINK_LOST:
            return  # the link-return rule decides (tick)
        if self.airborne:
            if self.config.on_failure == "hold":
                with self._lock:
                    self.streaming = False
                try:
                    name = self.autopilot.set_mode("hold", self.config.ack_timeout_s, verify_s=2.0)
                    log.error("left the vehicle in %s (on_failure hold): the pilot takes over", name)
                    self._set_phase(Phase.HOLDING)
                    return
                except CommandError as exc:
                    log.error("hold refused (%s): landing instead", exc)
            self._request_land(f"failure: {reason}", force=True)
            return
        self._disarm_on_ground()
        with self._lock:
            self.streaming = False
        self._set_phase(Phase.FAILED)

    def _disarm_on_ground(self) -> None:
        """DISARM, only to a vehicle this bridge asked to arm and that does not report itself in the
        air (EXTENDED_SYS_STATE's landed state, where the autopilot sends it): never a vehicle armed
        by someone else, never one flying."""
        if not self.autopilot.status.armed:
            return
        if not self._arm_commanded:
            log.warning("not disarming: the bridge did not arm this vehicle")
            return
        landed = self.autopilot.status.landed_state
        if landed is not None and landed != "on_ground":
            log.error("not disarming: the autopilot reports the vehicle %s", landed.replace("_", " "))
            return
        try:
            self.autopilot.disarm(timeout_s=self.config.ack_timeout_s)
            log.info("disarmed on the ground")
        except CommandError as exc:
            log.error("disarm on the ground refused: %s", exc)

    def _request_land(self, reason: str, force: bool = False) -> None:
        with self._lock:
            if self.phase in TERMINAL_PHASES:
                return
            if self.phase == Phase.LINK_LOST:
                self._land_after_loss = True
                log.warning("landing requested (%s) while the autopilot's heartbeat is lost: landing when it "
                            "returns", reason)
                return
            if self._landing_requested and not force:
                return
            self._landing_requested = True
        self._arm_requested.clear()
        if not self._takeoff_commanded:  # on the ground: never armed for flight, or armed and waiting
            self._disarm_on_ground()
            with self._lock:
                self.streaming = False
            self._set_phase(Phase.FAILED if self.error else Phase.LANDED)
            return
        self._set_phase(Phase.LANDING)
        threading.Thread(target=self._land_worker, name="land", daemon=True).start()

    def _land_worker(self) -> None:
        cfg = self.config
        deadline = time.monotonic() + cfg.landing_timeout_s
        while True:
            if self.phase == Phase.LINK_LOST or self.finished:
                return  # the link-return rule lands again when heartbeats are back
            try:
                self.autopilot.land(cfg.ack_timeout_s)
                break
            except CommandError as exc:  # stream the supervisor's descent meanwhile
                log.error("NAV_LAND not accepted (%s): descending by velocity setpoints, asking again", exc)
                with self._lock:
                    self.supervisor.operator_stop(self.clock(), "NAV_LAND not accepted")
                if time.monotonic() >= deadline:
                    self._end_landing(f"NAV_LAND never accepted in {cfg.landing_timeout_s:.0f} s")
                    return
                self._sleep(1.0)
        with self._lock:
            self.streaming = False
        try:
            self.autopilot.wait_for(lambda: not self.autopilot.status.armed or self.phase == Phase.LINK_LOST,
                                    max(0.1, deadline - time.monotonic()), "touchdown (disarm)")
        except TimeoutError as exc:
            self._end_landing(f"{exc} (landing_timeout_s)")
            return
        if self.phase == Phase.LINK_LOST:
            return
        log.info("landed and disarmed")
        self._set_phase(Phase.LANDED)

    def _end_landing(self, reason: str) -> None:
        self.error = self.error or reason
        log.error("landing: %s", reason)
        self._set_phase(Phase.FAILED)
    def shutdown(self, timeout_s: float | None = None) -> None:
        """Ctrl-C, SIGTERM or the lifecycle's shutdown: airborne -> land and wait (at most
        ``timeout_s``, default ``shutdown_timeout_s``) for the touchdown, ticking the control
        period meanwhile; armed on the ground -> disarm. Returns at once where nothing flies."""
        timeout_s = self.config.shutdown_timeout_s if timeout_s is None else timeout_s
        self._arm_requested.clear()
        self._last_tick_s = None  # the gap since the node's last tick is not a stall of the link
        if self.finished or not self.autopilot.status.armed:
            return
        if not self._takeoff_commanded:
            self._request_land("shutdown")
            return
        log.warning("shutdown while airborne (phase %s): landing, waiting up to %.0f s", self.phase, timeout_s)
        self._request_land("shutdown", force=self.phase != Phase.LANDING)
        deadline = time.monotonic() + timeout_s
        period = self.config.supervisor.control_period_s
        while time.monotonic() < deadline and not self.finished:
            self.tick()
            if self.phase == Phase.LINK_LOST:
                try:  # the link may still carry commands one way
                    self.autopilot.land(self.config.ack_timeout_s)
                except CommandError:
                    pass
            time.sleep(period)
        log.info("shutdown: phase %s, vehicle %s", self.phase, "armed" if self.autopilot.status.armed else "disarmed")

    def close(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=2)
        if self.autopilot_fence is not None:
            fresh_s = self.config.supervisor.heartbeat_timeout_s or 1.5
            try:  # a message of the autopilot since (this thread may just have held the GIL for a while)
                self.autopilot.wait_for(lambda: self.autopilot.link_age_s() <= fresh_s, 2.0 * fresh_s,
                                        "a message of the autopilot")
                self.restore_autopilot_fence()
            except TimeoutError:
                log.warning("autopilot fence: no link to the autopilot, so the flight's fence stays installed")
        self.autopilot.close()

    def restore_autopilot_fence(self) -> None:
        """Put back the autopilot's fence and parameters from before the flight, once it is on the
        ground and disarmed (an armed vehicle keeps the flight's fence; logged)."""
        installed = self.autopilot_fence
        if installed is None:
            return
        if self.autopilot.status.armed:
            log.warning("autopilot fence: the vehicle is still armed, so the flight's fence stays installed")
            return
        self.autopilot_fence = None
        try:
            installed.restore()
        except AutopilotFenceError as exc:
            log.error("autopilot fence: restoring the previous fence failed (the flight's fence stays): %s", exc)
