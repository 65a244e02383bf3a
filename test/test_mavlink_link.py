"""The MAVLink bridge core against the rehearsal vehicle, over real UDP on 127.0.0.1, no ROS.

The vehicle (`airplay vehicle`) runs in its own process; the bridge side (Autopilot +
FlightController + SafetySupervisor) runs here, ticked at 50 Hz by a thread as the ROS node
does. Plus the telemetry conversion and the mode encodings against hand-computed values.
"""

from __future__ import annotations

import math
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

pytest.importorskip("pymavlink")

from pymavlink.dialects.v20 import common as mavlink  # noqa: E402

from airplay import frames  # noqa: E402
from airplay.bridge.flight import FlightController  # noqa: E402
from airplay.bridge.flight_config import default_flight_config  # noqa: E402
from airplay.bridge.mavlink_link import Autopilot, CommandError  # noqa: E402
from airplay.bridge.modes import do_set_mode_params, mode_from_do_set_mode, mode_name, px4_custom_mode  # noqa: E402
from airplay.bridge.interventions import InterventionKind as K  # noqa: E402
from airplay.bridge.telemetry import Telemetry  # noqa: E402
from airplay.frames import quat_wxyz_from_euler_zyx as quat_wxyz_from_euler_ned, yaw_of_state  # noqa: E402


# -- pure parts ---------------------------------------------------------------------------------
def test_telemetry_known_pose_and_ordering():
    t = Telemetry()
    assert t.state() is None
    # 1 m north, 2 m east, 3 m up; moving north at 1 m/s; nose east (NED yaw +90 deg), yawing right
    assert t.on_local_position_ned(1000, (1.0, 2.0, -3.0), (1.0, 0.0, -0.5))
    assert t.on_attitude_quaternion(1000, quat_wxyz_from_euler_ned(0.0, 0.0, math.pi / 2), (0.1, 0.0, 0.3))
    s = t.state()
    assert_allclose(s[0:3], [2.0, 1.0, 3.0])                     # map ENU
    assert_allclose(s[7:10], [0.0, 1.0, 0.5])                    # map ENU velocity
    assert_allclose(s[10:13], [0.1, 0.0, -0.3])                  # FLU rates: right turn is -z
    assert yaw_of_state(s) == pytest.approx(0.0, abs=1e-12)      # facing east = ENU yaw 0
    assert_allclose(s[3:7], [0.0, 0.0, 0.0, 1.0], atol=1e-12)    # identity in ENU/FLU
    # an older message is out of order and dropped; a newer one is taken
    assert not t.on_local_position_ned(900, (50.0, 50.0, -3.0), (0.0, 0.0, 0.0))
    assert t.out_of_order == 1 and t.state()[0] == pytest.approx(2.0)
    assert t.on_local_position_ned(1020, (1.02, 2.0, -3.0), (1.0, 0.0, 0.0))
    # non-finite telemetry is refused; a clock restart (autopilot reboot, > 10 s back) is accepted
    assert not t.on_local_position_ned(1040, (math.nan, 0.0, 0.0), (0.0, 0.0, 0.0))
    assert not t.on_attitude_quaternion(1040, (0.0, 0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    assert t.on_local_position_ned(1_000_000, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    assert t.on_local_position_ned(5, (0.0, 0.0, -1.0), (0.0, 0.0, 0.0))
    assert t.state()[2] == pytest.approx(1.0)


@pytest.mark.parametrize("roll, pitch, yaw_ned", [(0.1, -0.2, 2.5), (0.0, 0.0, -math.pi / 2), (-0.3, 0.25, 0.0)])
def test_telemetry_euler_equals_quaternion_and_frames(roll, pitch, yaw_ned):
    a, b = Telemetry(origin_enu=(10.0, 0.0, 0.0)), Telemetry()
    for t in (a, b):
        t.on_local_position_ned(0, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    q = quat_wxyz_from_euler_ned(roll, pitch, yaw_ned)
    a.on_attitude_euler(0, roll, pitch, yaw_ned, (0.0, 0.0, 0.0))
    b.on_attitude_quaternion(0, q, (0.0, 0.0, 0.0))
    assert_allclose(a.state()[3:7], b.state()[3:7], atol=1e-12)
    assert_allclose(a.state()[0:3], [10.0, 0.0, 0.0])          # the local origin placed in map
    assert_allclose(b.state()[3:7], frames.quat_ned_frd_wxyz_to_enu_flu_xyzw(q))
    if abs(roll) < 1e-12 and abs(pitch) < 1e-12:
        error = frames.wrap_angle(yaw_of_state(b.state()) - frames.yaw_ned_to_enu(yaw_ned))
        assert error == pytest.approx(0.0, abs=1e-12)


def test_mode_encodings():
    assert px4_custom_mode("OFFBOARD") == 6 << 16
    assert px4_custom_mode("AUTO.LOITER") == (4 << 16) | (3 << 24)
    assert mode_name("px4", (4 << 16) | (6 << 24)) == "AUTO.LAND"
    assert mode_name("ardupilot", 4) == "GUIDED"
    for flavour, name in (("px4", "OFFBOARD"), ("px4", "AUTO.LAND"), ("ardupilot", "GUIDED"), ("ardupilot", "LAND")):
        base, p2, p3 = do_set_mode_params(flavour, name)
        assert base == mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED
        assert mode_name(flavour, mode_from_do_set_mode(flavour, p2, p3)) == name
    with pytest.raises(ValueError, match="PX4 mode"):
        px4_custom_mode("AUTO.NOPE")
    with pytest.raises(ValueError, match="connection"):
        Autopilot("carrier-pigeon:1")


# -- against the vehicle process ----------------------------------------------------------------
def start_vehicle(port: int, flavour: str, log_path: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "airplay.cli", "vehicle", "--mavlink", f"udp:127.0.0.1:{port}",
           "--flavour", flavour, "--status-every", "1", *extra]
    return subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def wait_until(predicate, timeout_s: float, what: str) -> None:
    """Poll ``predicate`` every 10 ms until it holds; fail naming ``what`` after ``timeout_s`` (wall
    clock: a loaded machine makes the wait longer, never the test wrong)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}"
        time.sleep(0.01)


class Rig:
    """Bridge core here, vehicle in a process; a 50 Hz thread plays the policy (``command``:
    None sends nothing) and ticks the FlightController."""

    def __init__(self, tmp_path: Path, flavour: str = "px4", vehicle_args=(), arm: bool = True, judge=None,
                 **config) -> None:
        config.setdefault("takeoff_height_m", 0.6)
        config.setdefault("heartbeat_timeout_s", 1.5)
        config.setdefault("command_timeout_s", 0.2)
        self.log_path = tmp_path / f"vehicle_{flavour}.log"
        self.autopilot = Autopilot("udpin:127.0.0.1:0", clock=time.time).start()
        self.vehicle = start_vehicle(self.autopilot.link.local_port, flavour, self.log_path, *vehicle_args)
        self.interventions = []
        self.phases = []  # every phase the controller entered, in order (a short one is not missed)
        self.ties, self.endings = [], []
        self.flight = FlightController(self.autopilot, default_flight_config(**config),
                                       on_intervention=self.interventions.append, on_phase=self.phases.append,
                                       judge=judge, on_tie=self.ties.append, on_mission_end=self.endings.append)
        self.handover = None  # (time s, state) at the first tick the policy flies
        self.command = None
        self.trace = []   # (time s, state (13,)) at every tick
        self._stop = threading.Event()
        self.paused = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.flight.start()
        if arm:
            self.flight.request_arm()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.paused.is_set():  # the bridge process stalled (as under SIGSTOP): no ticks at all
                time.sleep(0.01)
                continue
            now = time.time()
            if self.command is not None and self.flight.phase == "flying":
                self.flight.on_command(self.command, now)
            self.flight.tick()
            state = self.autopilot.telemetry.state()
            if state is not None:
                self.trace.append((now, state))
                if self.handover is None and self.flight.phase == "flying":
                    self.handover = (now, state)
            time.sleep(0.02)

    def state(self) -> np.ndarray:
        return self.autopilot.telemetry.state()

    def vehicle_s(self) -> float:
        """The vehicle's clock: time_boot_ms of its newest position, s (it slows down with the
        vehicle's process on a loaded machine, and its dynamics with it)."""
        return (self.autopilot.telemetry.time_boot_ms or 0) / 1000.0

    def fly_for(self, vehicle_s: float, wall_limit_s: float = 60.0) -> None:
        """Until ``vehicle_s`` more seconds have passed on the vehicle's clock."""
        end, deadline = self.vehicle_s() + vehicle_s, time.monotonic() + wall_limit_s
        while self.vehicle_s() < end:
            assert time.monotonic() < deadline, f"the vehicle's clock stood still ({self.vehicle_s():.2f} s)"
            time.sleep(0.01)

    def wait_phase(self, phase: str, timeout_s: float) -> None:
        """Until the controller has entered ``phase`` (now or earlier: under load the test can
        look after a short phase such as a geofence-limited flight is already over)."""
        deadline = time.monotonic() + timeout_s
        while phase not in self.phases:
            if time.monotonic() > deadline or self.flight.phase == "failed":
                raise AssertionError(f"phase {self.flight.phase!r} (error {self.flight.error!r}), wanted {phase!r}\n"
                                     + self.log_path.read_text()[-3000:])
            time.sleep(0.02)

    def kinds(self):
        return [iv.kind for iv in self.interventions]

    def wait_commanding(self, command, timeout_s: float = 10.0) -> None:
        """Until the controller sends ``command`` (the last output it streamed is that command)."""
        def sent() -> bool:
            out = self.flight.last_output
            return out is not None and out.command is not None and np.allclose(out.command, command)

        wait_until(sent, timeout_s, f"the command {command} sent")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if self.vehicle.poll() is None:  # a test vehicle: no need for a graceful stop (the node tests do SIGINT)
            self.vehicle.kill()
            self.vehicle.wait(timeout=5)
        self.flight.close()


@pytest.fixture
def rigs(tmp_path):
    made = []

    def make(*args, **kwargs) -> Rig:
        made.append(Rig(tmp_path, *args, **kwargs))
        return made[-1]

    yield make
    for rig in made:
        rig.close()


def garbage_datagrams(rng) -> list[bytes]:
    """Random bytes, a truncated frame, a frame with a broken CRC, a MAVLink 2 frame of an id no
    dialect knows, and an empty datagram."""
    enc = mavlink.MAVLink(None, srcSystem=1, srcComponent=1)
    good = enc.local_position_ned_encode(1, 99.0, 99.0, -99.0, 0, 0, 0).pack(enc)
    broken_crc = bytearray(good)
    broken_crc[-1] ^= 0xFF
    unknown = bytearray(good)
    unknown[7] = 0xEE  # message id low byte -> an id not in the dialect (CRC no longer matches either)
    return [rng.bytes(64), rng.bytes(300), b"\xfd\x1c\x00\x00", good[: len(good) // 2], bytes(broken_crc),
            bytes(unknown), b"", b"\xfe" * 40]


@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_take_off_follow_velocity_commands_and_land(rigs, flavour):
    # standing at the origin facing north (ENU yaw 90 deg): forward must move +y in map
    rig = rigs(flavour, ("--start", "0,0,0,90"))
    rig.wait_phase("flying", 20)
    status = rig.autopilot.status
    assert status.flavour == flavour and status.armed
    assert status.mode == ("OFFBOARD" if flavour == "px4" else "GUIDED")
    p0 = rig.state()[0:3].copy()
    assert p0[2] == pytest.approx(0.6, abs=0.2)
    if flavour == "px4":  # garbage and out-of-order telemetry while flying: ignored, nothing breaks
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rng = np.random.default_rng(0)
        for data in garbage_datagrams(rng) * 3:
            sock.sendto(data, ("127.0.0.1", rig.autopilot.link.local_port))
        enc = mavlink.MAVLink(None, srcSystem=1, srcComponent=1)   # spoofs the autopilot's ids
        stale = enc.local_position_ned_encode(1, 50.0, 50.0, -20.0, 0, 0, 0).pack(enc)
        sock.sendto(stale, ("127.0.0.1", rig.autopilot.link.local_port))
        sock.sendto(rng.bytes(128), rig.autopilot.link.peer)      # and at the vehicle
        sock.close()
    rig.command = [1.0, 0.0, 0.0, 0.0]
    t0 = time.time()
    rig.fly_for(1.5)
    p1 = rig.state()[0:3]
    moved = p1 - p0
    assert moved[1] > 0.9, moved                 # ~1 m/s north for 1.5 vehicle s (minus the ramp)
    assert abs(moved[0]) < 0.1 and abs(moved[2]) < 0.15, moved
    # the velocity seen in the telemetry is the command turned into map ENU
    assert_allclose(rig.state()[7:10], [0.0, 1.0, 0.0], atol=0.1)
    rig.command = [0.0, 0.0, 0.0, 0.5]           # yaw left (CCW) at 0.5 rad/s for 1 vehicle s
    yaw0 = yaw_of_state(rig.state())
    rig.fly_for(1.0)
    dyaw = frames.wrap_angle(yaw_of_state(rig.state()) - yaw0)
    assert 0.3 < dyaw < 0.6, dyaw
    if flavour == "px4":
        assert rig.autopilot.link.bad_frames >= 10
        assert rig.autopilot.telemetry.out_of_order >= 1
        assert max(abs(s[0]) for _, s in rig.trace if _ > t0 - 1) < 1.0   # the spoofed 50 m never showed
    rig.command = None
    rig.flight.land("test done")
    rig.wait_phase("landed", 10)
    assert not rig.autopilot.status.armed
    assert rig.state()[2] == pytest.approx(0.0, abs=0.05)
    assert rig.vehicle.poll() is None          # the vehicle survived the garbage


def test_stale_nan_and_operator_stop(rigs):
    rig = rigs("px4")
    rig.wait_phase("flying", 20)
    rig.command = [1.0, 0.0, 0.0, 0.0]
    rig.fly_for(1.0)
    # a NaN command is refused; the previous safe command stays in force
    rig.flight.on_command([math.nan, 0.0, 0.0, 0.0], time.time())
    wait_until(lambda: K.REFUSED_NON_FINITE in rig.kinds(), 5.0, "the NaN command's refusal")
    assert K.REFUSED_NON_FINITE in rig.kinds()
    assert_allclose(rig.flight.last_output.command, [1.0, 0.0, 0.0, 0.0])
    # no fresh commands -> hold: a position setpoint where the hold began; the vehicle goes back there, still
    rig.command = None
    deadline = time.monotonic() + 30.0
    rig.fly_for(1.2)
    while np.linalg.norm(rig.state()[7:10]) >= 0.1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert K.STALE_COMMAND_HOLD in rig.kinds()
    assert np.linalg.norm(rig.state()[7:10]) < 0.1
    out = rig.flight.last_output
    assert_allclose(out.command, np.zeros(4))
    assert np.linalg.norm(rig.state()[0:3] - out.hold_position_enu) < 0.1
    # operator stop -> land (NAV_LAND acknowledged, streaming stops, the vehicle lands and disarms)
    rig.command = [1.0, 0.0, 0.0, 0.0]
    rig.wait_commanding(rig.command)
    rig.flight.operator_stop("test e-stop")
    rig.wait_phase("landed", 10)
    assert K.OPERATOR_STOP_LAND in rig.kinds()
    assert rig.autopilot.status.mode == "AUTO.LAND" and not rig.autopilot.status.armed


def test_geofence_hold_then_land(rigs):
    # the take-off (the autopilot's, unsupervised) ends above the fence's ceiling
    rig = rigs("px4", takeoff_height_m=0.8, fence_box_xy_m=(-5.0, -5.0, 5.0, 5.0), fence_z_min_m=-1.0,
               fence_z_max_m=0.5, geofence_hold_s=0.5)
    rig.command = [0.5, 0.0, 0.0, 0.0]  # sent once flying; on a loaded machine the landing may come first
    rig.wait_phase("landed", 35)
    assert rig.flight.error is None, rig.flight.error  # a landing during the switch to OFFBOARD is no failure
    kinds = rig.kinds()
    assert kinds.index(K.GEOFENCE_HOLD) < kinds.index(K.GEOFENCE_LAND)
    hold = next(iv for iv in rig.interventions if iv.kind is K.GEOFENCE_HOLD)
    land = next(iv for iv in rig.interventions if iv.kind is K.GEOFENCE_LAND)
    # geofence_hold_s after the hold, at the first control tick once it has passed (on the recorded
    # tick times, not a wall-clock window: a loaded machine delays the 50 Hz loop)
    due = hold.time_s + 0.5
    assert land.time_s >= due
    assert not [t for t, _ in rig.trace if due < t < land.time_s - 0.2], "a tick after geofence_hold_s did not land"
    # it held: no horizontal motion although the policy asked for 0.5 m/s forward
    assert max(np.hypot(s[0], s[1]) for _, s in rig.trace) < 0.1


def test_lost_heartbeat_stops_sending(rigs):
    rig = rigs("px4", heartbeat_timeout_s=1.2)  # > the 1 s between heartbeats
    rig.wait_phase("flying", 20)
    rig.command = [0.3, 0.0, 0.0, 0.0]
    rig.wait_commanding(rig.command)
    rig.vehicle.kill()
    rig.vehicle.wait(timeout=5)
    rig.wait_phase("link_lost", 2.5)
    sent = rig.flight.sent
    time.sleep(0.5)
    assert rig.flight.sent == sent                 # nothing sent any more
    lost = [iv for iv in rig.interventions if iv.kind is K.HEARTBEAT_LOST]
    assert len(lost) == 1 and lost[0].command_out is None and "heartbeat" in lost[0].reason


def test_offboard_refused_without_setpoints_and_failsafe(tmp_path):
    ap = Autopilot("udpin:127.0.0.1:0", clock=time.time).start()
    vehicle = start_vehicle(ap.link.local_port, "px4", tmp_path / "vehicle.log", "--offboard-loss", "0.5")
    try:
        ap.wait_heartbeat(15)
        ap.arm()
        with pytest.raises(CommandError, match="TEMPORARILY_REJECTED"):
            ap.set_mode("offboard")
        assert ap.status.mode == "POSCTL"
        for _ in range(10):                                   # 0.2 s of setpoints at 50 Hz
            ap.send_velocity([0.0, 0.0, 0.0, 0.0])
            time.sleep(0.02)
        ap.set_mode("offboard")
        ap.wait_for(lambda: ap.status.mode == "OFFBOARD", 3, "OFFBOARD in the heartbeat")
        # the stream stops: after COM_OF_LOSS_T, PX4's default COM_OBL_RC_ACT (0) without RC descends and lands
        t_stop = time.monotonic()
        ap.wait_for(lambda: ap.status.mode == "AUTO.LAND", 4, "the offboard-loss failsafe")
        assert time.monotonic() - t_stop > 0.4
        # commands the vehicle does not know are answered, not ignored
        with pytest.raises(CommandError, match="UNSUPPORTED"):
            ap.command(mavlink.MAV_CMD_DO_SET_SERVO, (1, 1500))
    finally:
        stop_process(vehicle)
        ap.close()
    assert "OFFBOARD refused" in (tmp_path / "vehicle.log").read_text()


# -- the flight sequence's state machine and its failure outcomes ---------------------------------
def test_nothing_arms_without_the_request(rigs):
    rig = rigs("px4", arm=False)
    rig.wait_phase("ready", 20)
    time.sleep(1.0)
    assert rig.flight.phase == "ready" and not rig.autopilot.status.armed
    assert rig.phases[:2] == ["checking", "ready"]
    assert rig.flight.request_arm()
    rig.wait_phase("flying", 20)
    assert rig.phases.index("arming") < rig.phases.index("taking_off") < rig.phases.index("flying")
    rig.flight.land("test done")
    rig.wait_phase("landed", 15)
    assert rig.flight.error is None and not rig.autopilot.status.armed
    assert not rig.flight.request_arm()        # the flight is over: no second take-off


@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_a_bridge_started_over_a_flying_vehicle_only_watches(rigs, flavour):
    """The first bridge dies in flight (no landing, no goodbye); a second one connects at once. It
    finds the vehicle armed: it takes nothing over, sends no DISARM (the vehicle never answers
    "not landed"), and no heartbeat either, so the autopilot's own failsafe (PX4's offboard loss,
    ArduPilot's GCS failsafe) lands the vehicle and disarms it, as it would with no bridge at all."""
    # ArduPilot's GCS failsafe is off by default (a hovering GUIDED vehicle then waits for a pilot);
    # on, with the bridge's system id (1) as the ground station's, any heartbeat of a bridge holds it off
    first = rigs(flavour, ("--param", "FS_GCS_ENABLE=5", "--param", "MAV_GCS_SYSID=1")
                 if flavour == "ardupilot" else ())
    first.wait_phase("flying", 30)
    first.command = [0.0, 0.0, 0.0, 0.0]
    time.sleep(0.5)                        # a moment of flight under the policy before the bridge dies
    port = first.autopilot.link.local_port
    first._stop.set()                      # the first bridge's process is gone: no ticks, no link
    first._thread.join(timeout=2)
    first.flight._stop.set()
    first.autopilot.close()
    died = time.monotonic()
    second_ap = Autopilot(f"udpin:127.0.0.1:{port}", clock=time.time).start()
    second = FlightController(second_ap, default_flight_config(takeoff_height_m=0.6))
    try:
        second.start()
        second.request_arm()
        deadline = time.monotonic() + 10
        while second.phase != "failed" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert second.phase == "failed" and "already armed" in (second.error or ""), (second.phase, second.error)
        assert second_ap.heartbeats is False
        second_ap.wait_for(lambda: not second_ap.status.armed, 40.0, "the autopilot's own failsafe landing")
        landed_after = time.monotonic() - died
        texts = [t.text for t in second_ap.status.statustexts]
        assert not [t for t in texts if "not landed" in t], texts       # no DISARM reached the vehicle in the air
        assert "disarmed" in first.log_path.read_text() and "Disarm" not in first.log_path.read_text()
        print(f"\n{flavour}: the autopilot's failsafe landed and disarmed {landed_after:.1f} s after the bridge died")
    finally:
        second.close()


@pytest.mark.parametrize("rule", ["land", "resume"])
def test_autopilot_stall_then_return_follows_link_return(rigs, rule):
    """The autopilot stops for 2.5 s (SIGSTOP) and comes back: link_lost, then land (with an
    error) or resume flying; never stuck in link_lost."""
    rig = rigs("px4", ("--param", "COM_OBL_RC_ACT=5", "--param", "COM_OF_LOSS_T=5"), link_return=rule,
               heartbeat_timeout_s=1.2)
    rig.wait_phase("flying", 20)
    rig.command = [0.2, 0.0, 0.0, 0.0]
    rig.wait_commanding(rig.command)
    rig.vehicle.send_signal(signal.SIGSTOP)
    try:
        rig.wait_phase("link_lost", 4)
        sent = rig.flight.sent
        time.sleep(0.5)
        assert rig.flight.sent == sent            # nothing sent while the link is lost
    finally:
        rig.vehicle.send_signal(signal.SIGCONT)
    if rule == "land":
        rig.wait_phase("landed", 20)
        assert "heartbeat lost" in rig.flight.error and "link_return land" in rig.flight.error
        assert not rig.autopilot.status.armed
    else:
        deadline = time.monotonic() + 10
        while rig.flight.phase != "flying" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert rig.flight.phase == "flying" and rig.flight.error is None
        assert rig.autopilot.status.mode == "OFFBOARD"
        rig.flight.land("test done")
        rig.wait_phase("landed", 15)


def test_bridge_stall_counts_as_a_link_loss(rigs):
    """The bridge itself stops ticking for 2 s (its process stalled): the autopilot saw no setpoints,
    so the flight ends by the link_return rule (land), not as if nothing happened."""
    rig = rigs("px4", ("--param", "COM_OBL_RC_ACT=5"), heartbeat_timeout_s=1.2)
    rig.wait_phase("flying", 20)
    rig.paused.set()
    time.sleep(2.0)
    rig.paused.clear()
    rig.wait_phase("landed", 20)
    assert "link_lost" in rig.phases and "heartbeat lost" in rig.flight.error
    assert not rig.autopilot.status.armed


def test_shutdown_while_airborne_lands_and_waits(rigs):
    rig = rigs("px4")
    rig.wait_phase("flying", 20)
    rig.command = [0.5, 0.0, 0.0, 0.0]
    rig.wait_commanding(rig.command)
    rig.paused.set()                              # the node's timer is gone: shutdown ticks by itself
    t0 = time.monotonic()
    rig.flight.shutdown(timeout_s=20)
    assert rig.flight.phase == "landed" and not rig.autopilot.status.armed, time.monotonic() - t0
    assert rig.state()[2] == pytest.approx(0.0, abs=0.05)


@pytest.mark.parametrize("outcome", ["land", "hold"])
def test_take_off_timeout_lands_or_holds(rigs, outcome):
    """A failure while airborne has one outcome: land (default) or the autopilot's hold mode."""
    rig = rigs("px4", takeoff_height_m=2.0, takeoff_timeout_s=0.6, on_failure=outcome)
    final = "landed" if outcome == "land" else "holding"
    rig.wait_phase(final, 20)
    assert "take-off" in rig.flight.error and "takeoff_timeout_s" in rig.flight.error
    if outcome == "land":
        assert not rig.autopilot.status.armed and rig.state()[2] == pytest.approx(0.0, abs=0.05)
    else:
        assert rig.autopilot.status.armed and rig.autopilot.status.mode == "AUTO.LOITER"
        assert not rig.flight.streaming


def test_udp_peer_pinned_at_the_first_heartbeat(rigs):
    rig = rigs("px4")
    rig.wait_phase("ready", 20)
    pinned = rig.autopilot.link.peer
    spoof = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    spoof.bind(("127.0.0.1", 0))
    try:
        enc = mavlink.MAVLink(None, srcSystem=rig.autopilot.status.system, srcComponent=rig.autopilot.status.component)
        frame = enc.heartbeat_encode(mavlink.MAV_TYPE_QUADROTOR, mavlink.MAV_AUTOPILOT_PX4, 0, 0, 0).pack(enc)
        for _ in range(3):
            spoof.sendto(frame, ("127.0.0.1", rig.autopilot.link.local_port))
            time.sleep(0.1)
        assert rig.autopilot.link.peer == pinned
        assert rig.autopilot.refused_peers == {spoof.getsockname(): 3}
    finally:
        spoof.close()


@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_waits_for_the_autopilot_to_be_ready_then_arms(rigs, flavour):
    """An autopilot whose estimator is not ready refuses to arm: the bridge waits in checking (its
    pre-arm bit, ArduPilot's EKF flags), says why, and arms on the first try once it is ready."""
    rig = rigs(flavour, ("--ready-after", "3"))
    t0 = time.monotonic()
    rig.wait_phase("flying", 30)
    assert rig.phases[:3] == ["checking", "ready", "arming"]
    assert time.monotonic() - t0 > 2.5
    texts = [t.text for t in rig.autopilot.status.statustexts]
    assert any("Ready for takeoff" in t or "using GPS" in t for t in texts), texts
    assert rig.flight.error is None


@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_the_bridge_yields_when_the_autopilot_leaves_offboard(rigs, flavour):
    """Something else switches the autopilot out of OFFBOARD/GUIDED while the policy flies (its own
    fence or failsafe, the pilot's switch): the bridge stops sending, reports it, ends in holding
    with an error, and does not switch back."""
    rig = rigs(flavour)
    rig.wait_phase("flying", 20)
    rig.command = [0.3, 0.0, 0.0, 0.0]
    hold = rig.autopilot.set_mode("hold", verify_s=3.0)  # not the bridge's request: the test's
    rig.wait_phase("holding", 5)
    sent = rig.flight.sent
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # ticks go on; nothing more is sent, the mode stays the autopilot's
        assert rig.autopilot.status.mode == hold
        time.sleep(0.05)
    assert rig.flight.sent == sent
    took_over = [iv for iv in rig.interventions if iv.kind is K.AUTOPILOT_TOOK_OVER]
    assert len(took_over) == 1 and hold in took_over[0].reason
    assert rig.flight.error is not None and "left" in rig.flight.error
    assert rig.autopilot.status.armed  # the autopilot holds it; the bridge did not land or disarm it


@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_the_bridge_yields_when_the_autopilot_ends_the_take_off(rigs, flavour):
    """Something else switches the autopilot to its hold mode low in the take-off (a failsafe, the
    pilot): PX4's AUTO.TAKEOFF -> AUTO.LOITER below the take-off's altitude is not its end, nor is
    ArduPilot leaving GUIDED; the bridge never enters offboard control, sends nothing, reports it
    and ends in holding with an error, the vehicle armed in the autopilot's hold."""
    rig = rigs(flavour, takeoff_height_m=2.0)
    rig.wait_phase("taking_off", 20)
    takeoff_mode = "AUTO.TAKEOFF" if flavour == "px4" else "GUIDED"
    deadline = time.monotonic() + 10
    while rig.autopilot.status.mode != takeoff_mode or rig.state()[2] < 0.05:
        assert time.monotonic() < deadline, (rig.autopilot.status.mode, rig.state()[2])
        time.sleep(0.02)
    hold = rig.autopilot.set_mode("hold", verify_s=3.0)  # not the bridge's request: the test's
    rig.wait_phase("holding", 10)
    assert "warming_up" not in rig.phases and "flying" not in rig.phases, rig.phases
    took_over = [iv for iv in rig.interventions if iv.kind is K.AUTOPILOT_TOOK_OVER]
    assert len(took_over) == 1 and hold in took_over[0].reason, took_over
    assert "take-off" in rig.flight.error and "does not take it back" in rig.flight.error, rig.flight.error
    sent = rig.flight.sent
    time.sleep(1.0)
    assert rig.flight.sent == sent and not rig.flight.streaming
    assert rig.autopilot.status.armed and rig.autopilot.status.mode == hold
    assert rig.state()[2] < 2.0 - 0.5  # held low, where the switch came


def test_px4_take_off_end_reads_the_altitude_radius(rigs):
    """The bridge reads NAV_MC_ALT_RAD (the rehearsal vehicle answers it) for PX4's take-off end."""
    from airplay.bridge.flight_checks import PX4_ALT_REPORT_SLACK_M, px4_takeoff_reached_amsl

    rig = rigs("px4", ("--param", "NAV_MC_ALT_RAD=0.5"), arm=False)
    rig.wait_phase("ready", 20)
    home = rig.autopilot.status.home_amsl_m
    assert px4_takeoff_reached_amsl(rig.autopilot, 2.0) == pytest.approx(home + 2.0 - 0.5 - PX4_ALT_REPORT_SLACK_M)
    # a take-off lower than the radius: PX4 takes half the take-off height
    assert px4_takeoff_reached_amsl(rig.autopilot, 0.4) == pytest.approx(home + 0.2 - PX4_ALT_REPORT_SLACK_M)


def test_an_autopilot_fence_that_cannot_be_installed_fails_on_the_ground(rigs):
    """autopilot_fence with an autopilot that answers neither GPS_GLOBAL_ORIGIN nor the fence
    mission (the rehearsal vehicle): the checks fail naming autopilot_fence; nothing arms."""
    rig = rigs("px4", fence_box_xy_m=(-5.0, -5.0, 5.0, 5.0), autopilot_fence=True, ack_timeout_s=0.3)
    deadline = time.monotonic() + 20
    while rig.flight.phase != "failed":
        assert time.monotonic() < deadline, (rig.phases, rig.flight.error)
        time.sleep(0.05)
    assert "autopilot_fence" in rig.flight.error and "GPS_GLOBAL_ORIGIN" in rig.flight.error
    assert "arming" not in rig.phases and "ready" not in rig.phases
    assert not rig.autopilot.status.armed


# -- the mission: tied at the task's start, handed over at the start pose, ended by its rules ------
def _mission(**fields):
    from airplay.bridge.mission import Mission, MissionJudge

    values = dict(task_id="test-0", start_position=(10.0, 5.0, 1.0), start_yaw=-math.pi / 2,
                  goal_position=(10.0, 1.5, 1.0), success_radius_m=0.5, time_limit_s=30.0)
    values.update(fields)
    return MissionJudge(Mission(**values))


@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_a_mission_is_tied_at_its_start_handed_over_there_and_ends_at_the_goal(rigs, flavour):
    """The vehicle stands at local (2, -1) facing 30 deg; the task starts at map (10, 5, 1.0) facing
    -y. The map is tied so that the vehicle is the start on the ground; PX4's take-off ends short
    (NAV_MC_ALT_RAD), the bridge climbs and turns to the start pose, and only there does the policy
    fly; it flies forward into the goal's radius: success, a hold, then the landing."""
    judge = _mission()
    rig = rigs(flavour, ("--start", "2,-1,0,30"), judge=judge, map_tie="task_start", takeoff_height_m=1.0,
               end_hold_s=1.0)
    rig.command = [0.8, 0.0, 0.0, 0.0]
    rig.wait_phase("landed", 60)
    assert rig.flight.error is None, rig.flight.error
    phases = [str(p) for p in rig.phases]
    assert phases[phases.index("warming_up"):] == ["warming_up", "positioning", "flying", "landing", "landed"], phases
    [tie] = rig.ties
    assert tie.yaw_rad == pytest.approx(-math.pi / 2 - math.radians(30), abs=1e-3)
    assert_allclose(tie.position_to_map((2.0, -1.0, 0.0)), (10.0, 5.0, 0.0), atol=0.02)
    if flavour == "px4":  # PX4 called its take-off done 0.5 m up (half of 1.0 m): the bridge had it climb on in Hold
        log = rig.log_path.read_text()
        assert "takeoff complete at z=0.5" in log and "reposition: holding at z=1.00 m" in log, log[-2000:]
    # handed over at the start pose, at rest
    _, s = rig.handover
    assert np.linalg.norm(s[0:3] - (10.0, 5.0, 1.0)) <= 0.2, s[0:3]
    assert abs(frames.wrap_angle(yaw_of_state(s) + math.pi / 2)) <= math.radians(6)
    # ended at the goal, held there, then landed under it (map frame)
    [ending] = rig.endings
    assert ending.status == "success" and ending.goal_distance_m <= 0.5
    assert judge.ending is ending
    landed = rig.state()[0:3]
    assert np.hypot(*(landed[0:2] - (10.0, 1.5))) <= 0.8, landed
    # it flew forward (map -y) from the start to the goal, never past the goal by more than the hold's drift
    ys = [st[1] for t, st in rig.trace if t >= rig.handover[0]]
    assert min(ys) >= 1.5 - 0.5 - 0.3


def test_a_missions_time_limit_and_the_policys_stop(rigs):
    """A policy that hovers: the task's time limit ends the mission (timeout), hold, land. A
    policy that stops away from the goal: stopped, hold, land."""
    judge = _mission(time_limit_s=3.0)
    rig = rigs("px4", ("--start", "0,0,0,90"), judge=judge, map_tie="task_start", takeoff_height_m=1.0,
               end_hold_s=0.5)
    rig.command = [0.0, 0.0, 0.0, 0.0]
    rig.wait_phase("landed", 60)
    [ending] = rig.endings
    assert ending.status == "timeout" and ending.flown_s == pytest.approx(3.0, abs=0.1)
    assert rig.flight.error is None

    judge = _mission()
    rig = rigs("px4", ("--start", "0,0,0,90"), judge=judge, map_tie="task_start", takeoff_height_m=1.0,
               end_hold_s=0.5)
    rig.command = [0.0, 0.0, 0.0, 0.0]
    rig.wait_phase("flying", 40)
    time.sleep(0.5)
    rig.flight.policy_stop("STOP")
    rig.wait_phase("landed", 30)
    [ending] = rig.endings
    assert ending.status == "stopped" and ending.reason == "STOP"


def test_identify_recovers_a_vehicles_known_response(tmp_path):
    """`airplay identify --arm` against a rehearsal vehicle flown by a known flight model (time
    constants 0.6 s horizontally, 0.3 s vertically, 0.25 s in yaw rate): the excitation flies through
    the bridge, the fit finds those constants, and the profile loads as a vehicle file."""
    from airplay.sim.dynamics import load_vehicle_profile

    known = tmp_path / "known.yaml"
    known.write_text("velocity_time_constant_s: 0.6\nvertical_velocity_time_constant_s: 0.3\n"
                     "yaw_rate_time_constant_s: 0.25\n")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    vehicle = start_vehicle(port, "px4", tmp_path / "vehicle.log", "--vehicle-config", str(known))
    out = tmp_path / "profile.yaml"
    try:
        done = subprocess.run([sys.executable, "-m", "airplay.cli", "identify", "--connection",
                               f"udpin:127.0.0.1:{port}", "--arm", "--out", str(out)],
                              capture_output=True, text=True, timeout=240)
    finally:
        stop_process(vehicle)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    params, profile = load_vehicle_profile(out)
    assert params.velocity_time_constant_s == pytest.approx(0.6, abs=0.05)
    assert params.vertical_velocity_time_constant_s == pytest.approx(0.3, abs=0.05)
    assert params.yaw_rate_time_constant_s == pytest.approx(0.25, abs=0.05)
    assert profile["autopilot"] == "px4" and profile["command_delay_s"] <= 0.06
    assert profile["rms_error"]["xy_m_s"] < 0.2 * profile["rms_error_of_the_base_model"]["xy_m_s"]


def test_identify_refuses_to_arm_without_the_request(tmp_path):
    done = subprocess.run([sys.executable, "-m", "airplay.cli", "identify", "--out", str(tmp_path / "p.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--arm" in done.stderr and not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("flavour", ["px4", "ardupilot"])
def test_a_gps_loss_in_flight_ends_offboard_control(rigs, flavour):
    """The rehearsal vehicle loses its GPS 5 s into the flight (the take-off takes ~2 s) (GPS_RAW_INT no fix, a drifting
    estimate, PX4's growing eph / ArduPilot's EKF without an absolute position): the bridge stops
    sending setpoints at once (none computed on the drifting estimate), reports
    ESTIMATE_DISTRUSTED with the reason, has the autopilot land, and never takes control back."""
    rig = rigs(flavour, ("--gps-loss-after", "5.0"), takeoff_height_m=0.8)
    rig.wait_phase("flying", 20)
    rig.command = [0.5, 0.0, 0.0, 0.0]
    rig.wait_phase("landing", 20)
    assert rig.handover is not None and "flying" in rig.phases[:rig.phases.index("landing")]
    distrusted = [iv for iv in rig.interventions if iv.kind is K.ESTIMATE_DISTRUSTED]
    assert len(distrusted) == 1, rig.kinds()
    assert "GPS lost" in distrusted[0].reason or "position" in distrusted[0].reason, distrusted[0].reason
    sent = rig.flight.sent
    rig.wait_phase("landed", 20)
    assert rig.flight.sent == sent                      # nothing sent after the estimate was distrusted
    assert not rig.autopilot.status.armed
    assert rig.autopilot.status.mode == ("AUTO.LAND" if flavour == "px4" else "LAND")
    assert rig.flight.error is not None and "estimate" in rig.flight.error
    assert "flying" not in rig.phases[rig.phases.index("landing"):]
    assert rig.flight.request_arm() is False            # the flight is over: no new arming on this estimate
