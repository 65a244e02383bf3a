"""Autopilot flavours and flight modes: PX4's main/sub custom modes and ArduCopter's mode numbers,
their names, and MAV_CMD_DO_SET_MODE's parameters; airplay's mode names per flavour. No rclpy."""

from __future__ import annotations

from pymavlink.dialects.v20 import common as mavlink

# PX4 custom modes: custom_mode = main << 16 | sub << 24 (px4_custom_mode.h).
PX4_MAIN = {"MANUAL": 1, "ALTCTL": 2, "POSCTL": 3, "AUTO": 4, "ACRO": 5, "OFFBOARD": 6, "STABILIZED": 7}
PX4_AUTO_SUB = {"READY": 1, "TAKEOFF": 2, "LOITER": 3, "MISSION": 4, "RTL": 5, "LAND": 6}
# ArduCopter flight mode numbers (ArduCopter/mode.h).
ARDUCOPTER_MODES = {"STABILIZE": 0, "ACRO": 1, "ALT_HOLD": 2, "AUTO": 3, "GUIDED": 4, "LOITER": 5, "RTL": 6,
                    "CIRCLE": 7, "LAND": 9, "POSHOLD": 16, "BRAKE": 17}

FLAVOURS = ("px4", "ardupilot")
#: airplay's mode names -> the flavour's mode: what ``set_mode("offboard")`` etc. ask for.
MODE_NAMES = {
    "px4": {"offboard": "OFFBOARD", "hold": "AUTO.LOITER", "land": "AUTO.LAND", "position": "POSCTL"},
    "ardupilot": {"offboard": "GUIDED", "hold": "BRAKE", "land": "LAND", "position": "LOITER"},
}


def flavour_of_autopilot(autopilot: int) -> str | None:
    """HEARTBEAT.autopilot -> "px4", "ardupilot", or None (not an autopilot we fly)."""
    return {mavlink.MAV_AUTOPILOT_PX4: "px4", mavlink.MAV_AUTOPILOT_ARDUPILOTMEGA: "ardupilot"}.get(autopilot)


def px4_custom_mode(name: str) -> int:
    """PX4 mode name (``OFFBOARD``, ``POSCTL``, ``AUTO.LOITER``, ...) -> HEARTBEAT custom_mode."""
    main, _, sub = name.partition(".")
    if main not in PX4_MAIN or (sub and (main != "AUTO" or sub not in PX4_AUTO_SUB)):
        raise ValueError(f"unknown PX4 mode {name!r}")
    return (PX4_MAIN[main] << 16) | ((PX4_AUTO_SUB[sub] if sub else 0) << 24)


def px4_mode_name(custom_mode: int) -> str:
    """HEARTBEAT custom_mode of PX4 -> ``OFFBOARD``, ``AUTO.LOITER``, ... (``UNKNOWN(n)`` otherwise)."""
    main, sub = (custom_mode >> 16) & 0xFF, (custom_mode >> 24) & 0xFF
    main_name = next((k for k, v in PX4_MAIN.items() if v == main), None)
    if main_name is None:
        return f"UNKNOWN({custom_mode})"
    if main_name == "AUTO":
        sub_name = next((k for k, v in PX4_AUTO_SUB.items() if v == sub), f"UNKNOWN({sub})")
        return f"AUTO.{sub_name}"
    return main_name


def mode_name(flavour: str, custom_mode: int) -> str:
    """The flavour's name of a HEARTBEAT custom_mode."""
    if flavour == "px4":
        return px4_mode_name(custom_mode)
    return next((k for k, v in ARDUCOPTER_MODES.items() if v == custom_mode), f"UNKNOWN({custom_mode})")


def custom_mode_of(flavour: str, name: str) -> int:
    """The flavour's HEARTBEAT custom_mode of a mode name."""
    if flavour == "px4":
        return px4_custom_mode(name)
    if name not in ARDUCOPTER_MODES:
        raise ValueError(f"unknown ArduCopter mode {name!r}")
    return ARDUCOPTER_MODES[name]


def do_set_mode_params(flavour: str, name: str) -> tuple[float, float, float]:
    """(param1 base_mode, param2, param3) of MAV_CMD_DO_SET_MODE for mode ``name``: PX4 takes the
    main and sub mode, ArduPilot the mode number."""
    base = float(mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED)
    if flavour == "px4":
        custom = px4_custom_mode(name)
        return base, float((custom >> 16) & 0xFF), float((custom >> 24) & 0xFF)
    return base, float(custom_mode_of(flavour, name)), 0.0


def mode_from_do_set_mode(flavour: str, param2: float, param3: float) -> int:
    """Inverse of :func:`do_set_mode_params`: the custom_mode asked for (vehicle side)."""
    if flavour == "px4":
        return (int(param2) << 16) | (int(param3) << 24)
    return int(param2)
