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
  param7 relative, in GUIDED only; PX4 calls it reached NAV_MC_ALT_RAD short, as PX4 does, and
  holds there), DO_REPOSITION (PX4, in the air: a new altitude in Hold), NAV_LAND, DO_SET_MODE,
  SET_MESSAGE_INTERVAL; anything else
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

GPS loss (``gps_loss_after_s``, seconds of flight): from then on GPS_RAW_INT says no fix and the
estimate dead-reckons: the position it reports (LOCAL_POSITION_NED, GLOBAL_POSITION_INT) drifts
from the true one at :data:`~airplay.bridge.vehicle_telemetry.DRIFT_ACCEL_M_S2` (north), PX4's
ESTIMATOR_STATUS ``pos_horiz_accuracy`` grows from 0.3 m by 0.4 m/s and its flags drop the
horizontal position after 5 s (PX4 SIH with its GPS stopped: fix lost after ~1 s, the
accuracy 0.3 -> 2 m in 5 s, the position dropped after ~5.5 s); ArduPilot's EKF_STATUS_REPORT
drops the absolute position and its position test ratio rises past 1. The vehicle flies on
the truth (its modes and landing are unchanged): only what it reports is wrong.

Autopilot parameters (``autopilot_params``, by the real autopilots' names; see
:data:`~airplay.bridge.vehicle_flavours.AUTOPILOT_PARAMS` for the defaults):

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

The parts: this module holds the vehicle's state, modes and run loop;
:mod:`airplay.bridge.vehicle_flavours` the PX4 and ArduCopter tables and parameters;
:mod:`airplay.bridge.vehicle_commands` the commands and setpoints it receives;
:mod:`airplay.bridge.vehicle_flying` what it flies in each mode and its failsafes;
:mod:`airplay.bridge.vehicle_telemetry` what it sends.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Mapping

import numpy as np
from pymavlink.dialects.v20 import common as mavlink

from airplay.bridge.mavlink_transport import MavlinkLink
from airplay.bridge.modes import FLAVOURS
from airplay.bridge.vehicle_commands import CommandHandling
from airplay.bridge.vehicle_flavours import BEHAVIOUR, INITIAL_MODE, autopilot_param_values
from airplay.bridge.vehicle_flying import FlightBehaviour
from airplay.bridge.vehicle_telemetry import ARDUPILOT_RATES_HZ, DEFAULT_RATES_HZ, PX4_RATES_HZ, TelemetrySending

log = logging.getLogger("airplay.vehicle")


class VehicleEndpoint(CommandHandling, FlightBehaviour, TelemetrySending):
    """One simulated multirotor behind a MAVLink link; call :meth:`run` (or :meth:`tick`).

    url: where to talk (``udp:HOST:PORT`` sends to HOST:PORT, like PX4 SITL to its offboard
    port; see :class:`~airplay.bridge.mavlink_transport.MavlinkLink`). params: the dynamics
    (:func:`airplay.sim.dynamics.load_vehicle_params`). start: (x, y, z, yaw) in map ENU
    metres/rad, on the ground. autopilot_params: autopilot parameters by name
    (:data:`~airplay.bridge.vehicle_flavours.AUTOPILOT_PARAMS` of the flavour; the rest keep their
    defaults). offboard_loss_s: PX4's COM_OF_LOSS_T in seconds, a shorthand (None: from
    ``autopilot_params``). ready_after_s: vehicle seconds from boot until the estimator is ready
    (arming and position modes refused before). land_speed_m_s: descent speed of the landing
    modes. battery_flight_s: seconds of flight that empty the battery. gps_loss_after_s: seconds of
    flight after which the GPS is lost (None: never; the module docstring says what follows).
    """

    def __init__(self, url: str, flavour: str = "px4", params=None, start=(0.0, 0.0, 0.0, 0.0),
                 system: int = 1, component: int = 1, offboard_loss_s: float | None = None,
                 land_speed_m_s: float = 0.7, battery_flight_s: float = 900.0,
                 autopilot_params: Mapping[str, float] | None = None, ready_after_s: float = 0.0,
                 gps_loss_after_s: float | None = None) -> None:
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
        if gps_loss_after_s is not None and not (math.isfinite(gps_loss_after_s) and gps_loss_after_s >= 0):
            raise ValueError(f"gps_loss_after_s must be >= 0 s of flight, got {gps_loss_after_s}")
        self.gps_loss_after_s = gps_loss_after_s
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
        self.mode = INITIAL_MODE[flavour]
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
        self.default_rates_hz = dict(DEFAULT_RATES_HZ, **(ARDUPILOT_RATES_HZ if flavour == "ardupilot" else PX4_RATES_HZ))
        self.rates_hz = dict(self.default_rates_hz)
        self._next_send = {name: 0.0 for name in self.rates_hz}
        self.clock_s = 0.0                           # vehicle time since boot
        self.flight_s = 0.0
        self.stats = {"setpoints": 0, "position_setpoints": 0, "ignored_setpoints": 0, "commands": 0,
                      "offboard_refused": 0, "refusals": 0, "failsafes": 0}

    # -- state --------------------------------------------------------------------------------
    @property
    def gps_lost_s(self) -> float | None:
        """Seconds since the GPS was lost (None: it was not)."""
        if self.gps_loss_after_s is None or self.flight_s < self.gps_loss_after_s:
            return None
        return self.flight_s - self.gps_loss_after_s

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
        return BEHAVIOUR[self.flavour].get(self.mode, "hold")

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
            behaviour = BEHAVIOUR[self.flavour].get(mode)
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
