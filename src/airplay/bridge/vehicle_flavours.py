"""The rehearsal vehicle's PX4 and ArduCopter behaviours as tables: modes, refusals, parameters.

Which modes each flavour flies and what each does (hold, take-off, land, return, offboard),
which need a position estimate, how a refusal is answered and worded (as PX4 v1.17 and
ArduCopter 4.8 SITL answer), the failsafe actions, and the autopilot parameters the vehicle
models (:data:`AUTOPILOT_PARAMS`, in the autopilots' own units). The simulated GPS home is PX4
SITL's default (degrees, metres AMSL). Used by :mod:`airplay.bridge.vehicle_endpoint`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pymavlink.dialects.v20 import common as mavlink

from airplay.bridge.modes import FLAVOURS

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
        "NAV_MC_ALT_RAD": (0.8, "m: altitude acceptance radius (read by the bridge to judge PX4's end of a take-off)"),
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
BEHAVIOUR = {
    "px4": {"POSCTL": "hold", "ALTCTL": "hold", "AUTO.LOITER": "hold", "AUTO.TAKEOFF": "takeoff",
            "AUTO.LAND": "land", "AUTO.RTL": "rtl", "OFFBOARD": "offboard"},
    "ardupilot": {"STABILIZE": "hold", "ALT_HOLD": "hold", "LOITER": "hold", "POSHOLD": "hold", "BRAKE": "hold",
                  "GUIDED": "offboard", "LAND": "land", "RTL": "rtl"},
}
INITIAL_MODE = {"px4": "POSCTL", "ardupilot": "STABILIZE"}
LAND_MODE = {"px4": "AUTO.LAND", "ardupilot": "LAND"}
RTL_MODE = {"px4": "AUTO.RTL", "ardupilot": "RTL"}
# Modes that need a position estimate (refused before the vehicle is ready).
NEEDS_POSITION = {"px4": {"POSCTL", "AUTO.LOITER", "AUTO.TAKEOFF", "AUTO.RTL", "OFFBOARD"},
                   "ardupilot": {"GUIDED", "LOITER", "POSHOLD", "BRAKE", "RTL"}}
# How each flavour refuses an arming request (PX4 Commander: TRANSITION_DENIED -> TEMPORARILY_REJECTED;
# ArduPilot GCS_MAVLINK: arm() false -> FAILED), and a mode change.
REFUSED = {"px4": mavlink.MAV_RESULT_TEMPORARILY_REJECTED, "ardupilot": mavlink.MAV_RESULT_FAILED}
NOT_READY_TEXT = {"px4": "Preflight Fail: ekf2 missing data", "ardupilot": "PreArm: Need Position Estimate"}
READY_TEXT = {"px4": "Ready for takeoff!", "ardupilot": "EKF3 IMU0 is using GPS"}
# COM_OBL_RC_ACT -> the mode PX4 ends up in without RC.
PX4_OFFBOARD_LOSS_MODE = {0: "AUTO.LAND", 1: "AUTO.LAND", 2: "AUTO.LAND", 3: "AUTO.RTL", 4: "AUTO.LAND",
                           5: "AUTO.LOITER"}
FS_GCS_LAND = {4, 5, 7}   # FS_GCS_ENABLE values that land; the others (1, 2, 3, 6) return


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
    check("NAV_MC_ALT_RAD", v.get("NAV_MC_ALT_RAD", 1) > 0, "> 0 m")
    check("RTL_RETURN_ALT", v.get("RTL_RETURN_ALT", 0) >= 0, ">= 0 m")
    check("GUID_TIMEOUT", v.get("GUID_TIMEOUT", 1) > 0, "> 0 s")
    check("FS_GCS_ENABLE", integer.get("FS_GCS_ENABLE") and 0 <= v.get("FS_GCS_ENABLE", 0) <= 7, "0..7")
    check("FS_GCS_TIMEOUT", v.get("FS_GCS_TIMEOUT", 1) > 0, "> 0 s")
    check("MAV_GCS_SYSID", integer.get("MAV_GCS_SYSID") and 1 <= v.get("MAV_GCS_SYSID", 1) <= 255, "1..255")
    check("RTL_ALT", v.get("RTL_ALT", 0) >= 0, ">= 0 cm")
    return values
