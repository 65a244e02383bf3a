"""The conversation with an autopilot over MAVLink 2 (:class:`Autopilot`: heartbeat, flavour
detection, COMMAND_LONG with ACK and timeouts, mode changes, setpoints), on the transport of
:mod:`airplay.bridge.mavlink_transport`; mode names in :mod:`airplay.bridge.modes`. No rclpy
here (DESIGN.md section 1).

Connection strings (``url``):

* ``udpin:HOST:PORT`` or ``udp:HOST:PORT`` - listen on HOST:PORT and answer the address the
  autopilot's HEARTBEATs come from (what MAVSDK's ``udp://:14540`` does against PX4 SITL,
  which sends to port 14540 of the companion).
* ``udpout:HOST:PORT`` - send to HOST:PORT from an ephemeral port.
* ``tcp:HOST:PORT`` - TCP client (ArduPilot SITL serves MAVLink on tcp:127.0.0.1:5760).
* ``serial:DEVICE[:BAUD]`` or a bare ``/dev/...`` path - a telemetry port (PX4 TELEM2 with
  ``MAV_1_CONFIG``, ArduPilot ``SERIAL2_PROTOCOL=2``), default 921600 baud.

UDP datagrams carry whole MAVLink frames, so every datagram is parsed on its own: garbage or a
truncated frame never eats the next good message. Frames with a bad CRC or an unknown id are
dropped and counted (:attr:`MavlinkLink.bad_frames`).

The autopilot flavour comes from the ``autopilot`` field of its HEARTBEAT: MAV_AUTOPILOT_PX4
(12) -> ``px4``, MAV_AUTOPILOT_ARDUPILOTMEGA (3) -> ``ardupilot``. HEARTBEATs of ground
stations and other companions (autopilot MAV_AUTOPILOT_INVALID) are not autopilots.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay import frames
from airplay.bridge import frames as mav_frames
from airplay.bridge.estimator_watch import EstimatorWatch
from airplay.bridge.mavlink_transport import MavlinkLink, host_port
from airplay.bridge.modes import MODE_NAMES, do_set_mode_params, flavour_of_autopilot, mode_name
from airplay.bridge.telemetry import Telemetry

log = logging.getLogger("airplay.mavlink")

MAV_RESULT_NAMES = {0: "ACCEPTED", 1: "TEMPORARILY_REJECTED", 2: "DENIED", 3: "UNSUPPORTED", 4: "FAILED",
                    5: "IN_PROGRESS", 6: "CANCELLED"}

# -- the conversation with an autopilot ------------------------------------------------------
class CommandError(RuntimeError):
    """A COMMAND_LONG that was refused, or not acknowledged in time; the message says which.

    ``result``: the MAV_RESULT of the refusal (e.g. 1 TEMPORARILY_REJECTED), None when no
    COMMAND_ACK came; ``command``: the MAV_CMD."""

    def __init__(self, message: str, command: int | None = None, result: int | None = None) -> None:
        super().__init__(message)
        self.command = command
        self.result = result

    @property
    def retryable(self) -> bool:
        """True where trying again later may succeed: no answer, or a refusal other than UNSUPPORTED."""
        return self.result != mavlink.MAV_RESULT_UNSUPPORTED


#: SYS_STATUS onboard_control_sensors_* bit of the autopilot's pre-arm checks (MAV_SYS_STATUS_PREARM_CHECK).
PREARM_CHECK_BIT = 0x10000000

_STATUSTEXT_LEVELS = {mavlink.MAV_SEVERITY_EMERGENCY: logging.ERROR, mavlink.MAV_SEVERITY_ALERT: logging.ERROR,
                      mavlink.MAV_SEVERITY_CRITICAL: logging.ERROR, mavlink.MAV_SEVERITY_ERROR: logging.ERROR,
                      mavlink.MAV_SEVERITY_WARNING: logging.WARNING, mavlink.MAV_SEVERITY_NOTICE: logging.INFO,
                      mavlink.MAV_SEVERITY_INFO: logging.INFO, mavlink.MAV_SEVERITY_DEBUG: logging.DEBUG}


@dataclass(frozen=True)
class StatusText:
    """One STATUSTEXT of the autopilot: ``time_s`` on the Autopilot's clock, MAV_SEVERITY, text."""

    time_s: float
    severity: int
    text: str

    def __str__(self) -> str:
        name = mavlink.enums["MAV_SEVERITY"][self.severity].name.removeprefix("MAV_SEVERITY_") \
            if self.severity in mavlink.enums["MAV_SEVERITY"] else str(self.severity)
        return f"{name}: {self.text}"


LANDED_STATES = {1: "on_ground", 2: "in_air", 3: "takeoff", 4: "landing"}
"""MAV_LANDED_STATE (EXTENDED_SYS_STATE.landed_state) -> name; 0 (undefined) is unknown (None)."""


@dataclass
class AutopilotStatus:
    """What the autopilot's HEARTBEAT/SYS_STATUS/BATTERY_STATUS last said; ``None`` until known."""

    flavour: str | None = None
    system: int | None = None
    component: int | None = None
    armed: bool = False
    mode: str = ""
    custom_mode: int | None = None
    system_status: int | None = None
    last_heartbeat_s: float | None = None
    last_message_s: float | None = None      # any message of the autopilot (its link is alive)
    battery_voltage_v: float | None = None
    battery_current_a: float | None = None
    battery_remaining: float | None = None   # 0..1
    home_amsl_m: float | None = None         # from GLOBAL_POSITION_INT: alt - relative_alt
    altitude_amsl_m: float | None = None     # from GLOBAL_POSITION_INT: alt (the autopilot's estimate, m AMSL)
    prearm_ok: bool | None = None            # SYS_STATUS pre-arm check bit: None where not reported
    prearm_s: float | None = None            # when that SYS_STATUS came (the Autopilot's clock)
    ekf_flags: int | None = None             # ArduPilot EKF_STATUS_REPORT flags: None where not reported
    ekf_s: float | None = None               # when that EKF_STATUS_REPORT came
    landed_state: str | None = None          # EXTENDED_SYS_STATE: on_ground, in_air, takeoff, landing; None: unknown
    statustexts: deque = field(default_factory=lambda: deque(maxlen=50))  # StatusText, newest last


class Autopilot:
    """The companion side of the conversation, on a receive thread of its own.

    Sends its own HEARTBEAT (MAV_TYPE_ONBOARD_CONTROLLER, MAV_AUTOPILOT_INVALID) at 1 Hz; keeps
    :attr:`status` and :attr:`telemetry` (ENU/FLU state, :mod:`airplay.bridge.telemetry`);
    :meth:`command` sends a COMMAND_LONG and waits for its COMMAND_ACK, re-sending with an
    incremented ``confirmation`` on timeout. ``clock`` gives the seconds used for heartbeat
    ages (monotonic by default). Callbacks in ``on_message`` run on the receive thread.

    STATUSTEXTs of the autopilot are logged (logger ``airplay.mavlink``, level from their
    severity) and kept in ``status.statustexts``. On UDP the autopilot's address is pinned at
    its first HEARTBEAT (or given as ``peer``, "HOST:PORT"): HEARTBEATs with the same ids
    from another address do not re-point the link; they are refused, counted in
    :attr:`refused_peers` and logged once per address.
    """

    def __init__(self, url: str, system: int = 1, component: int = mavlink.MAV_COMP_ID_ONBOARD_COMPUTER,
                 target_system: int | None = None, clock=time.monotonic, peer: str | None = None) -> None:
        self.link = MavlinkLink(url, system, component)
        self.pinned_peer: tuple[str, int] | None = None
        if peer:
            host, port = host_port(f"peer {peer}", peer)
            self.pinned_peer = self.link.peer = (socket.gethostbyname(host), port)
        self.refused_peers: dict[tuple[str, int], int] = {}
        self.target_system = target_system
        self.clock = clock
        self.status = AutopilotStatus()
        self.telemetry = Telemetry()
        self.estimate = EstimatorWatch()  # what the autopilot says about its estimate (GPS, flags, texts, jumps)
        self.on_message = []         # callables(msg), run on the receive thread
        self._acks: dict[int, object] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mavlink-rx", daemon=True)
        self._boot = time.monotonic()
        self._last_own_heartbeat = -math.inf
        # our own HEARTBEAT every second: True / False (an observer, silent); None until the autopilot's
        # first HEARTBEAT, which decides: silent where it is armed (someone else flies it: a ground
        # station's heartbeat would put off ArduPilot's GCS failsafe), else on. Before that only a
        # udpout link announces itself (the autopilot learns our address from it).
        self.heartbeats: bool | None = None
        self._announce = self.link.kind == "udpout"
        self.ignored = 0             # good frames not from the autopilot we talk to

    def start(self) -> "Autopilot":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
        self.link.close()

    # -- receiving ---------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                now = time.monotonic()
                beat = self.heartbeats if self.heartbeats is not None else self._announce
                if beat and now - self._last_own_heartbeat >= 1.0:
                    self._last_own_heartbeat = now
                    self.link.mav.heartbeat_send(mavlink.MAV_TYPE_ONBOARD_CONTROLLER, mavlink.MAV_AUTOPILOT_INVALID,
                                                 0, 0, mavlink.MAV_STATE_ACTIVE)
                for msg in self.link.receive(0.05):
                    self._handle(msg)
            except Exception:  # nothing that arrives may stop the link
                log.exception("MAVLink receive loop")
                time.sleep(0.01)

    def _handle(self, msg) -> None:
        kind = msg.get_type()
        sysid, compid = msg.get_srcSystem(), msg.get_srcComponent()
        st = self.status
        if kind == "HEARTBEAT":
            flavour = flavour_of_autopilot(msg.autopilot)
            if flavour is None or (self.target_system is not None and sysid != self.target_system):
                self.ignored += 1
                return
            if st.system is None:
                log.info("autopilot %s (system %d, component %d) at %s", flavour, sysid, compid,
                         getattr(msg, "_link_address", self.link.url))
            elif (sysid, compid) != (st.system, st.component):
                self.ignored += 1
                return
            address = getattr(msg, "_link_address", None)
            if address is not None and self.link.listening:
                if self.pinned_peer is None:
                    self.pinned_peer = self.link.peer = address
                elif address != self.pinned_peer:
                    self.refused_peers[address] = self.refused_peers.get(address, 0) + 1
                    if self.refused_peers[address] == 1:
                        log.error("HEARTBEAT of system %d component %d from %s:%d refused: the autopilot is at "
                                  "%s:%d (pinned at its first HEARTBEAT); the setpoint stream stays there",
                                  sysid, compid, *address, *self.pinned_peer)
                    return
            with self._cond:
                st.flavour, st.system, st.component = flavour, sysid, compid
                st.armed = bool(msg.base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED)
                st.custom_mode, st.system_status = msg.custom_mode, msg.system_status
                st.mode = mode_name(flavour, msg.custom_mode)
                st.last_heartbeat_s = self.clock()
                if self.heartbeats is None:
                    self.heartbeats = not st.armed
                    if st.armed:
                        log.warning("the autopilot is armed at first contact: this link stays silent (no "
                                    "HEARTBEAT of ours)")
                self._cond.notify_all()
        elif st.system is None or sysid != st.system or compid != st.component:
            self.ignored += 1
            return
        st.last_message_s = self.clock()
        if kind == "COMMAND_ACK":
            mine = (self.link.mav.srcSystem, self.link.mav.srcComponent)
            if (msg.target_system, msg.target_component) not in ((0, 0), mine):
                return  # the answer to another ground station's command
            with self._cond:
                self._acks[msg.command] = msg
                self._cond.notify_all()
        elif kind == "LOCAL_POSITION_NED":
            position, velocity = (msg.x, msg.y, msg.z), (msg.vx, msg.vy, msg.vz)
            if self.telemetry.on_local_position_ned(msg.time_boot_ms, position, velocity):
                self.estimate.on_position(self.clock(), msg.time_boot_ms, position, velocity)
        elif kind == "ATTITUDE_QUATERNION":
            self.telemetry.on_attitude_quaternion(msg.time_boot_ms, (msg.q1, msg.q2, msg.q3, msg.q4),
                                                  (msg.rollspeed, msg.pitchspeed, msg.yawspeed))
        elif kind == "ATTITUDE":
            self.telemetry.on_attitude_euler(msg.time_boot_ms, msg.roll, msg.pitch, msg.yaw,
                                             (msg.rollspeed, msg.pitchspeed, msg.yawspeed))
        elif kind == "EKF_STATUS_REPORT":
            st.ekf_flags, st.ekf_s = int(msg.flags), self.clock()
            self.estimate.on_ekf_status(msg.flags, msg.velocity_variance, msg.pos_horiz_variance)
        elif kind == "ESTIMATOR_STATUS":
            self.estimate.on_estimator_status(msg.flags, msg.pos_horiz_accuracy)
        elif kind == "GPS_RAW_INT":
            self.estimate.on_gps(msg.fix_type)
        elif kind == "EXTENDED_SYS_STATE":
            st.landed_state = LANDED_STATES.get(int(msg.landed_state))
        elif kind == "STATUSTEXT":
            text = StatusText(self.clock(), int(msg.severity), str(msg.text).rstrip("\x00").strip())
            st.statustexts.append(text)
            self.estimate.on_statustext(text.time_s, text.severity, text.text)
            log.log(_STATUSTEXT_LEVELS.get(text.severity, logging.INFO), "autopilot says %s", text)
        elif kind == "SYS_STATUS":
            if msg.onboard_control_sensors_present & PREARM_CHECK_BIT:
                st.prearm_ok = bool(msg.onboard_control_sensors_health & PREARM_CHECK_BIT)
                st.prearm_s = self.clock()
            if msg.voltage_battery != 65535:
                st.battery_voltage_v = msg.voltage_battery / 1000.0
            if msg.current_battery != -1:
                st.battery_current_a = msg.current_battery / 100.0
            if msg.battery_remaining != -1:
                st.battery_remaining = msg.battery_remaining / 100.0
        elif kind == "BATTERY_STATUS":
            if msg.battery_remaining != -1:
                st.battery_remaining = msg.battery_remaining / 100.0
            if msg.current_battery != -1:
                st.battery_current_a = msg.current_battery / 100.0
        elif kind == "GLOBAL_POSITION_INT":
            st.home_amsl_m = (msg.alt - msg.relative_alt) / 1000.0
            st.altitude_amsl_m = msg.alt / 1000.0
        for callback in list(self.on_message):
            callback(msg)

    # -- state ------------------------------------------------------------------------------
    @property
    def last_heard_s(self) -> float | None:
        """When the last message of the autopilot came, HEARTBEAT or telemetry (None before its
        first HEARTBEAT), on :attr:`clock`."""
        return None if self.status.last_heartbeat_s is None else self.status.last_message_s

    def link_age_s(self) -> float:
        """Seconds since :attr:`last_heard_s` (inf before the first HEARTBEAT): the autopilot's link
        is alive while this stays small. Telemetry comes at 50 Hz, so a HEARTBEAT that is late under
        load (1 Hz) is not taken for a lost link."""
        last = self.last_heard_s
        return math.inf if last is None else self.clock() - last

    def wait_heartbeat(self, timeout_s: float) -> AutopilotStatus:
        """Block until an autopilot HEARTBEAT arrived; the status then names the flavour."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.status.system is not None, timeout=timeout_s):
                raise TimeoutError(f"no autopilot HEARTBEAT on {self.link.url} within {timeout_s:.1f} s")
        return self.status

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        """Block until ``predicate()`` holds (checked at each HEARTBEAT and every 50 ms)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout_s:.1f} s waiting for {what}")
                self._cond.wait(min(left, 0.05))

    # -- commands ---------------------------------------------------------------------------
    def command(self, command: int, params=(), timeout_s: float = 1.0, retries: int = 3) -> None:
        """COMMAND_LONG ``command`` with up to 7 ``params``; returns on MAV_RESULT_ACCEPTED, raises
        :class:`CommandError` when refused or never acknowledged (``retries`` sends, each waiting
        ``timeout_s``; IN_PROGRESS extends the wait)."""
        st = self.status
        if st.system is None:
            raise CommandError(f"command {_command_name(command)}: no autopilot heartbeat yet", command, None)
        p = [float(v) for v in params] + [0.0] * (7 - len(params))
        sent_s = self.clock()
        for attempt in range(retries):
            with self._cond:
                self._acks.pop(command, None)
            self.link.mav.command_long_send(st.system, st.component, command, attempt, *p)
            deadline = time.monotonic() + timeout_s
            with self._cond:
                while True:
                    ack = self._acks.get(command)
                    if ack is not None and ack.result == mavlink.MAV_RESULT_IN_PROGRESS:
                        self._acks.pop(command)
                        deadline = time.monotonic() + timeout_s
                        ack = None
                    left = deadline - time.monotonic()
                    if ack is not None or left <= 0:
                        break
                    self._cond.wait(left)
            if ack is None:
                log.warning("command %s: no COMMAND_ACK within %.1f s (attempt %d of %d)",
                            _command_name(command), timeout_s, attempt + 1, retries)
                continue
            if ack.result == mavlink.MAV_RESULT_ACCEPTED:
                return
            raise CommandError(f"command {_command_name(command)} refused by the autopilot: "
                               f"{MAV_RESULT_NAMES.get(ack.result, ack.result)}{self._reason_since(sent_s)}",
                               command, int(ack.result))
        raise CommandError(f"command {_command_name(command)}: no COMMAND_ACK after {retries} attempts "
                           f"of {timeout_s:.1f} s", command, None)

    def _reason_since(self, since_s: float) -> str:
        """'' or ' (autopilot: TEXT; TEXT)': the STATUSTEXTs that arrived since ``since_s`` (the
        autopilot's reason for a refusal usually comes just before or after its COMMAND_ACK)."""
        time.sleep(0.05)  # a STATUSTEXT sent right after the ACK
        return self.recent_texts(since_s - 0.5)

    def recent_texts(self, since_s: float | None = None) -> str:
        """'' or ' (autopilot: TEXT; TEXT; TEXT)': the last three STATUSTEXTs (since ``since_s``)."""
        texts = [t.text for t in list(self.status.statustexts) if since_s is None or t.time_s >= since_s]
        return f" (autopilot: {'; '.join(texts[-3:])})" if texts else ""

    def takeover_context(self, window_s: float = 10.0, with_status: bool = True) -> str:
        """Why the autopilot may have taken the vehicle, from what it said and reports: '' or
        ' (autopilot: TEXT; TEXT; TEXT; battery N %; system status CRITICAL)'. The texts are its
        warnings and worse of the last ``window_s`` (PX4 announces a failsafe's cause, e.g. a low
        battery, well before the action it takes, and names only the action then: "Failsafe
        activated"), else its last three of the last 3 s; the battery where below 30 %; the
        HEARTBEAT's system status where CRITICAL or EMERGENCY (``with_status``)."""
        now = self.clock()
        texts = [t for t in list(self.status.statustexts) if t.time_s >= now - window_s]
        severe = [t.text for t in texts if t.severity <= mavlink.MAV_SEVERITY_WARNING]
        parts = (severe or [t.text for t in texts if t.time_s >= now - 3.0])[-3:]
        st = self.status
        if st.battery_remaining is not None and st.battery_remaining < 0.3:
            parts.append(f"battery {100 * st.battery_remaining:.0f} %")
        if with_status and st.system_status in (mavlink.MAV_STATE_CRITICAL, mavlink.MAV_STATE_EMERGENCY):
            parts.append("system status " + mavlink.enums["MAV_STATE"][st.system_status].name.removeprefix("MAV_STATE_"))
        return f" (autopilot: {'; '.join(parts)})" if parts else ""

    def arm(self, timeout_s: float = 1.0) -> None:
        self.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, (1,), timeout_s)

    def disarm(self, force: bool = False, timeout_s: float = 1.0) -> None:
        self.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, (0, 21196 if force else 0), timeout_s)

    def set_mode(self, what: str, timeout_s: float = 1.0, verify_s: float | None = None) -> str:
        """Switch to airplay mode ``what`` (offboard, hold, land, position: :data:`MODE_NAMES`) or a
        flavour mode name, by MAV_CMD_DO_SET_MODE; returns the flavour's mode name.

        The ACK says "accepted"; the HEARTBEAT says the mode is in force. ``verify_s``: seconds to
        wait for that HEARTBEAT, then :class:`CommandError` (None: wait 1.5 s and only warn)."""
        flavour = self.status.flavour
        name = MODE_NAMES[flavour].get(what, what)
        self.command(mavlink.MAV_CMD_DO_SET_MODE, do_set_mode_params(flavour, name), timeout_s)
        try:
            self.wait_for(lambda: self.status.mode == name, 1.5 if verify_s is None else verify_s,
                          f"mode {name} in the autopilot's HEARTBEAT")
        except TimeoutError as exc:
            if verify_s is not None:
                raise CommandError(f"mode {name} acknowledged but not in force: the HEARTBEAT says "
                                   f"{self.status.mode} ({exc})", mavlink.MAV_CMD_DO_SET_MODE, None) from None
            log.warning("%s (the mode change was acknowledged)", exc)
        return name

    def takeoff(self, height_m: float, timeout_s: float = 1.0) -> float | None:
        """MAV_CMD_NAV_TAKEOFF to ``height_m`` above the ground where the vehicle stands. PX4 wants
        the altitude AMSL in param7: the vehicle's own altitude now (GLOBAL_POSITION_INT ``alt``; it
        is on the ground) plus the height, not home's plus the height: PX4 moves its home to where it
        arms, and a home read before that can be off by the estimate's drift on the ground (PX4 SIH:
        0.5 m, and a take-off "reached" at 0.1 m); home where the altitude is unknown, NaN (PX4's
        MIS_TAKEOFF_ALT) where neither is. ArduPilot wants it relative to home (and GUIDED).
        Returns the base altitude (m AMSL) the PX4 take-off was computed from (None: ArduPilot, or unknown)."""
        if self.status.flavour == "px4":
            base = self.status.altitude_amsl_m if self.status.altitude_amsl_m is not None else self.status.home_amsl_m
            altitude = math.nan if base is None else base + height_m
            self.command(mavlink.MAV_CMD_NAV_TAKEOFF, (-1, 0, 0, math.nan, math.nan, math.nan, altitude), timeout_s)
            return base
        self.command(mavlink.MAV_CMD_NAV_TAKEOFF, (0, 0, 0, 0, 0, 0, height_m), timeout_s)
        return None

    def climb_in_hold(self, altitude_amsl_m: float, timeout_s: float = 1.0) -> None:
        """PX4: MAV_CMD_DO_REPOSITION to ``altitude_amsl_m`` (m AMSL) where the vehicle is (latitude,
        longitude and yaw NaN: unchanged), in Hold (AUTO.LOITER; flag CHANGE_MODE), at the default
        speed: PX4 flies the climb itself, as in its take-off."""
        self.command(mavlink.MAV_CMD_DO_REPOSITION,
                     (-1, mavlink.MAV_DO_REPOSITION_FLAGS_CHANGE_MODE, 0, math.nan, math.nan, math.nan,
                      float(altitude_amsl_m)), timeout_s)

    def land(self, timeout_s: float = 1.0) -> None:
        self.command(mavlink.MAV_CMD_NAV_LAND, (0, 0, 0, math.nan, math.nan, math.nan, math.nan), timeout_s)

    def request_message_interval(self, message_id: int, rate_hz: float, timeout_s: float = 0.5) -> bool:
        """MAV_CMD_SET_MESSAGE_INTERVAL; False (logged) where the autopilot refuses it."""
        try:
            self.command(mavlink.MAV_CMD_SET_MESSAGE_INTERVAL, (message_id, 1e6 / rate_hz), timeout_s, retries=2)
            return True
        except CommandError as exc:
            log.warning("%s", exc)
            return False

    # -- setpoints --------------------------------------------------------------------------
    def send_velocity(self, cmd, yaw_enu_rad: float | None = None) -> None:
        """SET_POSITION_TARGET_LOCAL_NED from an airplay heading-frame command ``[vx fwd, vy left,
        vz up (m/s), yaw_rate CCW (rad/s)]``, velocity + yaw rate (type_mask 1479).

        With the vehicle's current yaw ``yaw_enu_rad`` (map ENU, CCW from map x) the velocity goes in
        MAV_FRAME_LOCAL_NED, turned into the autopilot's local frame here (the heading in the local
        frame is the map yaw less the tie's, ``telemetry.tie``;
        :func:`airplay.bridge.frames.heading_command_to_local_ned`): the autopilot then flies the
        very world-frame velocity the supervisor checked against the geofence, whatever its yaw
        does meanwhile. Without it, MAV_FRAME_BODY_NED
        (:func:`airplay.bridge.frames.heading_command_to_px4_body_ned`)."""
        st = self.status
        if st.system is None:
            return
        if yaw_enu_rad is None:
            frame = mav_frames.MAV_FRAME_BODY_NED
            v, yaw_rate_cw = mav_frames.heading_command_to_px4_body_ned(np.asarray(cmd, np.float64))
        else:
            frame = mav_frames.MAV_FRAME_LOCAL_NED
            v, yaw_rate_cw = mav_frames.heading_command_to_local_ned(np.asarray(cmd, np.float64),
                                                                     self.telemetry.tie.yaw_to_local(yaw_enu_rad))
        self.link.mav.set_position_target_local_ned_send(
            int((time.monotonic() - self._boot) * 1000) & 0xFFFFFFFF, st.system, st.component,
            frame, mav_frames.TYPE_MASK_VELOCITY_YAW_RATE,
            0.0, 0.0, 0.0, float(v[0]), float(v[1]), float(v[2]), 0.0, 0.0, 0.0, 0.0, yaw_rate_cw)

    def send_position(self, position_enu, yaw_enu_rad: float) -> None:
        """SET_POSITION_TARGET_LOCAL_NED holding map ENU position ``position_enu`` (m) with map yaw
        ``yaw_enu_rad`` (CCW from east): MAV_FRAME_LOCAL_NED, position + yaw
        (:data:`airplay.bridge.frames.TYPE_MASK_POSITION_YAW`); map -> local through the tie
        ``telemetry.tie`` (:class:`~airplay.bridge.map_tie.MapTie`)."""
        st = self.status
        if st.system is None:
            return
        tie = self.telemetry.tie
        local_ned = frames.enu_to_ned(tie.position_to_local(position_enu))
        yaw_ned = float(frames.yaw_enu_to_ned(tie.yaw_to_local(yaw_enu_rad)))
        self.link.mav.set_position_target_local_ned_send(
            int((time.monotonic() - self._boot) * 1000) & 0xFFFFFFFF, st.system, st.component,
            mav_frames.MAV_FRAME_LOCAL_NED, mav_frames.TYPE_MASK_POSITION_YAW,
            float(local_ned[0]), float(local_ned[1]), float(local_ned[2]), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
            yaw_ned, 0.0)


def _command_name(command: int) -> str:
    entry = mavlink.enums["MAV_CMD"].get(command)
    return entry.name if entry is not None else str(command)
