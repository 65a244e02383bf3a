"""A MAVLink vehicle backed by airplay's own flight model: rehearse a flight on a laptop
(``airplay vehicle``), and the autopilot the bridge tests fly against.

It speaks MAVLink 2 as a PX4 or an ArduCopter autopilot (``flavour``) would, for the parts the
bridge uses, and fails the way they fail (measured against PX4 v1.17 SITL and ArduCopter 4.8
SITL):

* HEARTBEAT at 1 Hz (MAV_TYPE_QUADROTOR; autopilot PX4 or ARDUPILOTMEGA; armed flag; the
  flavour's custom_mode), LOCAL_POSITION_NED and ATTITUDE_QUATERNION at 50 Hz, ATTITUDE at
  10 Hz, GLOBAL_POSITION_INT at 5 Hz, SYS_STATUS, BATTERY_STATUS and GPS_RAW_INT at 1 Hz,
  and (ArduPilot) EKF_STATUS_REPORT at 2 Hz (an ardupilotmega-dialect message, id 193: a
  common-dialect parser sees an unknown id); rates can be changed with
  MAV_CMD_SET_MESSAGE_INTERVAL;
* COMMAND_LONG answered with COMMAND_ACK: COMPONENT_ARM_DISARM (on the ground only, unless
  forced with 21196), NAV_TAKEOFF (PX4: param7 AMSL, NaN = MIS_TAKEOFF_ALT; ArduPilot:
  param7 relative, in GUIDED only), NAV_LAND, DO_SET_MODE, SET_MESSAGE_INTERVAL; anything else
  MAV_RESULT_UNSUPPORTED; the SET_MODE message too. Every refused arm, disarm, mode change or
  take-off comes with a STATUSTEXT giving the reason, as the real autopilots send one;
* SET_POSITION_TARGET_LOCAL_NED setpoints, flown in OFFBOARD (PX4) or GUIDED (ArduPilot):
  velocity + yaw rate (MAV_FRAME_BODY_NED or LOCAL_NED; type_mask
  :data:`~airplay.bridge.frames.TYPE_MASK_VELOCITY_YAW_RATE`), and position + yaw
  (MAV_FRAME_LOCAL_NED, type_mask :data:`~airplay.bridge.frames.TYPE_MASK_POSITION_YAW`:
  x north, y east, z down, metres from the local origin, which is the map origin here; yaw rad
  clockwise from north): the vehicle flies to the point with a P law (at most 2 m/s
  horizontally, 1 m/s vertically), turns to the yaw with a P law (at most 0.8 rad/s), and
  holds both. Both kinds keep PX4's offboard stream alive; in GUIDED a position target is held
  for ever and only velocity setpoints time out (GUID_TIMEOUT), as on ArduCopter. A setpoint in
  GUIDED ends an ArduPilot take-off still under way.

Start-up (``ready_after_s``, vehicle time since boot): until the estimator is "ready" arming
is refused - PX4 answers TEMPORARILY_REJECTED with STATUSTEXT "Preflight Fail: ekf2 missing
data", ArduPilot answers FAILED with "PreArm: Need Position Estimate" (a forced arm, param2
21196, skips the checks as on both autopilots) - and modes that need a position (OFFBOARD,
POSCTL, AUTO.LOITER/TAKEOFF/RTL; GUIDED, LOITER, POSHOLD, BRAKE, RTL) are refused. SYS_STATUS
reports the pre-arm check bit (MAV_SYS_STATUS_PREARM_CHECK) present and enabled, healthy
only once ready; GPS_RAW_INT has fix_type 3 (10 satellites) once ready, 1 before; ArduPilot's
EKF_STATUS_REPORT sets the attitude, velocity and position flags once ready. The default, 0 s,
is ready at once; both SITLs take several seconds after boot, which ``--ready-after`` rehearses.

Autopilot parameters (``autopilot_params``, by the real autopilots' names; see
:data:`AUTOPILOT_PARAMS` for the defaults):

* PX4, offboard loss: OFFBOARD is refused (TEMPORARILY_REJECTED) unless a setpoint arrived
  within COM_OF_LOSS_T; in OFFBOARD, when no setpoint came for COM_OF_LOSS_T (PX4 SITL: left
  OFFBOARD 1.7-1.9 s after the companion died, with COM_OF_LOSS_T = 1 s) the vehicle does
  COM_OBL_RC_ACT and says "Failsafe activated: no offboard, ..." in a STATUSTEXT. The vehicle
  has no RC (a companion flight with COM_RCL_EXCEPT = 4), so 0 Position, 1 Altitude and 2
  Manual all become a landing, as on the real PX4 (which drifted ~1.1 m while descending; the
  model lands straight down); 3 Return (AUTO.RTL), 4 Land (AUTO.LAND), 5 Hold (AUTO.LOITER).
  The default is PX4's, 0: land, and disarm on touchdown.
* ArduPilot, GUIDED: velocity setpoints older than GUID_TIMEOUT make the vehicle stop and hold
  (a position target is held for ever); GCS failsafe: with FS_GCS_ENABLE set, once HEARTBEATs
  from system MAV_GCS_SYSID (matched by system id only, any component, as ArduPilot does) have
  been seen and then stop for FS_GCS_TIMEOUT while armed, STATUSTEXT "GCS Failsafe" and the
  action: 5 (and 4, 7) LAND, 1 (and 2, 3, 6) RTL; on the ground it disarms; in LAND or RTL it
  carries on; "GCS Failsafe Cleared" when they come back. ArduCopter SITL with FS_GCS_ENABLE =
  5 and MAV_GCS_SYSID = the bridge's system id said "GCS Failsafe" 5.3 s after the companion
  was killed, landed and disarmed. (ArduPilot's FS_GCS_TIMEOUT is at least 2 s; the model takes
  any value > 0, but one near the 1 s between HEARTBEATs trips while they still come.)
* Return (PX4 AUTO.RTL, ArduPilot RTL), a simple model: climb to RTL_RETURN_ALT m (PX4) or
  RTL_ALT cm (ArduPilot) above home unless higher already, fly to above home (the arming
  point), land there and disarm.

Landing (AUTO.LAND, LAND) descends at ``land_speed_m_s`` holding x, y and disarms on
touchdown; armed on the ground in a landing mode disarms at once.

Frames: the vehicle's local NED origin is the map origin, so the bridge's ``odom`` is in the
map frame of the scene the vehicle was placed in (``start``). Dynamics:
:class:`airplay.sim.dynamics.QuadrotorBatch` stepped at its control rate in wall-clock time;
the ground is the plane z = ``start[2]``.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay import frames
from airplay.bridge import frames as mav_frames
from airplay.bridge.mavlink_transport import MavlinkLink
from airplay.bridge.modes import ARDUCOPTER_MODES, FLAVOURS, custom_mode_of, mode_name

log = logging.getLogger("airplay.vehicle")

HOME_LAT_DEG, HOME_LON_DEG, HOME_AMSL_M = 47.397742, 8.545594, 488.0  # PX4 SITL's default home
EARTH_RADIUS_M = 6378137.0
FORCE_MAGIC = 21196

#: The autopilot parameters the vehicle models, per flavour: name -> (default, meaning). Values
#: are given in the autopilot's own units (ArduPilot's RTL_ALT in cm).
AUTOPILOT_PARAMS = {
    "px4": {
        "COM_OF_LOSS_T": (1.0, ("s without a setpoint before the offboard-loss failsafe; OFFBOARD needs a "
                                "setpoint this recent")),
        "COM_OBL_RC_ACT": (0, ("offboard-loss action: 0 Position, 1 Altitude, 2 Manual (without RC all three "
                               "land), 3 Return, 4 Land, 5 Hold")),
        "MIS_TAKEOFF_ALT": (2.5, "m above home: NAV_TAKEOFF with param7 NaN"),
        "RTL_RETURN_ALT": (60.0, "m above home: the return altitude of AUTO.RTL"),
    },
    "ardupilot": {
        "GUID_TIMEOUT": (3.0, "s: GUIDED stops and holds when the velocity setpoint is older"),
        "FS_GCS_ENABLE": (0, "GCS failsafe: 0 off, 5 (and 4, 7) LAND, 1 (and 2, 3, 6) RTL"),
        "FS_GCS_TIMEOUT": (5.0, "s without a HEARTBEAT from MAV_GCS_SYSID before the GCS failsafe"),
        "MAV_GCS_SYSID": (255, "the system id whose HEARTBEATs the GCS failsafe watches"),
        "RTL_ALT": (1500.0, "cm above home: the return altitude of RTL"),
    },
}

# Modes the endpoint flies, per flavour, and what each does.
_BEHAVIOUR = {
    "px4": {"POSCTL": "hold", "ALTCTL": "hold", "AUTO.LOITER": "hold", "AUTO.TAKEOFF": "takeoff",
            "AUTO.LAND": "land", "AUTO.RTL": "rtl", "OFFBOARD": "offboard"},
    "ardupilot": {"STABILIZE": "hold", "ALT_HOLD": "hold", "LOITER": "hold", "POSHOLD": "hold", "BRAKE": "hold",
                  "GUIDED": "offboard", "LAND": "land", "RTL": "rtl"},
}
_INITIAL_MODE = {"px4": "POSCTL", "ardupilot": "STABILIZE"}
_LAND_MODE = {"px4": "AUTO.LAND", "ardupilot": "LAND"}
_RTL_MODE = {"px4": "AUTO.RTL", "ardupilot": "RTL"}
# Modes that need a position estimate (refused before the vehicle is ready).
_NEEDS_POSITION = {"px4": {"POSCTL", "AUTO.LOITER", "AUTO.TAKEOFF", "AUTO.RTL", "OFFBOARD"},
                   "ardupilot": {"GUIDED", "LOITER", "POSHOLD", "BRAKE", "RTL"}}
# How each flavour refuses an arming request (PX4 Commander: TRANSITION_DENIED -> TEMPORARILY_REJECTED;
# ArduPilot GCS_MAVLINK: arm() false -> FAILED), and a mode change.
_REFUSED = {"px4": mavlink.MAV_RESULT_TEMPORARILY_REJECTED, "ardupilot": mavlink.MAV_RESULT_FAILED}
_NOT_READY_TEXT = {"px4": "Preflight Fail: ekf2 missing data", "ardupilot": "PreArm: Need Position Estimate"}
_READY_TEXT = {"px4": "Ready for takeoff!", "ardupilot": "EKF3 IMU0 is using GPS"}
# COM_OBL_RC_ACT -> the mode PX4 ends up in without RC.
_PX4_OFFBOARD_LOSS_MODE = {0: "AUTO.LAND", 1: "AUTO.LAND", 2: "AUTO.LAND", 3: "AUTO.RTL", 4: "AUTO.LAND",
                           5: "AUTO.LOITER"}
_FS_GCS_LAND = {4, 5, 7}   # FS_GCS_ENABLE values that land; the others (1, 2, 3, 6) return

_DEFAULT_RATES_HZ = {"LOCAL_POSITION_NED": 50.0, "ATTITUDE_QUATERNION": 50.0, "ATTITUDE": 10.0,
                     "GLOBAL_POSITION_INT": 5.0, "SYS_STATUS": 1.0, "BATTERY_STATUS": 1.0, "HEARTBEAT": 1.0,
                     "GPS_RAW_INT": 1.0}
_ARDUPILOT_RATES_HZ = {"EKF_STATUS_REPORT": 2.0}

# Position setpoints: P laws and their limits.
POSITION_MAX_XY_M_S = 2.0
POSITION_MAX_Z_M_S = 1.0
YAW_GAIN_PER_S = 2.0
YAW_MAX_RATE_RAD_S = 0.8

_IGNORE_POSITION, _IGNORE_VELOCITY, _IGNORE_ACCEL = 1 | 2 | 4, 8 | 16 | 32, 64 | 128 | 256
_IGNORE_YAW, _IGNORE_YAW_RATE = 1024, 2048

_SENSORS = (mavlink.MAV_SYS_STATUS_SENSOR_3D_GYRO | mavlink.MAV_SYS_STATUS_SENSOR_3D_ACCEL
            | mavlink.MAV_SYS_STATUS_SENSOR_3D_MAG | mavlink.MAV_SYS_STATUS_SENSOR_ABSOLUTE_PRESSURE
            | mavlink.MAV_SYS_STATUS_SENSOR_BATTERY)
_NEEDS_READY = mavlink.MAV_SYS_STATUS_SENSOR_GPS | mavlink.MAV_SYS_STATUS_AHRS | mavlink.MAV_SYS_STATUS_PREARM_CHECK
# ardupilotmega EKF_STATUS_FLAGS (not in the common dialect)
_EKF_READY_FLAGS = 1 | 2 | 4 | 8 | 16 | 32 | 64 | 256 | 512   # attitude, velocity, positions (rel, abs, agl, pred)
_EKF_BOOT_FLAGS = 1 | 128                                      # attitude, constant position mode


def autopilot_param_values(flavour: str, given: Mapping[str, float] | None = None) -> dict[str, float]:
    """The flavour's defaults (:data:`AUTOPILOT_PARAMS`) overridden by ``given`` (names in any
    case); ValueError for a name the flavour does not model or a value out of range."""
    if flavour not in AUTOPILOT_PARAMS:
        raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
    table = AUTOPILOT_PARAMS[flavour]
    values = {name: float(default) for name, (default, _) in table.items()}
    for name, value in (given or {}).items():
        key = str(name).upper()
        if key not in table:
            other = next((f for f, t in AUTOPILOT_PARAMS.items() if key in t), None)
            hint = f" ({key} is a {other} parameter)" if other else ""
            raise ValueError(f"parameter {name!r} is not one the {flavour} vehicle models{hint}; "
                             f"it models {', '.join(table)}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise ValueError(f"parameter {key} must be a finite number, got {value!r}")
        values[key] = number

    def check(key: str, ok: bool, what: str) -> None:
        if key in values and not ok:
            raise ValueError(f"parameter {key} must be {what}, got {values[key]:g}")

    v = values
    integer = {k: float(v[k]).is_integer() for k in v}
    check("COM_OF_LOSS_T", v.get("COM_OF_LOSS_T", 1) > 0, "> 0 s")
    check("COM_OBL_RC_ACT", integer.get("COM_OBL_RC_ACT") and 0 <= v.get("COM_OBL_RC_ACT", 0) <= 5,
          "0..5 (6 Terminate and 7 Disarm are not modelled)")
    check("MIS_TAKEOFF_ALT", v.get("MIS_TAKEOFF_ALT", 1) > 0.1, "> 0.1 m")
    check("RTL_RETURN_ALT", v.get("RTL_RETURN_ALT", 0) >= 0, ">= 0 m")
    check("GUID_TIMEOUT", v.get("GUID_TIMEOUT", 1) > 0, "> 0 s")
    check("FS_GCS_ENABLE", integer.get("FS_GCS_ENABLE") and 0 <= v.get("FS_GCS_ENABLE", 0) <= 7, "0..7")
    check("FS_GCS_TIMEOUT", v.get("FS_GCS_TIMEOUT", 1) > 0, "> 0 s")
    check("MAV_GCS_SYSID", integer.get("MAV_GCS_SYSID") and 1 <= v.get("MAV_GCS_SYSID", 1) <= 255, "1..255")
    check("RTL_ALT", v.get("RTL_ALT", 0) >= 0, ">= 0 cm")
    return values


class VehicleEndpoint:
    """One simulated multirotor behind a MAVLink link; call :meth:`run` (or :meth:`tick`).

    url: where to talk (``udp:HOST:PORT`` sends to HOST:PORT, like PX4 SITL to its offboard
    port; see :class:`~airplay.bridge.mavlink_transport.MavlinkLink`). params: the dynamics
    (:func:`airplay.sim.dynamics.load_vehicle_params`). start: (x, y, z, yaw) in map ENU
    metres/rad, on the ground. autopilot_params: autopilot parameters by name
    (:data:`AUTOPILOT_PARAMS` of the flavour; the rest keep their defaults). offboard_loss_s:
    PX4's COM_OF_LOSS_T in seconds, a shorthand (None: from ``autopilot_params``). ready_after_s:
    vehicle seconds from boot until the estimator is ready (arming and position modes refused
    before). land_speed_m_s: descent speed of the landing modes. battery_flight_s: seconds of
    flight that empty the battery.
    """

    def __init__(self, url: str, flavour: str = "px4", params=None, start=(0.0, 0.0, 0.0, 0.0),
                 system: int = 1, component: int = 1, offboard_loss_s: float | None = None,
                 land_speed_m_s: float = 0.7, battery_flight_s: float = 900.0,
                 autopilot_params: Mapping[str, float] | None = None, ready_after_s: float = 0.0) -> None:
        from airplay.sim.dynamics import QuadrotorBatch, load_vehicle_params

        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {', '.join(FLAVOURS)}, got {flavour!r}")
        given = dict(autopilot_params or {})
        if offboard_loss_s is not None:
            if flavour != "px4":
                raise ValueError("offboard_loss_s is PX4's COM_OF_LOSS_T; the ardupilot vehicle has GUID_TIMEOUT")
            named = {k.upper(): v for k, v in given.items()}.get("COM_OF_LOSS_T")
            if named is not None and float(named) != float(offboard_loss_s):
                raise ValueError(f"offboard loss given twice: {offboard_loss_s:g} s and COM_OF_LOSS_T={named}")
            given["COM_OF_LOSS_T"] = offboard_loss_s
        self.autopilot_params = autopilot_param_values(flavour, given)
        if not (math.isfinite(ready_after_s) and ready_after_s >= 0):
            raise ValueError(f"ready_after_s must be >= 0 s, got {ready_after_s}")
        self.ready_after_s = float(ready_after_s)
        self.flavour = flavour
        self.params = params if params is not None else load_vehicle_params()
        self.dt_s = self.params.control_dt_s
        self.vehicle = QuadrotorBatch(self.params, 1)
        # Compile (or load from numba's cache) the dynamics kernels now, before the first HEARTBEAT:
        # a first step that compiles would freeze the vehicle for seconds at take-off, which its
        # companion rightly takes for a lost link.
        self.vehicle.step(np.zeros((1, 4)))
        self.start = np.asarray(start, np.float64).reshape(4)
        self.ground_z = float(self.start[2])
        self.vehicle.reset(self.start[None, :3], self.start[3:4])
        if url.startswith("udp:"):
            url = "udpout:" + url[4:]  # the vehicle sends to the given address, as PX4 SITL does
        self.link = MavlinkLink(url, system, component)
        self.land_speed_m_s = land_speed_m_s
        self.battery_flight_s = battery_flight_s
        self.armed = False
        self.in_air = False
        self.mode = _INITIAL_MODE[flavour]
        self.home = self.position.copy()             # map ENU m; set again at arming, as the autopilots do
        self.hold_point = self.position.copy()
        self.takeoff_z: float | None = None
        self.setpoint: np.ndarray | None = None      # heading-frame command of the newest velocity setpoint
        self.position_target: np.ndarray | None = None  # map ENU m of the newest position setpoint
        self.yaw_target: float | None = None         # its yaw, map ENU rad (None: hold the heading)
        self.setpoint_s = -math.inf                  # when the newest setpoint (either kind) arrived (vehicle clock)
        self.rtl_stage = "climb"                     # climb, return, land
        self.rtl_z = self.ground_z
        self.gcs_heartbeat_s: float | None = None    # ArduPilot: last HEARTBEAT from MAV_GCS_SYSID (vehicle clock)
        self.gcs_failsafe = False
        self.guided_stopped = False
        self._ready_said = False
        self.statustexts: deque = deque(maxlen=200)  # (vehicle clock s, severity, text), the newest sent
        self.default_rates_hz = dict(_DEFAULT_RATES_HZ, **(_ARDUPILOT_RATES_HZ if flavour == "ardupilot" else {}))
        self.rates_hz = dict(self.default_rates_hz)
        self._next_send = {name: 0.0 for name in self.rates_hz}
        self.clock_s = 0.0                           # vehicle time since boot
        self.flight_s = 0.0
        self.stats = {"setpoints": 0, "position_setpoints": 0, "ignored_setpoints": 0, "commands": 0,
                      "offboard_refused": 0, "refusals": 0, "failsafes": 0}

    # -- state --------------------------------------------------------------------------------
    @property
    def position(self) -> np.ndarray:
        """Map ENU, m."""
        return self.vehicle.position[0].copy()

    @property
    def yaw(self) -> float:
        """Map ENU, rad counter-clockwise from east."""
        return float(self.vehicle.yaw[0])

    @property
    def behaviour(self) -> str:
        return _BEHAVIOUR[self.flavour].get(self.mode, "hold")

    @property
    def ready(self) -> bool:
        """The estimator is ready (``ready_after_s`` of vehicle time have passed since boot)."""
        return self.clock_s + 1e-9 >= self.ready_after_s

    @property
    def offboard_loss_s(self) -> float:
        """PX4 COM_OF_LOSS_T, s."""
        return self.autopilot_params.get("COM_OF_LOSS_T", math.inf)

    def param(self, name: str) -> float:
        return self.autopilot_params[name]

    def _set_mode(self, mode: str, why: str = "") -> None:
        if mode != self.mode:
            log.info("mode %s -> %s%s", self.mode, mode, f" ({why})" if why else "")
            behaviour = _BEHAVIOUR[self.flavour].get(mode)
            if behaviour in ("hold", "land", "rtl") or mode == "GUIDED":
                self.hold_point = self.position.copy()
            if behaviour != "takeoff" and mode != "GUIDED":  # leaving the take-off (ArduPilot's is in GUIDED)
                self.takeoff_z = None
            if behaviour == "rtl":
                alt_m = self.param("RTL_RETURN_ALT") if self.flavour == "px4" else self.param("RTL_ALT") / 100.0
                self.rtl_z = max(float(self.position[2]), float(self.home[2]) + alt_m)
                self.rtl_stage = "climb" if self.in_air else "land"
            if mode == "GUIDED":  # ArduPilot's GUIDED starts by holding where it is; earlier setpoints are gone
                self.setpoint, self.position_target, self.yaw_target = None, None, None
                self.setpoint_s = -math.inf
            self.guided_stopped = False
            self._next_send["HEARTBEAT"] = self.clock_s  # tell the world now, not at the next 1 Hz beat
        self.mode = mode

    def _refuse(self, result: int, text: str, severity: int = mavlink.MAV_SEVERITY_CRITICAL) -> int:
        """Count a refusal, say why in a STATUSTEXT, return ``result`` (a MAV_RESULT)."""
        self.stats["refusals"] += 1
        self.statustext(text, severity)
        return result

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
        elif kind == "HEARTBEAT" and self.flavour == "ardupilot" \
                and msg.get_srcSystem() == int(self.param("MAV_GCS_SYSID")):
            self.gcs_heartbeat_s = self.clock_s
            if self.gcs_failsafe:
                self.gcs_failsafe = False
                self.statustext("GCS Failsafe Cleared", mavlink.MAV_SEVERITY_INFO)

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
        if mode not in _BEHAVIOUR[self.flavour]:
            return self._refuse(mavlink.MAV_RESULT_UNSUPPORTED, f"Mode {mode} not supported")
        if mode == self.mode:
            return mavlink.MAV_RESULT_ACCEPTED
        if mode in _NEEDS_POSITION[self.flavour] and not self.ready:
            text = (f"Switching to {mode} is currently not possible" if self.flavour == "px4"
                    else f"Mode change to {mode} failed: requires position")
            return self._refuse(_REFUSED[self.flavour], text)
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
            return self._refuse(_REFUSED[self.flavour], _NOT_READY_TEXT[self.flavour])
        if not forced and self.behaviour not in ("hold", "offboard"):
            text = "Arming denied: not possible in this mode" if self.flavour == "px4" else "Arm: Mode not armable"
            return self._refuse(_REFUSED[self.flavour], text)
        self.armed = True
        self._next_send["HEARTBEAT"] = self.clock_s
        self.home = self.position.copy()
        self.hold_point = self.position.copy()
        log.info("armed%s", " (forced)" if forced else "")
        return mavlink.MAV_RESULT_ACCEPTED

    def _disarm(self, msg) -> int:
        if self.in_air and int(round(msg.param2)) != FORCE_MAGIC:
            text = "Disarming denied: not landed" if self.flavour == "px4" else "Disarm: not landed"
            return self._refuse(_REFUSED[self.flavour], text)
        if self.in_air:
            self._touch_down(disarm=True)
        self.armed = False
        self._next_send["HEARTBEAT"] = self.clock_s
        log.info("disarmed")
        return mavlink.MAV_RESULT_ACCEPTED

    def _command(self, msg) -> int:
        c = msg.command
        if c == mavlink.MAV_CMD_COMPONENT_ARM_DISARM:
            return self._arm(msg) if msg.param1 >= 0.5 else self._disarm(msg)
        if c == mavlink.MAV_CMD_NAV_TAKEOFF:
            if not self.armed:
                return self._refuse(_REFUSED[self.flavour], "Takeoff denied: disarmed" if self.flavour == "px4"
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
        if c == mavlink.MAV_CMD_NAV_LAND:
            self.takeoff_z = None
            self._set_mode(_LAND_MODE[self.flavour], "land command")
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

    def statustext(self, text: str, severity: int = mavlink.MAV_SEVERITY_WARNING) -> None:
        """Send a STATUSTEXT (at most 50 characters), log it and keep it in :attr:`statustexts`."""
        text = text[:50]
        self.statustexts.append((self.clock_s, severity, text))
        log.log(logging.WARNING if severity <= mavlink.MAV_SEVERITY_WARNING else logging.INFO, "STATUSTEXT: %s", text)
        self.link.mav.statustext_send(severity, text.encode())

    # -- failsafes ---------------------------------------------------------------------------
    def _failsafes(self) -> None:
        """PX4's offboard loss and ArduPilot's GCS failsafe (armed only)."""
        age = self.clock_s - self.setpoint_s
        if self.flavour == "px4" and self.behaviour == "offboard" and age > self.offboard_loss_s:
            action = int(self.param("COM_OBL_RC_ACT"))
            mode = _PX4_OFFBOARD_LOSS_MODE[action]
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
                self._set_mode(_LAND_MODE["ardupilot"] if action in _FS_GCS_LAND else _RTL_MODE["ardupilot"],
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
            if abs(self.position[2] - self.takeoff_z) < 0.05:
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
                self.statustext(_READY_TEXT[self.flavour], mavlink.MAV_SEVERITY_INFO)
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
            if ready:
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
        if "EKF_STATUS_REPORT" in self.rates_hz and self._due("EKF_STATUS_REPORT"):
            from pymavlink.dialects.v20 import ardupilotmega

            var = 0.02 if ready else 1.0
            mav.send(ardupilotmega.MAVLink_ekf_status_report_message(
                _EKF_READY_FLAGS if ready else _EKF_BOOT_FLAGS, var, var, var, var, 0.0, 0.0))

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
