"""The rehearsal vehicle's flight behaviour: what it flies in each mode, its failsafes, touchdown.

Per control period the mode's behaviour gives a heading-frame command ``[vx forward, vy left,
vz up m/s, yaw_rate rad/s CCW]`` for :class:`airplay.sim.dynamics.QuadrotorBatch`: take-off,
hold (a P law to a map ENU point), offboard (the newest setpoint; ArduPilot's GUID_TIMEOUT),
land (straight down at ``land_speed_m_s``), return (climb, fly home, land); PX4's offboard
loss and ArduPilot's GCS failsafe; the ground is the plane z = ``ground_z`` (map, m). A mixin
of :class:`~airplay.bridge.vehicle_endpoint.VehicleEndpoint`.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay import frames
from airplay.bridge.vehicle_flavours import FS_GCS_LAND, LAND_MODE, PX4_OFFBOARD_LOSS_MODE, READY_TEXT, RTL_MODE

log = logging.getLogger("airplay.vehicle")

# Position setpoints: P laws and their limits.
POSITION_MAX_XY_M_S = 2.0
POSITION_MAX_Z_M_S = 1.0
YAW_GAIN_PER_S = 2.0
YAW_MAX_RATE_RAD_S = 0.8


class FlightBehaviour:
    """The vehicle's modes flown, its failsafes and :meth:`step`."""

    def _failsafes(self) -> None:
        """PX4's offboard loss and ArduPilot's GCS failsafe (armed only)."""
        age = self.clock_s - self.setpoint_s
        if self.flavour == "px4" and self.behaviour == "offboard" and age > self.offboard_loss_s:
            action = int(self.param("COM_OBL_RC_ACT"))
            mode = PX4_OFFBOARD_LOSS_MODE[action]
            what = {"AUTO.LAND": "Land", "AUTO.RTL": "Return", "AUTO.LOITER": "Hold"}[mode]
            self.stats["failsafes"] += 1
            log.warning("offboard setpoints lost for %.2f s (> COM_OF_LOSS_T %.2f s): COM_OBL_RC_ACT %d -> %s",
                        age, self.offboard_loss_s, action, mode)
            self.statustext(f"Failsafe activated: no offboard, {what}", mavlink.MAV_SEVERITY_CRITICAL)
            self._set_mode(mode, "offboard loss failsafe")
        if self.flavour == "ardupilot" and self.param("FS_GCS_ENABLE") > 0 and self.gcs_heartbeat_s is not None \
                and not self.gcs_failsafe \
                and self.clock_s - self.gcs_heartbeat_s > self.param("FS_GCS_TIMEOUT"):
            self.gcs_failsafe = True
            self.stats["failsafes"] += 1
            log.warning("no HEARTBEAT from system %d for %.2f s (> FS_GCS_TIMEOUT %.2f s): GCS failsafe",
                        int(self.param("MAV_GCS_SYSID")), self.clock_s - self.gcs_heartbeat_s,
                        self.param("FS_GCS_TIMEOUT"))
            self.statustext("GCS Failsafe", mavlink.MAV_SEVERITY_CRITICAL)
            if not self.in_air:
                self._touch_down(disarm=True)
            elif self.behaviour not in ("land", "rtl"):
                action = int(self.param("FS_GCS_ENABLE"))
                self._set_mode(LAND_MODE["ardupilot"] if action in FS_GCS_LAND else RTL_MODE["ardupilot"],
                               "GCS failsafe")

    # -- flying ------------------------------------------------------------------------------
    def _hold_command(self, target: np.ndarray, max_xy: float = 2.0, max_z: float = 1.0) -> np.ndarray:
        """Heading-frame command flying to ``target`` (map ENU m) with a P law, no yaw."""
        err = target - self.position
        v = 1.2 * err
        sxy = math.hypot(v[0], v[1])
        if sxy > max_xy:
            v[:2] *= max_xy / sxy
        v[2] = float(np.clip(v[2], -max_z, max_z))
        return np.r_[frames.map_to_heading(v, self.yaw), 0.0]

    def _position_command(self) -> np.ndarray:
        """Fly to and hold the position setpoint, turning to its yaw."""
        cmd = self._hold_command(self.position_target, POSITION_MAX_XY_M_S, POSITION_MAX_Z_M_S)
        if self.yaw_target is not None:
            err = frames.wrap_angle(self.yaw_target - self.yaw)
            cmd[3] = float(np.clip(YAW_GAIN_PER_S * err, -YAW_MAX_RATE_RAD_S, YAW_MAX_RATE_RAD_S))
        self.hold_point = self.position.copy()
        return cmd

    def _land_command(self) -> np.ndarray:
        cmd = self._hold_command(np.r_[self.hold_point[:2], self.position[2]])
        cmd[2] = -self.land_speed_m_s
        return cmd

    def _rtl_command(self) -> np.ndarray:
        p = self.position
        if self.rtl_stage == "climb":
            if p[2] < self.rtl_z - 0.1:
                return self._hold_command(np.r_[self.hold_point[:2], self.rtl_z], max_z=1.5)
            self.rtl_stage = "return"
        if self.rtl_stage == "return":
            target = np.r_[self.home[:2], self.rtl_z]
            if math.hypot(*(target[:2] - p[:2])) > 0.2 or np.linalg.norm(self.vehicle.velocity[0][:2]) > 0.2:
                return self._hold_command(target)
            self.rtl_stage = "land"
            self.hold_point = np.r_[self.home[:2], p[2]]
            log.info("RTL: above home, landing")
        return self._land_command()

    def _command_now(self) -> np.ndarray:
        b = self.behaviour
        age = self.clock_s - self.setpoint_s
        if self.takeoff_z is not None and b in ("takeoff", "offboard"):
            target = np.r_[self.hold_point[:2], self.takeoff_z]
            if self._takeoff_reached():
                log.info("takeoff complete at z=%.2f m", self.position[2])
                self.takeoff_z = None
                self.hold_point = self.position.copy()
                if self.flavour == "px4":
                    self._set_mode("AUTO.LOITER", "takeoff complete")
            return self._hold_command(target, max_z=1.5)
        if b == "offboard":
            if self.position_target is not None:  # held for ever in GUIDED; PX4's offboard loss watches the age
                return self._position_command()
            if self.setpoint is None or (self.flavour == "ardupilot" and age > self.param("GUID_TIMEOUT")):
                return self._stop_and_hold()
            self.hold_point = self.position.copy()
            return self.setpoint.copy()
        if b == "land":
            return self._land_command()
        if b == "rtl":
            return self._rtl_command()
        return self._hold_command(self.hold_point)

    def _takeoff_reached(self) -> bool:
        """Within 5 cm of the take-off's height; PX4 (in AUTO.TAKEOFF) already NAV_MC_ALT_RAD below
        it, or half the take-off's height below it where that is less, as PX4 calls a multicopter
        take-off reached (then holds where it is, in AUTO.LOITER)."""
        z, target = self.position[2], self.takeoff_z
        if self.flavour == "px4" and self.behaviour == "takeoff":
            radius = min(self.param("NAV_MC_ALT_RAD"), (target - self.ground_z) / 2.0)
            return z >= target - radius
        return abs(z - target) < 0.05

    def _stop_and_hold(self) -> np.ndarray:
        """ArduPilot's GUIDED without a fresh velocity setpoint: brake, then hold where it stopped."""
        if not self.guided_stopped:
            self.guided_stopped = True
            if self.setpoint is not None:
                log.info("GUIDED: velocity setpoint older than GUID_TIMEOUT %.1f s: stopping",
                         self.param("GUID_TIMEOUT"))
        if np.linalg.norm(self.vehicle.velocity[0]) > 0.2:
            self.hold_point = self.position.copy()
            return np.zeros(4)
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
        if self.ready and not self._ready_said:
            self._ready_said = True
            if self.ready_after_s > 0:
                self.statustext(READY_TEXT[self.flavour], mavlink.MAV_SEVERITY_INFO)
        if not self.armed:
            self.clock_s += self.dt_s
            return
        self._failsafes()
        if not self.armed:  # the GCS failsafe disarmed it on the ground
            self.clock_s += self.dt_s
            return
        cmd = self._command_now()
        landing = self.behaviour == "land" or (self.behaviour == "rtl" and self.rtl_stage == "land")
        if not self.in_air and landing:
            self._touch_down(disarm=True)  # armed on the ground in a landing mode: the land detector disarms
            self.clock_s += self.dt_s
            return
        if not self.in_air and cmd[2] <= 0.0:
            self.clock_s += self.dt_s  # armed on the ground, not climbing: stays put
            return
        self.in_air = True
        self.vehicle.step(cmd[None, :])
        self.clock_s += self.dt_s
        self.flight_s += self.dt_s
        if self.position[2] <= self.ground_z:
            self._touch_down(disarm=self.behaviour in ("land", "rtl"))
