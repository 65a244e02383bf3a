"""The rehearsal vehicle's telemetry: which messages it sends, at what rates, with what contents.

HEARTBEAT, LOCAL_POSITION_NED, ATTITUDE_QUATERNION, ATTITUDE, GLOBAL_POSITION_INT, GPS_RAW_INT,
SYS_STATUS, BATTERY_STATUS, EXTENDED_SYS_STATE (landed state: in air or on the ground) and
(ArduPilot) EKF_STATUS_REPORT, each at its rate (Hz, changed by
MAV_CMD_SET_MESSAGE_INTERVAL). The vehicle's map ENU / base_link FLU state is sent in MAVLink's
local NED / body FRD frames; the global position is the local one offset from the simulated
home (:data:`~airplay.bridge.vehicle_flavours.HOME_LAT_DEG` and its kin). A mixin of
:class:`~airplay.bridge.vehicle_endpoint.VehicleEndpoint`.
"""

from __future__ import annotations

import math

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay import frames
from airplay.bridge.estimator_watch import POS_HORIZ_ABS, POS_HORIZ_REL, PRED_POS_HORIZ_ABS, VELOCITY_HORIZ
from airplay.bridge.modes import custom_mode_of
from airplay.bridge.vehicle_flavours import EARTH_RADIUS_M, HOME_AMSL_M, HOME_LAT_DEG, HOME_LON_DEG

DEFAULT_RATES_HZ = {"LOCAL_POSITION_NED": 50.0, "ATTITUDE_QUATERNION": 50.0, "ATTITUDE": 10.0,
                     "GLOBAL_POSITION_INT": 5.0, "SYS_STATUS": 1.0, "BATTERY_STATUS": 1.0, "HEARTBEAT": 1.0,
                     "GPS_RAW_INT": 1.0, "EXTENDED_SYS_STATE": 2.0}
ARDUPILOT_RATES_HZ = {"EKF_STATUS_REPORT": 2.0}
PX4_RATES_HZ = {"ESTIMATOR_STATUS": 2.0}
DRIFT_ACCEL_M_S2 = 0.4
"""After a GPS loss, the reported position drifts north from the truth as 0.5 * this * t^2 (m)."""
EPH_M = 0.3
"""PX4's ESTIMATOR_STATUS horizontal accuracy with GPS, m (PX4 SIH on the ground: 0.2-0.3 m)."""

_SENSORS = (mavlink.MAV_SYS_STATUS_SENSOR_3D_GYRO | mavlink.MAV_SYS_STATUS_SENSOR_3D_ACCEL
            | mavlink.MAV_SYS_STATUS_SENSOR_3D_MAG | mavlink.MAV_SYS_STATUS_SENSOR_ABSOLUTE_PRESSURE
            | mavlink.MAV_SYS_STATUS_SENSOR_BATTERY)
_NEEDS_READY = mavlink.MAV_SYS_STATUS_SENSOR_GPS | mavlink.MAV_SYS_STATUS_AHRS | mavlink.MAV_SYS_STATUS_PREARM_CHECK
# ArduPilot's EKF_STATUS_FLAGS (ardupilotmega) and PX4's ESTIMATOR_STATUS_FLAGS (common) share these bits;
# PX4 SIH flying with GPS sends 0x37f
_READY_FLAGS = 1 | 2 | 4 | 8 | 16 | 32 | 64 | 256 | 512   # attitude, velocity, positions (rel, abs, agl, pred)
_BOOT_FLAGS = 1 | 128                                      # attitude, constant position mode


class TelemetrySending:
    """What the vehicle sends, when (:meth:`send_telemetry` once per control period)."""

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
        lost_s = self.gps_lost_s
        if lost_s is not None:  # dead reckoning: the estimate drifts north
            p_ned = p_ned + np.array([0.5 * DRIFT_ACCEL_M_S2 * lost_s ** 2, 0.0, 0.0])
            v_ned = v_ned + np.array([DRIFT_ACCEL_M_S2 * lost_s, 0.0, 0.0])
        q_ned = frames.quat_enu_flu_xyzw_to_ned_frd_wxyz(v.quat_xyzw[0])
        rates = frames.flu_to_frd(v.angular_velocity_body[0])
        ready = self.ready
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
            roll, pitch, yaw = frames.euler_zyx_from_quat_wxyz(q_ned)
            mav.attitude_send(t_ms, roll, pitch, yaw, *(float(r) for r in rates))
        lat = HOME_LAT_DEG + math.degrees(p_ned[0] / EARTH_RADIUS_M)
        lon = HOME_LON_DEG + math.degrees(p_ned[1] / (EARTH_RADIUS_M * math.cos(math.radians(HOME_LAT_DEG))))
        rel_m = float(v.position[0][2]) - self.ground_z
        if self._due("GLOBAL_POSITION_INT"):
            heading = int(round(math.degrees(frames.yaw_enu_to_ned(self.yaw)) % 360 * 100))
            mav.global_position_int_send(t_ms, int(lat * 1e7), int(lon * 1e7), int((HOME_AMSL_M + rel_m) * 1000),
                                         int(rel_m * 1000), *(int(round(c * 100)) for c in v_ned), heading)
        if self._due("GPS_RAW_INT"):
            ground_speed = math.hypot(v_ned[0], v_ned[1])
            cog = int(round(math.degrees(math.atan2(v_ned[1], v_ned[0])) % 360 * 100)) if ground_speed > 0.2 else 65535
            if ready and lost_s is None:
                mav.gps_raw_int_send(int(self.clock_s * 1e6), mavlink.GPS_FIX_TYPE_3D_FIX, int(lat * 1e7),
                                     int(lon * 1e7), int((HOME_AMSL_M + rel_m) * 1000), 80, 120,
                                     int(round(ground_speed * 100)), cog, 10)
            else:
                mav.gps_raw_int_send(int(self.clock_s * 1e6), mavlink.GPS_FIX_TYPE_NO_FIX, 0, 0, 0, 65535, 65535,
                                     65535, 65535, 0)
        remaining = max(0.0, 1.0 - self.flight_s / self.battery_flight_s)
        voltage_mv = int(1000 * (14.0 + 2.8 * remaining))  # 4S pack
        current_ca = 1500 if self.in_air else 50
        if self._due("SYS_STATUS"):
            present = _SENSORS | _NEEDS_READY
            health = _SENSORS | (_NEEDS_READY if ready else 0)
            mav.sys_status_send(present, present, health, 100, voltage_mv, current_ca, int(round(100 * remaining)),
                                0, 0, 0, 0, 0, 0)
        if self._due("BATTERY_STATUS"):
            mav.battery_status_send(0, mavlink.MAV_BATTERY_FUNCTION_ALL, mavlink.MAV_BATTERY_TYPE_LIPO, 2500,
                                    [voltage_mv // 4] * 4 + [65535] * 6, current_ca, -1, -1,
                                    int(round(100 * remaining)))
        if self._due("EXTENDED_SYS_STATE"):
            mav.extended_sys_state_send(mavlink.MAV_VTOL_STATE_UNDEFINED, mavlink.MAV_LANDED_STATE_IN_AIR
                                        if self.in_air else mavlink.MAV_LANDED_STATE_ON_GROUND)
        if "EKF_STATUS_REPORT" in self.rates_hz and self._due("EKF_STATUS_REPORT"):
            from pymavlink.dialects.v20 import ardupilotmega

            var = 0.02 if ready else 1.0
            flags = _READY_FLAGS if ready else _BOOT_FLAGS
            pos_var = var
            if lost_s is not None:
                flags &= ~(POS_HORIZ_ABS | PRED_POS_HORIZ_ABS)
                pos_var = min(5.0, 0.02 + 0.5 * lost_s)
            mav.send(ardupilotmega.MAVLink_ekf_status_report_message(flags, var, pos_var, var, var, 0.0, 0.0))
        if "ESTIMATOR_STATUS" in self.rates_hz and self._due("ESTIMATOR_STATUS"):
            flags = _READY_FLAGS if ready else _BOOT_FLAGS
            eph = EPH_M if ready else 999.0
            if lost_s is not None:
                eph = EPH_M + 0.4 * lost_s
                if lost_s >= 5.0:
                    flags &= ~(POS_HORIZ_ABS | POS_HORIZ_REL | PRED_POS_HORIZ_ABS | VELOCITY_HORIZ)
            mav.estimator_status_send(int(self.clock_s * 1e6), flags, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, eph, 0.3)
