"""The rehearsal vehicle's command side: COMMAND_LONG, SET_MODE, setpoints and the GCS heartbeat.

Arming, disarming, take-off, landing, mode changes and message intervals answered with
COMMAND_ACK as PX4 or ArduCopter answer them (refusals with their STATUSTEXT); PARAM_REQUEST_READ
of a modelled parameter answered with its PARAM_VALUE;
SET_POSITION_TARGET_LOCAL_NED velocity (MAV_FRAME_BODY_NED or LOCAL_NED) and position
(LOCAL_NED: x north, y east, z down, m from the map origin; yaw rad clockwise from north)
setpoints, turned into the map ENU / heading-frame command the vehicle flies. A mixin of
:class:`~airplay.bridge.vehicle_endpoint.VehicleEndpoint`.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay import frames
from airplay.bridge import frames as mav_frames
from airplay.bridge.modes import ARDUCOPTER_MODES, mode_name
from airplay.bridge.vehicle_flavours import BEHAVIOUR, FORCE_MAGIC, HOME_AMSL_M, LAND_MODE, NEEDS_POSITION, \
    NOT_READY_TEXT, REFUSED

log = logging.getLogger("airplay.vehicle")

_IGNORE_POSITION, _IGNORE_VELOCITY, _IGNORE_ACCEL = 1 | 2 | 4, 8 | 16 | 32, 64 | 128 | 256
_IGNORE_YAW, _IGNORE_YAW_RATE = 1024, 2048


class CommandHandling:
    """What the vehicle does with each message it receives (:meth:`_handle`)."""

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
        elif kind == "PARAM_REQUEST_READ":
            if msg.target_system in (0, self.link.mav.srcSystem):
                self._param_read(msg)
        elif kind == "HEARTBEAT" and self.flavour == "ardupilot" \
                and msg.get_srcSystem() == int(self.param("MAV_GCS_SYSID")):
            self.gcs_heartbeat_s = self.clock_s
            if self.gcs_failsafe:
                self.gcs_failsafe = False
                self.statustext("GCS Failsafe Cleared", mavlink.MAV_SEVERITY_INFO)

    def _param_read(self, msg) -> None:
        """PARAM_REQUEST_READ by name of a parameter the vehicle models -> PARAM_VALUE (REAL32);
        other names get no answer."""
        name = str(msg.param_id).rstrip("\x00")
        names = list(self.autopilot_params)
        if name in names:
            self.link.mav.param_value_send(name.encode(), float(self.autopilot_params[name]),
                                           mavlink.MAV_PARAM_TYPE_REAL32, len(names), names.index(name))

    def _setpoint(self, msg) -> None:
        m = msg.type_mask
        if m & _IGNORE_ACCEL != _IGNORE_ACCEL:
            self.stats["ignored_setpoints"] += 1
            return
        if m & _IGNORE_POSITION == 0 and m & _IGNORE_VELOCITY == _IGNORE_VELOCITY:
            self._position_setpoint(msg)
            return
        values = [msg.vx, msg.vy, msg.vz, msg.yaw_rate]
        if m & _IGNORE_POSITION != _IGNORE_POSITION or m & 8 or not all(math.isfinite(v) for v in values) \
                or msg.coordinate_frame not in (mav_frames.MAV_FRAME_BODY_NED, mav_frames.MAV_FRAME_LOCAL_NED):
            self.stats["ignored_setpoints"] += 1
            return
        yaw_rate_cw = 0.0 if m & _IGNORE_YAW_RATE else msg.yaw_rate
        v_ned = np.array([msg.vx, msg.vy, msg.vz])
        if msg.coordinate_frame == mav_frames.MAV_FRAME_BODY_NED:
            cmd = mav_frames.px4_body_ned_to_heading_command(v_ned, yaw_rate_cw)
        else:
            cmd = np.r_[frames.map_to_heading(frames.ned_to_enu(v_ned), self.yaw), -yaw_rate_cw]
        self.setpoint, self.setpoint_s = cmd, self.clock_s
        self.position_target = self.yaw_target = None
        self._new_setpoint()

    def _position_setpoint(self, msg) -> None:
        """Position (+ yaw) in MAV_FRAME_LOCAL_NED: x north, y east, z down (m, from the local
        origin = map origin), yaw rad clockwise from north (ignored with bit 1024: keep heading)."""
        use_yaw = not msg.type_mask & _IGNORE_YAW
        values = [msg.x, msg.y, msg.z] + ([msg.yaw] if use_yaw else [])
        if msg.coordinate_frame != mav_frames.MAV_FRAME_LOCAL_NED or not all(math.isfinite(v) for v in values):
            self.stats["ignored_setpoints"] += 1
            return
        self.position_target = frames.ned_to_enu(np.array([msg.x, msg.y, msg.z]))
        self.yaw_target = float(frames.yaw_ned_to_enu(msg.yaw)) if use_yaw else None
        self.setpoint, self.setpoint_s = None, self.clock_s
        self.stats["position_setpoints"] += 1
        self._new_setpoint()

    def _new_setpoint(self) -> None:
        self.stats["setpoints"] += 1
        self.guided_stopped = False
        if self.mode == "GUIDED" and self.takeoff_z is not None:
            log.info("GUIDED: a setpoint ends the take-off at z=%.2f m", self.position[2])
            self.takeoff_z = None

    def _request_mode(self, mode: str) -> int:
        if mode not in BEHAVIOUR[self.flavour]:
            return self._refuse(mavlink.MAV_RESULT_UNSUPPORTED, f"Mode {mode} not supported")
        if mode == self.mode:
            return mavlink.MAV_RESULT_ACCEPTED
        if mode in NEEDS_POSITION[self.flavour] and not self.ready:
            text = (f"Switching to {mode} is currently not possible" if self.flavour == "px4"
                    else f"Mode change to {mode} failed: requires position")
            return self._refuse(REFUSED[self.flavour], text)
        if self.flavour == "px4" and mode == "OFFBOARD" and self.clock_s - self.setpoint_s > self.offboard_loss_s:
            self.stats["offboard_refused"] += 1
            log.warning("OFFBOARD refused: no setpoint stream (last setpoint %s)",
                        "never" if self.setpoint_s == -math.inf else f"{self.clock_s - self.setpoint_s:.2f} s ago")
            return self._refuse(mavlink.MAV_RESULT_TEMPORARILY_REJECTED,
                                "Switching to Offboard is currently not possible: no offboard signal")
        if mode == "AUTO.TAKEOFF" and not self.armed:
            return self._refuse(mavlink.MAV_RESULT_TEMPORARILY_REJECTED, "Takeoff denied: disarmed")
        self._set_mode(mode, "requested")
        return mavlink.MAV_RESULT_ACCEPTED

    def _arm(self, msg) -> int:
        forced = int(round(msg.param2)) == FORCE_MAGIC
        if self.in_air:
            return mavlink.MAV_RESULT_ACCEPTED if self.armed else mavlink.MAV_RESULT_DENIED
        if self.armed:
            return mavlink.MAV_RESULT_ACCEPTED
        if not forced and not self.ready:
            log.warning("arming refused: estimator not ready (%.1f s of %.1f s)", self.clock_s, self.ready_after_s)
            return self._refuse(REFUSED[self.flavour], NOT_READY_TEXT[self.flavour])
        if not forced and self.behaviour not in ("hold", "offboard"):
            text = "Arming denied: not possible in this mode" if self.flavour == "px4" else "Arm: Mode not armable"
            return self._refuse(REFUSED[self.flavour], text)
        self.armed = True
        self._next_send["HEARTBEAT"] = self.clock_s
        self.home = self.position.copy()
        self.hold_point = self.position.copy()
        log.info("armed%s", " (forced)" if forced else "")
        return mavlink.MAV_RESULT_ACCEPTED

    def _disarm(self, msg) -> int:
        if self.in_air and int(round(msg.param2)) != FORCE_MAGIC:
            text = "Disarming denied: not landed" if self.flavour == "px4" else "Disarm: not landed"
            return self._refuse(REFUSED[self.flavour], text)
        if self.in_air:
            self._touch_down(disarm=True)
        self.armed = False
        self._next_send["HEARTBEAT"] = self.clock_s
        log.info("disarmed")
        return mavlink.MAV_RESULT_ACCEPTED

    def _reposition(self, msg) -> int:
        """PX4's DO_REPOSITION, as the bridge sends it: latitude and longitude NaN (stay where it is),
        param7 the altitude AMSL (NaN: keep it); in the air only; Hold (AUTO.LOITER) at the new point."""
        if not (self.armed and self.in_air):
            return self._refuse(REFUSED[self.flavour], "Reposition denied: not in air")
        if math.isfinite(msg.param5) or math.isfinite(msg.param6):
            return self._refuse(mavlink.MAV_RESULT_UNSUPPORTED, "Reposition: only a change of altitude is modelled")
        z = self.ground_z + (msg.param7 - HOME_AMSL_M) if math.isfinite(msg.param7) else self.position[2]
        self.takeoff_z = None
        self._set_mode("AUTO.LOITER", "reposition")
        self.hold_point = np.r_[self.position[:2], z]
        log.info("reposition: holding at z=%.2f m", z)
        return mavlink.MAV_RESULT_ACCEPTED

    def _command(self, msg) -> int:
        c = msg.command
        if c == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
            return self._arm(msg) if msg.param1 >= 0.5 else self._disarm(msg)
        if c == mavlink.MAV_CMD_NAV_TAKEOFF:
            if not self.armed:
                return self._refuse(REFUSED[self.flavour], "Takeoff denied: disarmed" if self.flavour == "px4"
                                    else "Rejecting takeoff: motors not armed")
            if self.flavour == "px4":
                height = msg.param7 - HOME_AMSL_M if math.isfinite(msg.param7) else self.param("MIS_TAKEOFF_ALT")
            else:
                if self.mode != "GUIDED":
                    return self._refuse(mavlink.MAV_RESULT_FAILED, f"Rejecting takeoff: not in GUIDED ({self.mode})")
                height = msg.param7
            if not (math.isfinite(height) and height > 0.1):
                return self._refuse(mavlink.MAV_RESULT_DENIED, f"Takeoff denied: height {height:.2f} m")
            self.takeoff_z = self.ground_z + float(height)
            self.hold_point = self.position.copy()
            if self.flavour == "px4":
                self._set_mode("AUTO.TAKEOFF", "takeoff command")
            log.info("taking off to z=%.2f m", self.takeoff_z)
            return mavlink.MAV_RESULT_ACCEPTED
        if c == mavlink.MAV_CMD_DO_REPOSITION and self.flavour == "px4":
            return self._reposition(msg)
        if c == mavlink.MAV_CMD_NAV_LAND:
            self.takeoff_z = None
            self._set_mode(LAND_MODE[self.flavour], "land command")
            return mavlink.MAV_RESULT_ACCEPTED
        if c == mavlink.MAV_CMD_DO_SET_MODE:
            if self.flavour == "px4":
                custom = (int(msg.param2) << 16) | (int(msg.param3) << 24)
            else:
                custom = int(msg.param2)
                if custom not in ARDUCOPTER_MODES.values():
                    return self._refuse(mavlink.MAV_RESULT_UNSUPPORTED, f"Mode {custom} not supported")
            return self._request_mode(mode_name(self.flavour, custom))
        if c == mavlink.MAV_CMD_SET_MESSAGE_INTERVAL:
            entry = self._message_map().get(int(msg.param1))
            name = entry.msgname if entry is not None else None
            if name not in self.rates_hz:
                return mavlink.MAV_RESULT_UNSUPPORTED
            interval_us = msg.param2
            self.rates_hz[name] = (self.default_rates_hz[name] if interval_us == 0 else 0.0 if interval_us < 0
                                   else min(1e6 / interval_us, 1.0 / self.dt_s))
            return mavlink.MAV_RESULT_ACCEPTED
        return mavlink.MAV_RESULT_UNSUPPORTED

    def _message_map(self) -> dict:
        if self.flavour == "ardupilot":
            from pymavlink.dialects.v20 import ardupilotmega

            return ardupilotmega.mavlink_map
        return mavlink.mavlink_map
