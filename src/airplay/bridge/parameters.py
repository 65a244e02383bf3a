"""The ``mavlink_bridge`` node's parameters, described once: name, default, meaning.

The node declares exactly these (read-only: ``ros2 param set`` cannot bypass their checks), and
the fly graph (:mod:`airplay.graph`) accepts each as a launch argument of the same name, so
``airplay launch fly`` and ``ros2 launch airplay fly.launch.py`` take every bridge setting.
:func:`flight_settings` turns the values into the bridge's configuration and is the one place
that checks them; its errors name the parameter. No rclpy here (DESIGN.md section 1).

Units: metres, seconds, m/s; fences and the origin in the map frame (ENU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class BridgeParameter:
    """One parameter: its default (its type is the parameter's type) and a one-line description."""

    default: bool | int | float | str
    description: str


_P = BridgeParameter

BRIDGE_PARAMETERS: dict[str, BridgeParameter] = {
    "connection": _P("udp:127.0.0.1:14540", "MAVLink connection: udp:/udpin:HOST:PORT (listen), udpout:HOST:PORT, "
                                            "tcp:HOST:PORT, or serial:DEVICE:BAUD"),
    "peer": _P("", "udp listen: the autopilot's address HOST:PORT (empty: pinned at its first HEARTBEAT)"),
    "system_id": _P(1, "the bridge's MAVLink system id (ArduPilot: MAV_GCS_SYSID for its GCS failsafe)"),
    "component_id": _P(191, "the bridge's MAVLink component id (191: onboard computer)"),
    "target_system": _P(0, "the autopilot's system id (0: the first autopilot heard)"),
    "arm": _P(False, "arm and fly once the checks pass, without waiting (rehearsals, tests); false: wait for the "
                     "lifecycle's activate transition or the arm service"),
    "takeoff_height_m": _P(1.5, "take-off height above the start, m"),
    "flight_time_s": _P(0.0, "land after this long under the policy, s (0: on land, estop or the policy's stop)"),
    "setpoint_warmup_s": _P(0.5, "setpoints streamed before asking for OFFBOARD, s"),
    "ack_timeout_s": _P(1.0, "wait for each COMMAND_ACK, s (3 sends)"),
    "heartbeat_wait_s": _P(30.0, "wait for the autopilot's first HEARTBEAT, s"),
    "ready_timeout_s": _P(90.0, "pre-arm checks, and arming retries after the request, each at most this long, s"),
    "takeoff_timeout_s": _P(30.0, "the take-off must reach its height within this, s"),
    "landing_timeout_s": _P(60.0, "the vehicle must disarm within this after the landing command, s"),
    "shutdown_timeout_s": _P(20.0, "Ctrl-C / SIGTERM while airborne: land and wait this long for the touchdown, s"),
    "link_lost_timeout_s": _P(30.0, "no autopilot heartbeat for this long: give up (its failsafe is in charge), s"),
    "link_return": _P("land", "when the autopilot's heartbeat returns after a loss: land, or resume the flight"),
    "on_failure": _P("land", "an airborne failure (take-off timeout, OFFBOARD refused): land, or hold (the "
                             "autopilot's hold mode; the pilot takes over)"),
    "control_rate_hz": _P(50.0, "setpoints per second (> 2: PX4 leaves OFFBOARD below 2 Hz)"),
    "command_timeout_s": _P(0.5, "supervisor watchdog: hold when the newest cmd_vel is older than this, s"),
    "heartbeat_timeout_s": _P(1.5, "the autopilot's link counts as lost after this long without any of its "
                                   "messages (HEARTBEAT, telemetry), s"),
    "fence_box": _P("", "geofence x_min,y_min,x_max,y_max in map metres (empty: none)"),
    "fence_polygon": _P("", "geofence polygon x,y;x,y;x,y... in map metres (empty: none; not with fence_box)"),
    "fence_z_min": _P(math.nan, "geofence floor, map z metres (nan: none)"),
    "fence_z_max": _P(math.nan, "geofence ceiling, map z metres (nan: none)"),
    "fence_margin_m": _P(0.5, "stand-off from the fence: the vehicle brakes to stop this far inside, m"),
    "fence_brake_accel_m_s2": _P(1.5, "deceleration the geofence plans its braking with, m/s^2"),
    "fence_response_s": _P(0.7, "the vehicle's velocity-response lag the geofence allows for (distance flown "
                                "before braking begins), s"),
    "geofence_hold_s": _P(2.0, "outside the fence: hold this long, then land, s"),
    "autopilot_fence": _P(False, "also install the fence (polygon/box, ceiling) in the autopilot as its own hard "
                                 "limit before arming, read it back, restore the previous one after the flight"),
    "autopilot_fence_action": _P("land", "what the autopilot does when its own fence is breached: land, or hold "
                                         "(PX4 re-asserts its hold while breached: the bridge cannot land it)"),
    "autopilot_fence_margin_m": _P(1.0, "the autopilot's fence lies this far outside the bridge's (it judges by its "
                                        "global position, which can differ from the local estimate), m"),
    "landing_speed_m_s": _P(0.5, "descent speed when landing by velocity setpoints, m/s"),
    "origin_x": _P(0.0, "map x of the autopilot's local origin (where it booted), m"),
    "origin_y": _P(0.0, "map y of the autopilot's local origin, m"),
    "origin_z": _P(0.0, "map z of the autopilot's local origin, m"),
    "scene_dir": _P("", "scene of a rehearsal: episode/status is published for the renderer"),
    "index": _P(0, "task index of a rehearsal (with scene_dir)"),
    "exit_when_landed": _P(True, "the node exits when the flight has ended (landed, holding or failed)"),
    "land_on_policy_stop": _P(True, "land when the policy reports its stop on episode/policy"),
}
"""Every parameter of the ``mavlink_bridge`` node, in order."""

FLY_GRAPH_SETS = ("scene_dir", "index", "exit_when_landed", "land_on_policy_stop")
"""Bridge parameters the fly graph sets itself (from scene:= and index:=), not launch arguments."""


class BridgeParameterError(ValueError):
    """A bridge parameter with a value the bridge cannot use; the message names it."""


def coerce(name: str, value):
    """``value`` as the type of parameter ``name``'s default (ints accepted for floats; strings
    "true"/"false"/numbers from launch arguments parsed); BridgeParameterError naming it otherwise."""
    default = BRIDGE_PARAMETERS[name].default
    kind = type(default)
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool:
            if text not in ("true", "false", "1", "0"):
                raise BridgeParameterError(f"parameter '{name}' must be true or false, got {value!r}")
            return text in ("true", "1")
        try:
            return kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise BridgeParameterError(f"parameter '{name}' must be {what}, got {value!r}") from None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is str:
        return str(value)
    if type(value) is not kind:
        raise BridgeParameterError(f"parameter '{name}' must be {kind.__name__}, got {value!r}")
    return value


def _fence_box(text: str):
    if not text.strip():
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4:
        raise BridgeParameterError(f"parameter 'fence_box' must be 'x_min,y_min,x_max,y_max' (map metres), "
                                   f"got {text!r}")
    return values


def _fence_polygon(text: str):
    if not text.strip():
        return None
    try:
        points = tuple(tuple(float(v) for v in point.split(",")) for point in text.split(";") if point.strip())
    except ValueError:
        points = ()
    if len(points) < 3 or any(len(p) != 2 for p in points):
        raise BridgeParameterError(f"parameter 'fence_polygon' must be at least 3 points 'x,y;x,y;x,y...' "
                                   f"(map metres), got {text!r}")
    return points


def _optional(value: float):
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class FlightSettings:
    """Everything the bridge node needs, checked: the flight config and the link's settings."""

    flight: object            # airplay.bridge.flight.FlightConfig
    connection: str
    peer: str | None
    system_id: int
    component_id: int
    target_system: int | None
    origin_enu: tuple[float, float, float]
    control_rate_hz: float


def flight_settings(values: dict) -> FlightSettings:
    """Check the parameter ``values`` (name -> value; missing names take their defaults) and build
    the bridge's settings; BridgeParameterError naming the parameter when one is wrong."""
    from airplay.bridge.flight import default_flight_config

    unknown = sorted(set(values) - set(BRIDGE_PARAMETERS))
    if unknown:
        raise BridgeParameterError(f"unknown bridge parameter(s): {', '.join(unknown)}")
    p = {name: coerce(name, values.get(name, spec.default)) for name, spec in BRIDGE_PARAMETERS.items()}
    if not (p["control_rate_hz"] > 2.0 and math.isfinite(p["control_rate_hz"])):
        raise BridgeParameterError(f"parameter 'control_rate_hz' must be > 2 (PX4 drops OFFBOARD below 2 Hz), "
                                   f"got {p['control_rate_hz']!r}")
    for name in ("system_id", "component_id"):
        if not 1 <= p[name] <= 255:
            raise BridgeParameterError(f"parameter '{name}' must be an integer 1..255, got {p[name]!r}")
    if not 0 <= p["target_system"] <= 255:
        raise BridgeParameterError(f"parameter 'target_system' must be 0..255, got {p['target_system']!r}")
    for name in ("origin_x", "origin_y", "origin_z"):
        if not math.isfinite(p[name]):
            raise BridgeParameterError(f"parameter '{name}' must be a finite number, got {p[name]!r}")
    flight_names = ("takeoff_height_m", "flight_time_s", "setpoint_warmup_s", "ack_timeout_s", "heartbeat_wait_s",
                    "ready_timeout_s", "takeoff_timeout_s", "landing_timeout_s", "shutdown_timeout_s",
                    "link_lost_timeout_s", "link_return", "on_failure", "autopilot_fence", "autopilot_fence_action",
                    "autopilot_fence_margin_m")
    supervisor_names = ("command_timeout_s", "heartbeat_timeout_s", "fence_margin_m", "fence_brake_accel_m_s2",
                        "fence_response_s", "geofence_hold_s", "landing_speed_m_s")
    overrides = {name: p[name] for name in flight_names + supervisor_names}
    overrides.update(fence_box_xy_m=_fence_box(p["fence_box"]), fence_polygon_xy_m=_fence_polygon(p["fence_polygon"]),
                     fence_z_min_m=_optional(p["fence_z_min"]), fence_z_max_m=_optional(p["fence_z_max"]),
                     control_period_s=1.0 / p["control_rate_hz"])
    try:
        config = default_flight_config(**overrides)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        for name in BRIDGE_PARAMETERS:  # FlightConfig.x / SupervisorConfig.x_m -> the parameter's name
            if f"Config.{name} " in message or f"Config.{name}_m " in message or f"Config.{name}_xy_m " in message:
                message = f"parameter '{name}': {message}"
                break
        raise BridgeParameterError(message) from None
    sup = config.supervisor
    if p["autopilot_fence"] and sup.fence_box_xy_m is None and sup.fence_polygon_xy_m is None \
            and sup.fence_z_max_m is None:
        raise BridgeParameterError("parameter 'autopilot_fence' is true but there is no fence to install: set "
                                   "fence_box, fence_polygon or fence_z_max")
    if p["peer"]:
        host, _, port = p["peer"].rpartition(":")
        if not host or not port.isdigit():
            raise BridgeParameterError(f"parameter 'peer' must be HOST:PORT, got {p['peer']!r}")
    return FlightSettings(config, p["connection"], p["peer"] or None, p["system_id"], p["component_id"],
                          p["target_system"] or None, (p["origin_x"], p["origin_y"], p["origin_z"]),
                          p["control_rate_hz"])
