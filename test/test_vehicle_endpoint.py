"""The rehearsal vehicle (`airplay vehicle`, :mod:`airplay.bridge.vehicle_endpoint`) behaves as
PX4 v1.17 and ArduCopter 4.8 SITL were measured to: offboard loss per COM_OBL_RC_ACT, arming
refused (with the reason in a STATUSTEXT) until the estimator is ready, position setpoints
flown and held, ArduPilot's GUID_TIMEOUT and GCS failsafe.

Real MAVLink 2 over UDP on 127.0.0.1: the vehicle runs in a thread of this process in wall-clock
time (so the test can read its counters), the companion is a plain pymavlink client here
(:class:`Client`) that can stop its HEARTBEATs and setpoints while it keeps listening, as a
companion computer that died would, and parses with the ardupilotmega dialect (a superset of
common) to see EKF_STATUS_REPORT. Timeouts are short to keep the file under a minute.

Timing is judged on the vehicle's own clock (``time_boot_ms`` of its telemetry, the stamps of its
STATUSTEXTs), which slows down with the vehicle's thread on a loaded machine: waits count vehicle
seconds (:func:`wait`), time windows are cut from recorded telemetry (:attr:`Client.track`), and
failsafe delays are measured between the vehicle's own records.
"""

from __future__ import annotations

import argparse
import math
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("pymavlink")

from pymavlink.dialects.v20 import ardupilotmega as apm
from pymavlink.dialects.v20 import common as mavlink

from airplay import frames
from airplay.bridge import frames as mav_frames
from airplay.bridge.modes import do_set_mode_params, mode_name
from airplay.bridge.vehicle_endpoint import VehicleEndpoint
from airplay.bridge.vehicle_flavours import AUTOPILOT_PARAMS, HOME_AMSL_M, autopilot_param_values

PREARM = mavlink.MAV_SYS_STATUS_PREARM_CHECK
TEMPORARILY_REJECTED, FAILED, ACCEPTED = (mavlink.MAV_RESULT_TEMPORARILY_REJECTED, mavlink.MAV_RESULT_FAILED,
                                          mavlink.MAV_RESULT_ACCEPTED)
EKF_POSITION = apm.EKF_POS_HORIZ_ABS | apm.EKF_POS_VERT_ABS | apm.EKF_VELOCITY_HORIZ

pytestmark = pytest.mark.slow  # ~70 s: each test flies the vehicle for seconds of wall-clock time


class Client:
    """A companion (or ground station) of system ``system``: HEARTBEAT at 1 Hz while
    :attr:`beating`, :attr:`stream` (a ``(name, args)`` of a ``*_send`` method) at 50 Hz while
    set, and a record of what the vehicle sends. Answers whoever talks to it, or ``peer``."""

    def __init__(self, system: int = 1, component: int = 191, peer=None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.01)
        self.port = self.sock.getsockname()[1]
        self.peer = peer
        self.mav = apm.MAVLink(self, srcSystem=system, srcComponent=component)
        self.parser = apm.MAVLink(None)
        self.parser.robust_parsing = True
        self.beating = True
        self.last_beat_s = -math.inf   # time.monotonic() of the newest HEARTBEAT sent
        self.stream = None
        self.lock = threading.Lock()
        self.last: dict[str, object] = {}
        self.acks: dict[int, object] = {}
        self.statustexts: list[tuple[float, str]] = []
        self.modes: list[tuple[float, str, bool]] = []   # (time, mode, armed) of every HEARTBEAT
        self.vehicle_s = 0.0   # the vehicle's clock (s since boot): the newest time_boot_ms received
        # (vehicle s, map ENU m, NED m/s) of every LOCAL_POSITION_NED
        self.track: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.flavour = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def write(self, buf: bytes) -> None:  # the encoder's file
        if self.peer is not None:
            self.sock.sendto(buf, self.peer)

    def send(self, name: str, *args) -> None:
        with self.lock:
            getattr(self.mav, f"{name}_send")(*args)

    def _run(self) -> None:
        next_beat = next_setpoint = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if self.beating and now >= next_beat:
                next_beat = now + 1.0
                self.last_beat_s = now
                self.send("heartbeat", mavlink.MAV_TYPE_ONBOARD_CONTROLLER, mavlink.MAV_AUTOPILOT_INVALID, 0, 0,
                          mavlink.MAV_STATE_ACTIVE)
            stream = self.stream
            if stream is not None and now >= next_setpoint:
                next_setpoint = now + 0.02
                self.send(*stream)
            try:
                data, address = self.sock.recvfrom(65535)
            except (TimeoutError, OSError):
                continue
            self.peer = address
            for msg in self.parser.parse_buffer(data) or []:
                self._record(msg)

    def _record(self, msg) -> None:
        kind, now = msg.get_type(), time.monotonic()
        with self.lock:
            self.last[kind] = msg
            if hasattr(msg, "time_boot_ms"):
                self.vehicle_s = max(self.vehicle_s, msg.time_boot_ms / 1000.0)
            if kind == "LOCAL_POSITION_NED":
                self.track.append((msg.time_boot_ms / 1000.0, frames.ned_to_enu(np.array([msg.x, msg.y, msg.z])),
                                   np.array([msg.vx, msg.vy, msg.vz])))
            if kind == "HEARTBEAT":
                self.flavour = "px4" if msg.autopilot == mavlink.MAV_AUTOPILOT_PX4 else "ardupilot"
                armed = bool(msg.base_mode & mavlink.MAV_MODE_FLAG_SAFETY_ARMED)
                self.modes.append((now, mode_name(self.flavour, msg.custom_mode), armed))
            elif kind == "STATUSTEXT":
                self.statustexts.append((now, msg.text))
            elif kind == "COMMAND_ACK":
                self.acks[msg.command] = msg

    # -- what the vehicle said ----------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.modes[-1][1] if self.modes else ""

    @property
    def armed(self) -> bool:
        return bool(self.modes) and self.modes[-1][2]

    def position(self) -> np.ndarray:
        """Map ENU m, from LOCAL_POSITION_NED."""
        m = self.last["LOCAL_POSITION_NED"]
        return frames.ned_to_enu(np.array([m.x, m.y, m.z]))

    def speed(self) -> float:
        m = self.last["LOCAL_POSITION_NED"]
        return float(np.linalg.norm([m.vx, m.vy, m.vz]))

    def yaw_ned(self) -> float:
        return self.last["ATTITUDE"].yaw

    def texts(self, since: float = 0.0) -> list[str]:
        with self.lock:
            return [text for t, text in self.statustexts if t >= since]

    def between(self, t0: float, t1: float) -> list[tuple[float, np.ndarray, np.ndarray]]:
        """The recorded LOCAL_POSITION_NED samples stamped in [t0, t1] (vehicle clock, s)."""
        with self.lock:
            return [sample for sample in self.track if t0 <= sample[0] <= t1]

    def fly_for(self, seconds: float) -> tuple[float, float]:
        """Wait until ``seconds`` of vehicle time have passed; the (start, end) vehicle times."""
        t0 = self.vehicle_s
        wait(lambda: self.vehicle_s >= t0 + seconds, seconds, f"{seconds} s of vehicle time", self)
        return t0, self.vehicle_s

    # -- asking -------------------------------------------------------------------------------
    def command(self, command: int, *params: float, timeout_s: float = 1.0) -> int:
        """COMMAND_LONG to system 1; the COMMAND_ACK's result."""
        with self.lock:
            self.acks.pop(command, None)
        p = [float(v) for v in params] + [0.0] * (7 - len(params))
        self.send("command_long", 1, 1, command, 0, *p)
        wait(lambda: command in self.acks, timeout_s, f"COMMAND_ACK of {command}", self)
        return self.acks[command].result

    def set_mode(self, name: str) -> int:
        return self.command(mavlink.MAV_CMD_DO_SET_MODE, *do_set_mode_params(self.flavour, name))

    def arm(self) -> int:
        return self.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1)

    def die(self) -> None:
        """As a killed companion: no more HEARTBEATs or setpoints (still listening)."""
        self.beating = False
        self.stream = None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


# A wait also ends after this many wall-clock seconds per second of its timeout (plus 10 s), in
# case the vehicle stops sending: its clock would then stand still.
WALL_PER_VEHICLE_S = 10.0


def wait(predicate, timeout_s: float, what: str, client: Client | None = None) -> None:
    """Poll ``predicate`` every 10 ms until true, for at most ``timeout_s`` of the vehicle's
    clock as ``client`` receives it (of wall-clock time without a client)."""
    t0, v0 = time.monotonic(), client.vehicle_s if client else 0.0
    wall_limit_s = WALL_PER_VEHICLE_S * timeout_s + 10.0 if client else timeout_s
    while not predicate():
        waited_s = client.vehicle_s - v0 if client else time.monotonic() - t0
        if waited_s > timeout_s or time.monotonic() - t0 > wall_limit_s:
            said = f" (mode {client.mode!r}, armed {client.armed}, STATUSTEXT {client.texts()})" if client else ""
            raise AssertionError(f"timed out after {waited_s:.1f} s (vehicle clock) and "
                                 f"{time.monotonic() - t0:.1f} s (wall) waiting for {what}{said}")
        time.sleep(0.01)


def vehicle_text_s(vehicle: VehicleEndpoint, prefix: str) -> float:
    """The vehicle clock (s) of the first STATUSTEXT the vehicle sent that starts with ``prefix``."""
    for t, _, text in list(vehicle.statustexts):
        if text.startswith(prefix):
            return t
    raise AssertionError(f"the vehicle sent no STATUSTEXT starting {prefix!r}: {list(vehicle.statustexts)}")


def position_setpoint(north: float, east: float, down: float, yaw_ned: float):
    """SET_POSITION_TARGET_LOCAL_NED arguments: position + yaw in MAV_FRAME_LOCAL_NED (m, rad CW from north)."""
    return ("set_position_target_local_ned", 0, 1, 1, mav_frames.MAV_FRAME_LOCAL_NED, mav_frames.TYPE_MASK_POSITION_YAW,
            north, east, down, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, yaw_ned, 0.0)


def velocity_setpoint(north: float, east: float, down: float):
    return ("set_position_target_local_ned", 0, 1, 1, mav_frames.MAV_FRAME_LOCAL_NED,
            mav_frames.TYPE_MASK_VELOCITY_YAW_RATE,
            0.0, 0.0, 0.0, north, east, down, 0.0, 0.0, 0.0, 0.0, 0.0)


class Rig:
    """The vehicle (in a thread, wall-clock ticks) talking to a :class:`Client` companion."""

    def __init__(self, flavour: str, companion_system: int = 1, **vehicle_kwargs) -> None:
        vehicle_kwargs.setdefault("land_speed_m_s", 1.0)
        self.client = Client(companion_system)
        self.vehicle = VehicleEndpoint(f"udp:127.0.0.1:{self.client.port}", flavour, **vehicle_kwargs)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.vehicle.run, kwargs={"stop": self._stop}, daemon=True)
        self._thread.start()
        wait(lambda: self.client.mode and "LOCAL_POSITION_NED" in self.client.last, 60, "the vehicle's HEARTBEAT")

    def take_off(self, height_m: float = 0.8) -> None:
        """PX4: a position setpoint stream straight up, arm, OFFBOARD. ArduPilot: GUIDED, arm,
        NAV_TAKEOFF. Returns once within 0.1 m of ``height_m``."""
        c = self.client
        if c.flavour == "px4":
            c.stream = position_setpoint(0.0, 0.0, -height_m, math.pi / 2)   # facing east, as it stands
            wait(lambda: self.vehicle.stats["position_setpoints"] > 0, 1, "the first setpoint", c)
            assert c.arm() == ACCEPTED
            assert c.set_mode("OFFBOARD") == ACCEPTED
        else:
            assert c.set_mode("GUIDED") == ACCEPTED
            assert c.arm() == ACCEPTED
            assert c.command(mavlink.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, 0, 0, 0, height_m) == ACCEPTED
        wait(lambda: abs(c.position()[2] - height_m) < 0.1, 5, f"take-off to {height_m} m", c)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.vehicle.close()
        self.client.close()


@pytest.fixture
def rig():
    made = []

    def make(*args, **kwargs) -> Rig:
        made.append(Rig(*args, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


# -- PX4: offboard loss -------------------------------------------------------------------------
@pytest.mark.parametrize("action, mode, armed", [(0, "AUTO.LAND", False), (1, "AUTO.LAND", False),
                                                 (2, "AUTO.LAND", False), (3, "AUTO.RTL", False),
                                                 (4, "AUTO.LAND", False), (5, "AUTO.LOITER", True)])
def test_px4_offboard_loss_on_the_ground_follows_com_obl_rc_act(rig, action, mode, armed):
    r = rig("px4", autopilot_params={"COM_OBL_RC_ACT": action, "COM_OF_LOSS_T": 0.3})
    c = r.client
    c.stream = velocity_setpoint(0.0, 0.0, 0.0)
    wait(lambda: r.vehicle.stats["setpoints"] > 0, 1, "the first setpoint", c)
    assert c.arm() == ACCEPTED and c.set_mode("OFFBOARD") == ACCEPTED
    wait(lambda: c.mode == "OFFBOARD", 2, "OFFBOARD", c)
    t_stop = time.monotonic()
    c.die()
    wait(lambda: c.mode == mode, 2, mode, c)
    silent_s = vehicle_text_s(r.vehicle, "Failsafe activated") - r.vehicle.setpoint_s   # vehicle clock
    assert 0.3 < silent_s <= 0.3 + 2 * r.vehicle.dt_s, silent_s  # COM_OF_LOSS_T after the last setpoint
    wait(lambda: c.armed == armed, 1, f"armed {armed}", c)        # landing modes disarm on the ground
    assert any(t.startswith("Failsafe activated: no offboard") for t in c.texts(t_stop))


def test_px4_offboard_loss_default_lands_and_disarms(rig):
    r = rig("px4", offboard_loss_s=0.5)                           # COM_OBL_RC_ACT left at PX4's default, 0
    c = r.client
    assert r.vehicle.param("COM_OBL_RC_ACT") == 0
    r.take_off(0.8)
    p_loss = c.position()
    t_stop = time.monotonic()
    c.die()
    wait(lambda: c.mode != "OFFBOARD", 2, "leaving OFFBOARD", c)
    silent_s = vehicle_text_s(r.vehicle, "Failsafe activated") - r.vehicle.setpoint_s   # vehicle clock
    assert 0.5 < silent_s <= 0.5 + 2 * r.vehicle.dt_s, silent_s  # COM_OF_LOSS_T after the last setpoint
    assert c.mode == "AUTO.LAND" and c.armed
    assert "Failsafe activated: no offboard, Land" in c.texts(t_stop)
    wait(lambda: not c.armed, 4, "touchdown and disarm", c)
    p = c.position()
    assert p[2] == pytest.approx(0.0, abs=0.02)
    assert np.hypot(*(p[:2] - p_loss[:2])) < 0.1                  # straight down (the real PX4 drifted ~1.1 m)


def test_px4_offboard_loss_hold(rig):
    r = rig("px4", autopilot_params={"COM_OBL_RC_ACT": 5, "COM_OF_LOSS_T": 0.3})
    c = r.client
    r.take_off(0.8)
    c.die()
    wait(lambda: c.mode == "AUTO.LOITER", 2, "AUTO.LOITER", c)
    p0 = c.position()
    t0, t1 = c.fly_for(1.0)
    assert c.armed and c.mode == "AUTO.LOITER"
    held = [p for _, p, _ in c.between(t0, t1)]
    assert len(held) > 10 and all(np.linalg.norm(p - p0) < 0.1 and abs(p[2] - 0.8) < 0.15 for p in held)
    assert "Failsafe activated: no offboard, Hold" in c.texts()


def test_px4_offboard_loss_return(rig):
    r = rig("px4", autopilot_params={"COM_OBL_RC_ACT": 3, "COM_OF_LOSS_T": 0.3, "RTL_RETURN_ALT": 1.2})
    c = r.client
    r.take_off(0.8)
    c.stream = position_setpoint(1.0, 0.0, -0.8, math.pi / 2)   # 1 m north of home
    wait(lambda: np.linalg.norm(c.position() - [0.0, 1.0, 0.8]) < 0.1, 4, "1 m north", c)
    c.die()
    wait(lambda: c.mode == "AUTO.RTL", 2, "AUTO.RTL", c)
    assert "Failsafe activated: no offboard, Return" in c.texts()
    top = []
    wait(lambda: top.append(c.position()[2]) or not c.armed, 8, "return, land and disarm", c)
    assert max(top) == pytest.approx(1.2, abs=0.1)                # climbed to RTL_RETURN_ALT first
    assert np.linalg.norm(c.position() - [0.0, 0.0, 0.0]) < 0.15  # landed at home


# -- start-up: arming refused until the estimator is ready -------------------------------------
@pytest.mark.parametrize("flavour, refused, text", [
    ("px4", TEMPORARILY_REJECTED, "Preflight Fail: ekf2 missing data"),
    ("ardupilot", FAILED, "PreArm: Need Position Estimate"),
])
def test_arming_refused_until_ready(rig, flavour, refused, text):
    r = rig(flavour, ready_after_s=1.2)
    c = r.client
    wait(lambda: "SYS_STATUS" in c.last and "GPS_RAW_INT" in c.last, 2, "SYS_STATUS and GPS_RAW_INT", c)
    s = c.last["SYS_STATUS"]
    assert s.onboard_control_sensors_present & PREARM and s.onboard_control_sensors_enabled & PREARM
    assert not s.onboard_control_sensors_health & PREARM
    assert c.last["GPS_RAW_INT"].fix_type < 3
    assert c.arm() == refused
    wait(lambda: text in c.texts(), 1, f"STATUSTEXT {text!r}", c)
    assert not c.armed
    position_mode = "OFFBOARD" if flavour == "px4" else "GUIDED"
    assert c.set_mode(position_mode) == refused                  # no position estimate: no position modes
    if flavour == "ardupilot":
        wait(lambda: "EKF_STATUS_REPORT" in c.last, 1, "EKF_STATUS_REPORT", c)
        assert c.last["EKF_STATUS_REPORT"].flags & EKF_POSITION == 0
        assert "Mode change to GUIDED failed: requires position" in c.texts()
    else:
        assert "EKF_STATUS_REPORT" not in c.last                  # ArduPilot's message
    wait(lambda: r.vehicle.ready, 2, "ready", c)
    wait(lambda: c.last["SYS_STATUS"].onboard_control_sensors_health & PREARM, 1.5, "pre-arm check healthy", c)
    assert c.arm() == ACCEPTED
    wait(lambda: c.armed, 1.5, "armed in the HEARTBEAT", c)
    wait(lambda: c.last["GPS_RAW_INT"].fix_type == 3, 1.5, "a 3D fix", c)
    assert c.last["GPS_RAW_INT"].satellites_visible >= 6
    if flavour == "ardupilot":
        wait(lambda: c.last["EKF_STATUS_REPORT"].flags & EKF_POSITION == EKF_POSITION, 1, "EKF position flags", c)


def test_ready_at_once_by_default_and_forced_arming(rig):
    c = rig("px4").client
    wait(lambda: "SYS_STATUS" in c.last, 2, "SYS_STATUS", c)
    assert c.last["SYS_STATUS"].onboard_control_sensors_health & PREARM
    r = rig("ardupilot", ready_after_s=30.0)
    c = r.client
    assert c.command(mavlink.MAV_CMD_COMPONENT_ARM_DISARM, 1, 21196) == ACCEPTED   # forced: no checks
    wait(lambda: c.armed, 1.5, "armed", c)


# -- position setpoints ------------------------------------------------------------------------
@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_position_setpoints_flown_and_held(rig, flavour):
    r = rig(flavour, autopilot_params={"GUID_TIMEOUT": 0.5} if flavour == "ardupilot" else None)
    c = r.client
    r.take_off(0.8)
    # 1.5 m north, 1 m west, 1.2 m up; nose north-east (45 deg clockwise from north)
    target_enu, yaw_ned = np.array([-1.0, 1.5, 1.2]), math.radians(45.0)
    c.stream = position_setpoint(1.5, -1.0, -1.2, yaw_ned)
    speeds = []
    wait(lambda: speeds.append(c.speed()) or np.linalg.norm(c.position() - target_enu) < 0.1, 6, "the target", c)
    assert max(speeds) < 2.3                                      # the P law's 2 m/s (+ the vertical part)
    wait(lambda: abs(frames.wrap_angle(c.yaw_ned() - yaw_ned)) < math.radians(2), 3, "the yaw", c)
    t0, t1 = c.fly_for(1.0)                                       # held for 1 s
    held = [p for _, p, _ in c.between(t0, t1)]
    assert len(held) > 10 and max(np.linalg.norm(p - target_enu) for p in held) < 0.1
    assert abs(frames.wrap_angle(c.yaw_ned() - yaw_ned)) < math.radians(2)
    stats = r.vehicle.stats
    assert stats["position_setpoints"] > 50 and stats["ignored_setpoints"] == 0
    assert c.mode == ("OFFBOARD" if flavour == "px4" else "GUIDED")
    if flavour == "ardupilot":  # a position target outlives GUID_TIMEOUT (only velocity setpoints time out)
        c.stream = None
        t0, t1 = c.fly_for(1.0)                                   # twice GUID_TIMEOUT
        assert c.mode == "GUIDED" and max(np.linalg.norm(p - target_enu) for _, p, _ in c.between(t0, t1)) < 0.1


# -- ArduPilot: GUID_TIMEOUT and the GCS failsafe ------------------------------------------------
def test_ardupilot_guid_timeout_stops_and_holds_without_gcs_failsafe(rig):
    # FS_GCS_ENABLE 0 (the default): the companion's death (it is MAV_GCS_SYSID here) only stops the vehicle
    r = rig("ardupilot", autopilot_params={"GUID_TIMEOUT": 1.0, "MAV_GCS_SYSID": 1, "FS_GCS_TIMEOUT": 1.0})
    c = r.client
    r.take_off(0.8)
    c.stream = velocity_setpoint(1.0, 0.0, 0.0)                   # 1 m/s north
    wait(lambda: c.last["LOCAL_POSITION_NED"].vx > 0.95, 2, "1 m/s north", c)
    c.die()
    wait(lambda: c.speed() < 0.05, 1.5, "stopped after GUID_TIMEOUT", c)
    last_setpoint_s = r.vehicle.setpoint_s                        # vehicle clock
    # until GUID_TIMEOUT after the last setpoint it still flew that setpoint: 1 m/s north
    flying = c.between(last_setpoint_s + 0.1, last_setpoint_s + 0.9)
    assert len(flying) > 10 and min(v[0] for _, _, v in flying) > 0.9, [v[0] for _, _, v in flying]
    assert flying[-1][1][1] - flying[0][1][1] > 0.6               # ~0.8 m north in those 0.8 s
    p = c.position()
    t0, t1 = c.fly_for(1.0)
    assert max(np.linalg.norm(q - p) for _, q, _ in c.between(t0, t1)) < 0.1  # holds where it stopped
    assert c.mode == "GUIDED" and c.armed and "GCS Failsafe" not in c.texts()


def test_ardupilot_gcs_failsafe_lands(rig):
    # FS_GCS_TIMEOUT well above the 1 s between HEARTBEATs (ArduPilot's minimum is 2 s)
    r = rig("ardupilot", autopilot_params={"FS_GCS_ENABLE": 5, "MAV_GCS_SYSID": 1, "FS_GCS_TIMEOUT": 1.6,
                                           "GUID_TIMEOUT": 0.5})
    c = r.client
    r.take_off(0.8)
    c.stream = velocity_setpoint(0.0, 0.0, 0.0)
    wait(lambda: r.vehicle.stats["setpoints"] > 0, 1, "the first setpoint", c)
    t_dead = time.monotonic()
    c.die()
    wait(lambda: "GCS Failsafe" in c.texts(t_dead), 3.0, "GCS Failsafe", c)
    silent_s = vehicle_text_s(r.vehicle, "GCS Failsafe") - r.vehicle.gcs_heartbeat_s   # vehicle clock
    assert 1.6 < silent_s <= 1.6 + 2 * r.vehicle.dt_s, silent_s  # FS_GCS_TIMEOUT after the last HEARTBEAT
    wait(lambda: c.mode == "LAND", 1, "LAND", c)
    wait(lambda: not c.armed, 3, "touchdown and disarm", c)
    assert c.position()[2] == pytest.approx(0.0, abs=0.02)


def test_ardupilot_gcs_failsafe_watches_only_mav_gcs_sysid(rig):
    r = rig("ardupilot", autopilot_params={"FS_GCS_ENABLE": 5, "FS_GCS_TIMEOUT": 1.6, "GUID_TIMEOUT": 0.5})
    assert r.vehicle.param("MAV_GCS_SYSID") == 255
    c = r.client                                                  # the companion: system 1
    gcs = Client(system=255, component=190, peer=("127.0.0.1", r.vehicle.link.local_port))
    try:
        r.take_off(0.8)
        c.die()                                                   # not the GCS the failsafe watches
        c.fly_for(2.2)                                            # beyond FS_GCS_TIMEOUT
        assert c.mode == "GUIDED" and c.armed and "GCS Failsafe" not in c.texts()
        t_dead = time.monotonic()
        gcs.die()                                                 # system 255 falls silent
        wait(lambda: "GCS Failsafe" in c.texts(t_dead), 3.0, "GCS Failsafe", c)
        wait(lambda: c.mode == "LAND", 1, "LAND", c)
        wait(lambda: not c.armed, 3, "touchdown and disarm", c)
    finally:
        gcs.close()


# -- refusals say why ----------------------------------------------------------------------------
def test_refusals_come_with_a_statustext(rig):
    c = rig("px4").client
    assert c.set_mode("OFFBOARD") == TEMPORARILY_REJECTED                          # no setpoint stream
    assert c.command(mavlink.MAV_CMD_NAV_TAKEOFF, -1, 0, 0, math.nan, math.nan, math.nan,
                     HOME_AMSL_M + 1.0) == TEMPORARILY_REJECTED                    # disarmed
    wait(lambda: len(c.texts()) >= 2, 1, "two STATUSTEXTs", c)
    assert any("Offboard" in t and "not possible" in t for t in c.texts())
    assert any("disarmed" in t for t in c.texts())
    a = rig("ardupilot").client
    assert a.arm() == ACCEPTED                                                    # STABILIZE, on the ground
    assert a.command(mavlink.MAV_CMD_NAV_TAKEOFF, 0, 0, 0, 0, 0, 0, 1.0) == FAILED  # not in GUIDED
    assert a.set_mode("LAND") == ACCEPTED
    wait(lambda: not a.armed, 1.5, "LAND on the ground disarms", a)
    assert a.set_mode("STABILIZE") == ACCEPTED
    assert a.command(mavlink.MAV_CMD_DO_SET_MODE, 1, 99) == mavlink.MAV_RESULT_UNSUPPORTED
    wait(lambda: len(a.texts()) >= 2, 1, "two STATUSTEXTs", a)
    assert any("GUIDED" in t for t in a.texts()) and any("99" in t for t in a.texts())


# -- parameters and the command line --------------------------------------------------------------
def test_autopilot_params_checked():
    assert autopilot_param_values("px4")["COM_OBL_RC_ACT"] == 0
    assert autopilot_param_values("ardupilot", {"fs_gcs_enable": 5})["FS_GCS_ENABLE"] == 5
    for flavour, bad, match in [("px4", {"COM_OBL_RC_ACT": 6}, "COM_OBL_RC_ACT"),
                                ("px4", {"COM_OBL_RC_ACT": 1.5}, "COM_OBL_RC_ACT"),
                                ("px4", {"FS_GCS_ENABLE": 5}, "ardupilot parameter"),
                                ("ardupilot", {"MAV_GCS_SYSID": 0}, "MAV_GCS_SYSID"),
                                ("ardupilot", {"NOPE": 1}, "not one"),
                                ("px4", {"COM_OF_LOSS_T": math.nan}, "finite")]:
        with pytest.raises(ValueError, match=match):
            autopilot_param_values(flavour, bad)
    with pytest.raises(ValueError, match="twice"):
        VehicleEndpoint("udp:127.0.0.1:9", "px4", offboard_loss_s=0.5, autopilot_params={"COM_OF_LOSS_T": 2})


def test_help_documents_every_parameter_and_the_cli_passes_them():
    from airplay.commands import bridge as commands

    sub = argparse.ArgumentParser(prog="airplay").add_subparsers()
    commands.register(sub)
    text = sub.choices["vehicle"].format_help()
    for option in ("--param", "--ready-after", "--offboard-loss"):
        assert option in text
    for table in AUTOPILOT_PARAMS.values():
        for name in table:
            assert name in text, name
    cli = [sys.executable, "-m", "airplay.cli", "vehicle", "--mavlink", "udp:127.0.0.1:9", "--duration", "0.2"]
    bad = subprocess.run(cli + ["--param", "COM_OBL_RC_ACT=7"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert bad.returncode == 2 and "COM_OBL_RC_ACT" in bad.stderr
    good = subprocess.run(cli + ["--flavour", "ardupilot", "--param", "fs_gcs_enable=5", "--param",
                                 "MAV_GCS_SYSID=1", "--ready-after", "2"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert good.returncode == 0, good.stderr
    assert "FS_GCS_ENABLE=5" in good.stdout and "MAV_GCS_SYSID=1" in good.stdout and "after 2 s" in good.stdout
