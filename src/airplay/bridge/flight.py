"""The bridge's core, without ROS: autopilot + safety supervisor + the flight sequence.

:class:`FlightController` owns an :class:`~airplay.bridge.mavlink_link.Autopilot` and a
:class:`~airplay.bridge.supervisor.SafetySupervisor`. The ROS node (``mavlink_bridge``) and the
tests drive it the same way: :meth:`FlightController.on_command` for each policy command,
:meth:`FlightController.tick` once per control period, :meth:`FlightController.start` to run the
flight sequence on a worker thread:

1. wait for the autopilot's HEARTBEAT (flavour px4 or ardupilot), ask for 50 Hz
   LOCAL_POSITION_NED and ATTITUDE_QUATERNION;
2. ArduPilot: DO_SET_MODE GUIDED; both: arm, NAV_TAKEOFF to ``takeoff_height_m``, wait until
   the vehicle is within ``altitude_tolerance_m`` of it;
3. stream velocity setpoints (the supervisor's output: hover until the policy commands) for
   ``setpoint_warmup_s`` - PX4 refuses OFFBOARD without a setpoint stream - then PX4:
   DO_SET_MODE OFFBOARD;
4. FLYING: every tick sends the supervisor's output as a SET_POSITION_TARGET_LOCAL_NED
   (velocity + yaw rate, MAV_FRAME_BODY_NED) - at the control rate, far above PX4's 2 Hz;
5. landing (:meth:`land`, the operator stop, a geofence breach, ``flight_time_s`` elapsed):
   NAV_LAND, stop streaming once acknowledged (the autopilot lands and disarms); until then
   the supervisor's descent command keeps going.

The supervisor's rules hold throughout: a stale policy command hovers, non-finite commands are
refused, the geofence holds then lands, and when the autopilot's heartbeat is lost for
``heartbeat_timeout_s`` nothing is sent any more (phase ``link_lost``; the autopilot's own
offboard-loss failsafe takes over). Every intervention goes to ``on_intervention``.

Time: ``clock`` seconds (wall time, ``time.time`` by default: ROS message stamps on the
vehicle are wall time, and command stamps must be on the supervisor's clock).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field, fields, replace

from airplay.bridge.supervisor import Mode, SafetySupervisor, SupervisorConfig
from airplay.bridge.telemetry import yaw_of_state

log = logging.getLogger("airplay.bridge")

PHASES = ("connecting", "arming", "taking_off", "warming_up", "flying", "landing", "landed", "link_lost", "failed")


@dataclass(frozen=True)
class FlightConfig:
    """The flight sequence; heights m, times s. ``flight_time_s`` 0: fly until told to land."""

    takeoff_height_m: float = 1.5
    altitude_tolerance_m: float = 0.15
    setpoint_warmup_s: float = 0.5
    heartbeat_wait_s: float = 30.0
    ack_timeout_s: float = 1.0
    takeoff_timeout_s: float = 30.0
    flight_time_s: float = 0.0
    telemetry_rate_hz: float = 50.0
    supervisor: SupervisorConfig = field(default_factory=SupervisorConfig)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "supervisor":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value < 0 or (value == 0 and f.name != "flight_time_s"):
                raise ValueError(f"FlightConfig.{f.name} must be a positive number, got {value!r}")


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


class FlightController:
    """See the module docstring. ``on_intervention(intervention)`` and ``on_phase(phase)`` are
    called from the thread that caused them."""

    def __init__(self, autopilot, config: FlightConfig | None = None, clock=time.time,
                 on_intervention=None, on_phase=None) -> None:
        self.autopilot = autopilot
        self.config = config if config is not None else FlightConfig()
        self.clock = clock
        self.supervisor = SafetySupervisor(self.config.supervisor)
        self.on_intervention = on_intervention or (lambda iv: None)
        self.on_phase = on_phase or (lambda phase: None)
        self.phase = "connecting"
        self.error: str | None = None
        self.streaming = False
        self.sent = 0
        self.last_output = None
        self._lock = threading.RLock()
        self._landing_requested = False
        self._flying_since: float | None = None
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
        """Land now (latched); the supervisor reports OPERATOR_STOP_LAND."""
        with self._lock:
            self.supervisor.operator_stop(self.clock(), reason)

    def land(self, reason: str = "mission end") -> None:
        """Normal landing: NAV_LAND on the worker thread, then stop streaming."""
        log.info("landing: %s", reason)
        self._request_land()

    # -- the sequence -------------------------------------------------------------------------
    def start(self) -> None:
        self._worker = threading.Thread(target=self._sequence, name="flight-sequence", daemon=True)
        self._worker.start()

    def _set_phase(self, phase: str) -> None:
        if phase != self.phase:
            log.info("phase %s -> %s", self.phase, phase)
            self.phase = phase
            self.on_phase(phase)

    def _sequence(self) -> None:
        from pymavlink.dialects.v20 import common as mavlink

        ap, cfg = self.autopilot, self.config
        try:
            status = ap.wait_heartbeat(cfg.heartbeat_wait_s)
            log.info("autopilot: %s, mode %s, %s", status.flavour, status.mode, "armed" if status.armed else "disarmed")
            for msg_id in (mavlink.MAVLINK_MSG_ID_LOCAL_POSITION_NED, mavlink.MAVLINK_MSG_ID_ATTITUDE_QUATERNION):
                ap.request_message_interval(msg_id, cfg.telemetry_rate_hz, cfg.ack_timeout_s)
            self._set_phase("arming")
            if status.flavour == "ardupilot":
                ap.set_mode("offboard", cfg.ack_timeout_s)
            ap.arm(cfg.ack_timeout_s)
            self._set_phase("taking_off")
            ground_z = self._state_z(cfg.heartbeat_wait_s)
            ap.takeoff(cfg.takeoff_height_m, cfg.ack_timeout_s)
            target = ground_z + cfg.takeoff_height_m
            ap.wait_for(lambda: abs(self._current_z() - target) <= cfg.altitude_tolerance_m or self._stop.is_set(),
                        cfg.takeoff_timeout_s, f"the take-off to z={target:.2f} m")
            if self._stop.is_set() or self._landing_requested:
                return
            self._set_phase("warming_up")
            with self._lock:
                self.supervisor.reset()
                self.streaming = True
            time.sleep(cfg.setpoint_warmup_s)
            if status.flavour == "px4":
                ap.set_mode("offboard", cfg.ack_timeout_s)
            self._flying_since = self.clock()
            self._set_phase("flying")
        except Exception as exc:  # CommandError, TimeoutError: say what failed, stop
            self.error = str(exc)
            log.error("flight sequence failed: %s", exc)
            with self._lock:
                self.streaming = False
            self._set_phase("failed")

    def _current_z(self) -> float:
        state = self.autopilot.telemetry.state()
        return math.nan if state is None else float(state[2])

    def _state_z(self, timeout_s: float) -> float:
        self.autopilot.wait_for(lambda: self.autopilot.telemetry.state() is not None, timeout_s, "telemetry")
        return self._current_z()

    def _request_land(self) -> None:
        with self._lock:
            if self._landing_requested:
                return
            self._landing_requested = True
        self._set_phase("landing")
        threading.Thread(target=self._land_worker, name="land", daemon=True).start()

    def _land_worker(self) -> None:
        try:
            self.autopilot.land(self.config.ack_timeout_s)
        except Exception as exc:  # keep streaming the supervisor's descent instead
            log.error("NAV_LAND failed (%s): descending by velocity setpoints", exc)
            return
        with self._lock:
            self.streaming = False
        try:
            self.autopilot.wait_for(lambda: not self.autopilot.status.armed or self._stop.is_set(), 120.0,
                                    "touchdown (disarm)")
        except TimeoutError as exc:
            log.warning("%s", exc)
            return
        self._set_phase("landed")

    # -- the control period ---------------------------------------------------------------
    def tick(self):
        """Once per control period: feed the supervisor, send its output if streaming.
        Returns the SupervisorOutput (None while not streaming)."""
        now = self.clock()
        ap = self.autopilot
        with self._lock:
            sup = self.supervisor
            last_hb = ap.status.last_heartbeat_s
            if last_hb is not None:
                sup.on_heartbeat(last_hb)
            state = ap.telemetry.state()
            if state is not None:
                sup.on_state(state[0:3], state[7:10], yaw_of_state(state), now)
            if not self.streaming:
                return None
            out = sup.output(now)
            self.last_output = out
            if out.command is not None:
                ap.send_velocity(out.command)
                self.sent += 1
        for intervention in out.interventions:
            self.on_intervention(intervention)
        if out.mode is Mode.STOPPED_NO_HEARTBEAT and self.phase != "link_lost":
            self._set_phase("link_lost")
        elif out.mode is Mode.LANDING and not self._landing_requested:
            self._request_land()
        elif (self.phase == "flying" and self.config.flight_time_s > 0 and self._flying_since is not None
              and now - self._flying_since >= self.config.flight_time_s):
            self.land(f"flight_time_s {self.config.flight_time_s:.1f} s elapsed")
        return out

    def close(self) -> None:
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=2)
        self.autopilot.close()


def default_flight_config(**overrides) -> FlightConfig:
    """FlightConfig with the supervisor limits of config/vehicle.yaml; ``overrides`` may name
    FlightConfig fields or SupervisorConfig fields."""
    flight_names = {f.name for f in fields(FlightConfig)} - {"supervisor"}
    sup = {k: v for k, v in overrides.items() if k not in flight_names}
    flight = {k: v for k, v in overrides.items() if k in flight_names}
    return replace(FlightConfig(**flight), supervisor=supervisor_config_from_vehicle(**sup))

