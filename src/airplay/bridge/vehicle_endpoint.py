"""A MAVLink vehicle backed by airplay's own flight model: rehearse a flight on a laptop
(``airplay vehicle``), and the autopilot the bridge tests fly against.

It speaks MAVLink 2 as a PX4 or an ArduCopter autopilot (``flavour``) would, for the parts the
bridge uses:

* HEARTBEAT at 1 Hz (MAV_TYPE_QUADROTOR; autopilot PX4 or ARDUPILOTMEGA; armed flag; the
  flavour's custom_mode), LOCAL_POSITION_NED and ATTITUDE_QUATERNION at 50 Hz, ATTITUDE at
  10 Hz, GLOBAL_POSITION_INT at 5 Hz, SYS_STATUS and BATTERY_STATUS at 1 Hz (rates can be
  changed with MAV_CMD_SET_MESSAGE_INTERVAL);
* COMMAND_LONG answered with COMMAND_ACK: COMPONENT_ARM_DISARM (on the ground only, unless
  forced with 21196), NAV_TAKEOFF (PX4: param7 AMSL, NaN = 2.5 m, MIS_TAKEOFF_ALT; ArduPilot:
  param7 relative, in GUIDED only), NAV_LAND, DO_SET_MODE, SET_MESSAGE_INTERVAL; anything else
  MAV_RESULT_UNSUPPORTED; the SET_MODE message too;
* SET_POSITION_TARGET_LOCAL_NED velocity + yaw-rate setpoints (MAV_FRAME_BODY_NED or
  LOCAL_NED), flown in OFFBOARD (PX4) or GUIDED (ArduPilot).

PX4's offboard rules: OFFBOARD is refused (TEMPORARILY_REJECTED) unless a setpoint arrived
within ``offboard_loss_s`` (PX4 COM_OF_LOSS_T); in OFFBOARD, when no setpoint came for
``offboard_loss_s`` the vehicle falls back to AUTO.LOITER (hold position; PX4's
COM_OBL_RC_ACT without RC) and says so in a STATUSTEXT. ArduPilot's GUIDED stops (holds) when
velocity setpoints are older than 3 s. Landing disarms on touchdown.

Frames: the vehicle's local NED origin is the map origin, so the bridge's ``odom`` is in the
map frame of the scene the vehicle was placed in (``start``). Dynamics:
:class:`airplay.sim.dynamics.QuadrotorBatch` stepped at its control rate in wall-clock time;
the ground is the plane z = ``start[2]``.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay.bridge import frames
from airplay.bridge.mavlink_link import ARDUCOPTER_MODES, FLAVOURS, MavlinkLink, custom_mode_of, mode_name

log = logging.getLogger("airplay.vehicle")

HOME_LAT_DEG, HOME_LON_DEG, HOME_AMSL_M = 47.397742, 8.545594, 488.0  # PX4 SITL's default home
EARTH_RADIUS_M = 6378137.0
ARDUPILOT_GUIDED_TIMEOUT_S = 3.0
PX4_DEFAULT_TAKEOFF_M = 2.5
FORCE_MAGIC = 21196

# Modes the endpoint flies, per flavour, and what each does.
_BEHAVIOUR = {
    "px4": {"POSCTL": "hold", "ALTCTL": "hold", "AUTO.LOITER": "hold", "AUTO.TAKEOFF": "takeoff",
            "AUTO.LAND": "land", "OFFBOARD": "offboard"},
    "ardupilot": {"STABILIZE": "hold", "ALT_HOLD": "hold", "LOITER": "hold", "POSHOLD": "hold", "BRAKE": "hold",
                  "GUIDED": "offboard", "LAND": "land"},
}
_INITIAL_MODE = {"px4": "POSCTL", "ardupilot": "STABILIZE"}
_DEFAULT_RATES_HZ = {"LOCAL_POSITION_NED": 50.0, "ATTITUDE_QUATERNION": 50.0, "ATTITUDE": 10.0,
                     "GLOBAL_POSITION_INT": 5.0, "SYS_STATUS": 1.0, "BATTERY_STATUS": 1.0, "HEARTBEAT": 1.0}


class VehicleEndpoint:
    """One simulated multirotor behind a MAVLink link; call :meth:`run` (or :meth:`tick`).

    url: where to talk (``udp:HOST:PORT`` sends to HOST:PORT, like PX4 SITL to its offboard
    port; see :class:`~airplay.bridge.mavlink_link.MavlinkLink`). start: (x, y, z, yaw) in map
    ENU metres/rad, on the ground. offboard_loss_s: PX4 COM_OF_LOSS_T.
    """

    def __init__(self, url: str, flavour: str = "px4", params=None, start=(0.0, 0.0, 0.0, 0.0),
                 system: int = 1, component: int = 1, offboard_loss_s: float = 1.0,
                 land_speed_m_s: float = 0.7, battery_flight_s: float = 900.0) -> None:
        from airplay.sim.dynamics import QuadrotorBatch, load_vehicle_params

        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
        self.flavour = flavour
        self.params = params if params is not None else load_vehicle_params()
        self.dt_s = self.params.control_dt_s
        self.vehicle = QuadrotorBatch(self.params, 1)
        self.start = np.asarray(start, np.float64).reshape(4)
        self.ground_z = float(self.start[2])
        self.vehicle.reset(self.start[None, :3], self.start[3:4])
        if url.startswith("udp:"):
            url = "udpout:" + url[4:]  # the vehicle sends to the given address, as PX4 SITL does
        self.link = MavlinkLink(url, system, component)
        self.offboard_loss_s = offboard_loss_s
        self.land_speed_m_s = land_speed_m_s
        self.battery_flight_s = battery_flight_s
        self.armed = False
        self.in_air = False
        self.mode = _INITIAL_MODE[flavour]
        self.hold_point = self.position.copy()
        self.takeoff_z: float | None = None
        self.setpoint: np.ndarray | None = None      # heading-frame command of the newest setpoint
        self.setpoint_s = -math.inf                  # when it arrived (vehicle clock)
        self.rates_hz = dict(_DEFAULT_RATES_HZ)
        self._next_send = {name: 0.0 for name in self.rates_hz}
        self.clock_s = 0.0                           # vehicle time since boot
        self.flight_s = 0.0
        self.stats = {"setpoints": 0, "ignored_setpoints": 0, "commands": 0, "offboard_refused": 0,
                      "failsafes": 0}

    # -- state --------------------------------------------------------------------------------
    @property
    def position(self) -> np.ndarray:
        return self.vehicle.position[0].copy()

    @property
    def yaw(self) -> float:
        return float(self.vehicle.yaw[0])

    @property
    def behaviour(self) -> str:
        return _BEHAVIOUR[self.flavour].get(self.mode, "hold")

    def _set_mode(self, mode: str, why: str = "") -> None:
        if mode != self.mode:
            log.info("mode %s -> %s%s", self.mode, mode, f" ({why})" if why else "")
            if _BEHAVIOUR[self.flavour].get(mode) in ("hold", "land") or mode == "GUIDED":
                self.hold_point = self.position.copy()
            self._next_send["HEARTBEAT"] = self.clock_s  # tell the world now, not at the next 1 Hz beat
        self.mode = mode

    # -- receiving ---------------------------------------------------------------------------
    def _handle(self, msg) -> None:
        kind = msg.get_type()
        if kind == "COMMAND_LONG":
            if msg.target_system not in (0, self.link.mav.srcSystem):
                return
            self.stats["commands"] += 1
            result = self._command(msg)
            self.link.mav.command_ack_send(msg.command, result, 0, 0, msg.get_srcSystem(), msg.get_srcComponent())
        elif kind == "SET_MODE":
            if msg.target_system == self.link.mav.srcSystem:
                self._request_mode(mode_name(self.flavour, msg.custom_mode))
        elif kind == "SET_POSITION_TARGET_LOCAL_NED":
            if msg.target_system in (0, self.link.mav.srcSystem):
                self._setpoint(msg)

    def _setpoint(self, msg) -> None:
        ignore_pos = 1 | 2 | 4
        ignore_acc = 64 | 128 | 256
        values = [msg.vx, msg.vy, msg.vz, msg.yaw_rate]
        if (msg.type_mask & ignore_pos) != ignore_pos or (msg.type_mask & ignore_acc) != ignore_acc \
                or msg.type_mask & 8 or not all(math.isfinite(v) for v in values) \
                or msg.coordinate_frame not in (frames.MAV_FRAME_BODY_NED, frames.MAV_FRAME_LOCAL_NED):
            self.stats["ignored_setpoints"] += 1
            return
        yaw_rate_cw = 0.0 if msg.type_mask & 2048 else msg.yaw_rate
        v_ned = np.array([msg.vx, msg.vy, msg.vz])
        if msg.coordinate_frame == frames.MAV_FRAME_BODY_NED:
            cmd = frames.px4_body_ned_to_heading_command(v_ned, yaw_rate_cw)
        else:
            v_enu = frames.ned_to_enu(v_ned)
            c, s = math.cos(self.yaw), math.sin(self.yaw)
            cmd = np.array([c * v_enu[0] + s * v_enu[1], -s * v_enu[0] + c * v_enu[1], v_enu[2], -yaw_rate_cw])
        self.setpoint, self.setpoint_s = cmd, self.clock_s
        self.stats["setpoints"] += 1

    def _request_mode(self, mode: str) -> int:
        if mode not in _BEHAVIOUR[self.flavour]:
            return mavlink.MAV_RESULT_UNSUPPORTED
        if self.flavour == "px4" and mode == "OFFBOARD" and self.clock_s - self.setpoint_s > self.offboard_loss_s:
            self.stats["offboard_refused"] += 1
            log.warning("OFFBOARD refused: no setpoint stream (last setpoint %s)",
                        "never" if self.setpoint_s == -math.inf else f"{self.clock_s - self.setpoint_s:.2f} s ago")
            self.statustext("Switching to Offboard is currently not possible: no offboard signal")
            return mavlink.MAV_RESULT_TEMPORARILY_REJECTED
        if mode == "AUTO.TAKEOFF" and not self.armed:
            return mavlink.MAV_RESULT_TEMPORARILY_REJECTED
        self._set_mode(mode, "requested")
        return mavlink.MAV_RESULT_ACCEPTED

    def _command(self, msg) -> int:
        c = msg.command
        if c == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
            if msg.param1 >= 0.5:
                if self.in_air:
                    return mavlink.MAV_RESULT_ACCEPTED if self.armed else mavlink.MAV_RESULT_DENIED
                if self.behaviour not in ("hold", "offboard"):
                    return mavlink.MAV_RESULT_DENIED
                self.armed = True
                self._next_send["HEARTBEAT"] = self.clock_s
                self.hold_point = self.position.copy()
                log.info("armed")
                return mavlink.MAV_RESULT_ACCEPTED
            if self.in_air and int(msg.param2) != FORCE_MAGIC:
                return mavlink.MAV_RESULT_TEMPORARILY_REJECTED
            self._touch_down(disarm=True) if self.in_air else None
            self.armed = False
            self._next_send["HEARTBEAT"] = self.clock_s
            log.info("disarmed")
            return mavlink.MAV_RESULT_ACCEPTED
        if c == mavlink.MAV_CMD_NAV_TAKEOFF:
            if not self.armed:
                return mavlink.MAV_RESULT_TEMPORARILY_REJECTED
            if self.flavour == "px4":
                height = msg.param7 - HOME_AMSL_M if math.isfinite(msg.param7) else PX4_DEFAULT_TAKEOFF_M
            else:
                if self.mode != "GUIDED":
                    return mavlink.MAV_RESULT_FAILED
                height = msg.param7
            if not (math.isfinite(height) and height > 0.1):
                return mavlink.MAV_RESULT_DENIED
            self.takeoff_z = self.ground_z + float(height)
            self.hold_point = self.position.copy()
            if self.flavour == "px4":
                self._set_mode("AUTO.TAKEOFF", "takeoff command")
            log.info("taking off to z=%.2f m", self.takeoff_z)
            return mavlink.MAV_RESULT_ACCEPTED
        if c == mavlink.MAV_CMD_NAV_LAND:
            self.takeoff_z = None
            self._set_mode("AUTO.LAND" if self.flavour == "px4" else "LAND", "land command")
            return mavlink.MAV_RESULT_ACCEPTED
        if c == mavlink.MAV_CMD_DO_SET_MODE:
            if self.flavour == "px4":
                custom = (int(msg.param2) << 16) | (int(msg.param3) << 24)
            else:
                custom = int(msg.param2)
                if custom not in ARDUCOPTER_MODES.values():
                    return mavlink.MAV_RESULT_UNSUPPORTED
            return self._request_mode(mode_name(self.flavour, custom))
        if c == mavlink.MAV_CMD_SET_MESSAGE_INTERVAL:
            entry = mavlink.mavlink_map.get(int(msg.param1))
            name = entry.msgname if entry is not None else None
            if name not in self.rates_hz:
                return mavlink.MAV_RESULT_UNSUPPORTED
            interval_us = msg.param2
            self.rates_hz[name] = (_DEFAULT_RATES_HZ[name] if interval_us == 0 else 0.0 if interval_us < 0
                                   else min(1e6 / interval_us, 1.0 / self.dt_s))
            return mavlink.MAV_RESULT_ACCEPTED
        return mavlink.MAV_RESULT_UNSUPPORTED

    def statustext(self, text: str, severity: int = mavlink.MAV_SEVERITY_WARNING) -> None:
        self.link.mav.statustext_send(severity, text[:50].encode())

    # -- flying ------------------------------------------------------------------------------
    def _hold_command(self, target: np.ndarray, max_xy: float = 2.0, max_z: float = 1.0) -> np.ndarray:
        """Heading-frame command flying to ``target`` (map) with a P law, no yaw."""
        err = target - self.position
        v = 1.2 * err
        sxy = math.hypot(v[0], v[1])
        if sxy > max_xy:
            v[:2] *= max_xy / sxy
        v[2] = float(np.clip(v[2], -max_z, max_z))
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        return np.array([c * v[0] + s * v[1], -s * v[0] + c * v[1], v[2], 0.0])

    def _command_now(self) -> np.ndarray:
        b = self.behaviour
        age = self.clock_s - self.setpoint_s
        if self.flavour == "px4" and b == "offboard" and age > self.offboard_loss_s:
            self.stats["failsafes"] += 1
            log.warning("offboard setpoints lost for %.2f s (> %.2f s): failsafe to hold", age, self.offboard_loss_s)
            self.statustext("Failsafe: offboard signal lost, holding position")
            self._set_mode("AUTO.LOITER", "offboard loss failsafe")
            b = "hold"
        if self.takeoff_z is not None and b in ("takeoff", "offboard") and (b == "takeoff" or age > 0.5):
            target = np.r_[self.hold_point[:2], self.takeoff_z]
            if abs(self.position[2] - self.takeoff_z) < 0.05:
                log.info("takeoff complete at z=%.2f m", self.position[2])
                self.takeoff_z = None
                self.hold_point = self.position.copy()
                if self.flavour == "px4":
                    self._set_mode("AUTO.LOITER", "takeoff complete")
            return self._hold_command(target, max_z=1.5)
        if b == "offboard":
            if self.flavour == "ardupilot" and age > ARDUPILOT_GUIDED_TIMEOUT_S:
                return self._hold_command(self.hold_point)
            self.hold_point = self.position.copy()
            return self.setpoint.copy()
        if b == "land":
            cmd = self._hold_command(np.r_[self.hold_point[:2], self.position[2]])
            cmd[2] = -self.land_speed_m_s
            return cmd
        return self._hold_command(self.hold_point)

    def _touch_down(self, disarm: bool) -> None:
        p = self.position
        self.vehicle.reset(np.array([[p[0], p[1], self.ground_z]]), np.array([self.yaw]))
        self.in_air = False
        self.takeoff_z = None
        if disarm and self.armed:
            self.armed = False
            self._next_send["HEARTBEAT"] = self.clock_s
            log.info("landed at (%.2f, %.2f): disarmed", p[0], p[1])
        self.hold_point = self.position.copy()

    def step(self) -> None:
        """One control period of the vehicle (commands already handled)."""
        if not self.armed:
            self.clock_s += self.dt_s
            return
        cmd = self._command_now()
        if not self.in_air and cmd[2] <= 0.0:
            self.clock_s += self.dt_s  # armed on the ground, not climbing: stays put
            return
        self.in_air = True
        self.vehicle.step(cmd[None, :])
        self.clock_s += self.dt_s
        self.flight_s += self.dt_s
        if self.position[2] <= self.ground_z:
            self._touch_down(disarm=self.behaviour == "land")

    # -- sending -----------------------------------------------------------------------------
    def _due(self, name: str) -> bool:
        rate = self.rates_hz[name]
        if rate <= 0 or self.clock_s + 1e-9 < self._next_send[name]:
            return False
        self._next_send[name] = max(self._next_send[name] + 1.0 / rate, self.clock_s)
        return True

    def send_telemetry(self) -> None:
        mav = self.link.mav
        t_ms = int(self.clock_s * 1000) & 0xFFFFFFFF
        v = self.vehicle
        p_ned, v_ned = frames.enu_to_ned(v.position[0]), frames.enu_to_ned(v.velocity[0])
        q_ned = frames.quat_enu_flu_xyzw_to_ned_frd_wxyz(v.quat_xyzw[0])
        rates = frames.angular_velocity_flu_to_frd(v.angular_velocity_body[0])
        if self._due("HEARTBEAT"):
            base = mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED | (mavlink.MAV_MODE_FLAG_SAFETY_ARMED if self.armed else 0)
            autopilot = mavlink.MAV_AUTOPILOT_PX4 if self.flavour == "px4" else mavlink.MAV_AUTOPILOT_ARDUPILOTMEGA
            state = mavlink.MAV_STATE_ACTIVE if self.armed else mavlink.MAV_STATE_STANDBY
            mav.heartbeat_send(mavlink.MAV_TYPE_QUADROTOR, autopilot, base, custom_mode_of(self.flavour, self.mode),
                               state)
        if self._due("LOCAL_POSITION_NED"):
            mav.local_position_ned_send(t_ms, *(float(x) for x in p_ned), *(float(x) for x in v_ned))
        if self._due("ATTITUDE_QUATERNION"):
            mav.attitude_quaternion_send(t_ms, *(float(x) for x in q_ned), *(float(x) for x in rates))
        if self._due("ATTITUDE"):
            w, x, y, z = q_ned
            roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
            pitch = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
            yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
            mav.attitude_send(t_ms, roll, pitch, yaw, *(float(r) for r in rates))
        if self._due("GLOBAL_POSITION_INT"):
            lat = HOME_LAT_DEG + math.degrees(p_ned[0] / EARTH_RADIUS_M)
            lon = HOME_LON_DEG + math.degrees(p_ned[1] / (EARTH_RADIUS_M * math.cos(math.radians(HOME_LAT_DEG))))
            rel_m = float(v.position[0][2]) - self.ground_z
            heading = int(round(math.degrees(frames.yaw_enu_to_ned(self.yaw)) % 360 * 100))
            mav.global_position_int_send(t_ms, int(lat * 1e7), int(lon * 1e7), int((HOME_AMSL_M + rel_m) * 1000),
                                         int(rel_m * 1000), *(int(round(c * 100)) for c in v_ned), heading)
        remaining = max(0.0, 1.0 - self.flight_s / self.battery_flight_s)
        voltage_mv = int(1000 * (14.0 + 2.8 * remaining))  # 4S pack
        current_ca = 1500 if self.in_air else 50
        if self._due("SYS_STATUS"):
            mav.sys_status_send(0, 0, 0, 100, voltage_mv, current_ca, int(round(100 * remaining)), 0, 0, 0, 0, 0, 0)
        if self._due("BATTERY_STATUS"):
            mav.battery_status_send(0, mavlink.MAV_BATTERY_FUNCTION_ALL, mavlink.MAV_BATTERY_TYPE_LIPO, 2500,
                                    [voltage_mv // 4] * 4 + [65535] * 6, current_ca, -1, -1,
                                    int(round(100 * remaining)))

    # -- running -----------------------------------------------------------------------------
    def tick(self) -> None:
        """Handle what arrived, step one control period, send what is due."""
        for msg in self.link.receive(0.0):
            try:
                self._handle(msg)
            except Exception:  # one bad message must not ground the vehicle
                log.exception("error handling %s", msg.get_type())
        self.step()
        self.send_telemetry()

    def run(self, duration_s: float | None = None, stop=None) -> None:
        """Tick in wall-clock time (one control period per ``dt_s``) until ``duration_s`` or
        ``stop`` (a threading.Event) is set. Falls behind gracefully: at most 5 catch-up steps."""
        t0 = time.monotonic()
        next_tick = t0
        while (duration_s is None or time.monotonic() - t0 < duration_s) and not (stop is not None and stop.is_set()):
            now = time.monotonic()
            if now < next_tick:
                for msg in self.link.receive(next_tick - now):
                    try:
                        self._handle(msg)
                    except Exception:
                        log.exception("error handling %s", msg.get_type())
                continue
            self.tick()
            next_tick += self.dt_s
            if time.monotonic() - next_tick > 5 * self.dt_s:
                next_tick = time.monotonic()

    def close(self) -> None:
        self.link.close()
