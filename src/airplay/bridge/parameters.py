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

from airplay.node_params import NodeSchema, Param, ParamError

_P = Param

BRIDGE_SCHEMA = NodeSchema("mavlink_bridge", (
    _P("connection", "udp:127.0.0.1:14540", "MAVLink connection: udp:/udpin:HOST:PORT (listen), udpout:HOST:PORT, "
                                            "tcp:HOST:PORT, or serial:DEVICE:BAUD"),
    _P("peer", "", "udp listen: the autopilot's address HOST:PORT (empty: pinned at its first HEARTBEAT)"),
    _P("system_id", 1, "the bridge's MAVLink system id (ArduPilot: MAV_GCS_SYSID for its GCS failsafe)",
       min=1, max=255),
    _P("component_id", 191, "the bridge's MAVLink component id (191: onboard computer)", min=1, max=255),
    _P("target_system", 0, "the autopilot's system id (0: the first autopilot heard)", min=0, max=255),
    _P("arm", False, "arm and fly once the checks pass, without waiting (rehearsals, tests); false: wait for the "
                     "lifecycle's activate transition or the arm service"),
    _P("takeoff_height_m", math.nan, "take-off height above the ground, m (nan: the task's start height above "
                                      "ground_z with scene_dir, else 1.5)"),
    _P("flight_time_s", 0.0, "land after this long under the policy, s (0: on land, estop or the policy's stop)"),
    _P("setpoint_warmup_s", 0.5, "setpoints streamed before asking for OFFBOARD, s"),
    _P("ack_timeout_s", 1.0, "wait for each COMMAND_ACK, s (3 sends)"),
    _P("heartbeat_wait_s", 30.0, "wait for the autopilot's first HEARTBEAT, s"),
    _P("ready_timeout_s", 90.0, "pre-arm checks, and arming retries after the request, each at most this long, s"),
    _P("takeoff_timeout_s", 30.0, "the take-off must reach its height within this, s"),
    _P("landing_timeout_s", 60.0, "the vehicle must disarm within this after the landing command, s"),
    _P("shutdown_timeout_s", 20.0, "Ctrl-C / SIGTERM while airborne: land and wait this long for the touchdown, s"),
    _P("link_lost_timeout_s", 30.0, "no autopilot heartbeat for this long: give up (its failsafe is in charge), s"),
    _P("link_return", "land", "when the autopilot's heartbeat returns after a loss: land, or resume the flight"),
    _P("on_failure", "land", "an airborne failure (take-off timeout, OFFBOARD refused): land, or hold (the "
                             "autopilot's hold mode; the pilot takes over)"),
    _P("control_rate_hz", 50.0, "setpoints per second (> 2: PX4 leaves OFFBOARD below 2 Hz)", unit="Hz",
       above=2.0, finite=True),
    _P("command_timeout_s", 0.5, "supervisor watchdog: hold when the newest cmd_vel is older than this, s"),
    _P("heartbeat_timeout_s", 1.5, "the autopilot's link counts as lost after this long without any of its "
                                   "messages (HEARTBEAT, telemetry), s"),
    _P("command_accel_limit", "autopilot", "who limits the commanded acceleration: autopilot (its own limits, as "
                                            "in airplay's simulator, where the policies learned) or supervisor "
                                            "(the bridge slew-limits each command to config/vehicle.yaml's "
                                            "max_accel_*)", choices=("autopilot", "supervisor")),
    _P("fence_box", "", "geofence x_min,y_min,x_max,y_max in map metres (empty: none)"),
    _P("fence_polygon", "", "geofence polygon x,y;x,y;x,y... in map metres (empty: none; not with fence_box)"),
    _P("fence_z_min", math.nan, "geofence floor, map z metres (nan: none)"),
    _P("fence_z_max", math.nan, "geofence ceiling, map z metres (nan: none)"),
    _P("fence_margin_m", 0.5, "stand-off from the fence: the vehicle brakes to stop this far inside, m"),
    _P("fence_brake_accel_m_s2", 1.5, "deceleration the geofence plans its braking with, m/s^2"),
    _P("fence_response_s", 0.7, "the vehicle's velocity-response lag the geofence allows for (distance flown "
                                "before braking begins), s"),
    _P("fence_margin_per_eph", 2.0, "the fence's stand-off is at least this many times the autopilot's reported "
                                    "horizontal uncertainty (PX4 ESTIMATOR_STATUS pos_horiz_accuracy; 0: fixed)",
       min=0.0),
    _P("max_eph_m", 1.0, "the autopilot's horizontal uncertainty above which the bridge refuses, or ends, "
                         "offboard control (the autopilot lands), m"),
    _P("ekf_variance_max", 0.8, "ArduPilot EKF_STATUS_REPORT test ratio above which the estimate is not flown on "
                                "(ArduPilot's own FS_EKF_THRESH is 0.8)"),
    _P("position_jump_m", 1.0, "a step of the position estimate this far beyond its velocity (a reset, a glitch "
                               "taken in) ends offboard control, m"),
    _P("position_stale_s", 1.0, "no position estimate for this long while the autopilot's other messages come "
                                "ends offboard control, s"),
    _P("geofence_hold_s", 2.0, "outside the fence: hold this long, then land, s"),
    _P("autopilot_fence", False, "also install the fence (polygon/box, ceiling) in the autopilot as its own hard "
                                 "limit before arming, read it back, restore the previous one after the flight"),
    _P("autopilot_fence_action", "land", "what the autopilot does when its own fence is breached: land, or hold "
                                         "(PX4 re-asserts its hold while breached: the bridge cannot land it)"),
    _P("autopilot_fence_margin_m", 1.0, "the autopilot's polygon lies this far outside the bridge's (it judges by "
                                        "its global position, which can differ from the local estimate), m"),
    _P("autopilot_ceiling_margin_m", 4.0, "the autopilot's ceiling lies this far above the bridge's fence_z_max (it "
                                          "measures altitude from its home, which PX4 SIH moved by up to 3.1 m in "
                                          "flight), m"),
    _P("landing_speed_m_s", 0.5, "descent speed when landing by velocity setpoints, m/s"),
    _P("map_tie", "auto", "how the scene's map frame is tied to the autopilot's local frame: task_start (the "
                          "vehicle's pose when ready is the task's start on the ground, facing its heading), origin "
                          "(origin_x/y/z/yaw_deg), auto (task_start with scene_dir, else origin)",
       choices=("auto", "task_start", "origin")),
    _P("origin_x", 0.0, "map_tie origin: map x of the autopilot's local origin (where it booted), m", unit="m",
       finite=True),
    _P("origin_y", 0.0, "map_tie origin: map y of the autopilot's local origin, m", unit="m", finite=True),
    _P("origin_z", 0.0, "map_tie origin: map z of the autopilot's local origin, m", unit="m", finite=True),
    _P("origin_yaw_deg", 0.0, "map_tie origin: map angle of the local frame's east axis, deg CCW from map x",
       unit="deg", finite=True),
    _P("ground_z", 0.0, "map z of the ground under the task's start, m (scenes have their floor at z = 0)",
       unit="m", finite=True),
    _P("positioning_timeout_s", 30.0, "with a task: the vehicle must settle at the task's start pose within this "
                                      "after the take-off, before the policy flies, s"),
    _P("end_hold_s", 2.0, "with a task: at the mission's end (success, timeout, the policy's stop, out of bounds) "
                          "hold this long, then end_action, s"),
    _P("end_action", "land", "with a task: after the end's hold, land, or hold until the operator lands",
       choices=("land", "hold")),
    _P("scene_dir", "", "scene of the task flown: its start pose, goal and end rules (and a rehearsal's camera)"),
    _P("index", 0, "task index in the scene (with scene_dir)"),
    _P("episodes", 10, "tasks sampled in the scene, as sim_eval samples them (index picks one)", min=1),
    _P("seed", 0, "task sampling seed, as sim_eval's"),
    _P("setting", "pointgoal", "task setting of scene_dir's tasks"),
    _P("vln_config", "", "setting vln: the VLN configuration (as the policy node's)"),
    _P("vln_episodes", "", "setting vln: the VLN episodes file (as the policy node's)"),
    _P("exit_when_landed", True, "the node exits when the flight has ended (landed, holding or failed)"),
    _P("land_on_policy_stop", True, "land when the policy reports its stop on episode/policy"),
))
"""Every parameter of the ``mavlink_bridge`` node, in order (all read-only)."""

FLY_GRAPH_SETS = ("scene_dir", "index", "episodes", "seed", "setting", "vln_config", "vln_episodes",
                  "exit_when_landed", "land_on_policy_stop")
"""Bridge parameters the fly graph sets itself (from scene:=, index:= and its task arguments), not
launch arguments of their own."""


class BridgeParameterError(ParamError):
    """A bridge parameter with a value the bridge cannot use; the message names it."""


def coerce(name: str, value):
    """``value`` as the type of parameter ``name`` (ints accepted for floats; strings
    "true"/"false"/numbers from launch arguments parsed); BridgeParameterError naming it otherwise."""
    try:
        return BRIDGE_SCHEMA[name].coerce(value)
    except ParamError as exc:
        raise BridgeParameterError(str(exc)) from None


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

    flight: object            # airplay.bridge.flight_config.FlightConfig
    takeoff_from_task: bool   # takeoff_height_m was not given: the task's start height (1.5 m without a task)
    connection: str
    peer: str | None
    system_id: int
    component_id: int
    target_system: int | None
    origin_enu: tuple[float, float, float]
    origin_yaw_rad: float
    control_rate_hz: float
    ground_z: float


def flight_settings(values: dict) -> FlightSettings:
    """Check the parameter ``values`` (name -> value; missing names take their defaults) and build
    the bridge's settings; BridgeParameterError naming the parameter when one is wrong."""
    from airplay.bridge.flight_config import default_flight_config

    try:
        p = BRIDGE_SCHEMA.check(values, parse=True)
    except ParamError as exc:
        raise BridgeParameterError(str(exc)) from None
    takeoff_from_task = math.isnan(p["takeoff_height_m"])
    if takeoff_from_task:
        p = {**p, "takeoff_height_m": 1.5}
    map_tie = p["map_tie"] if p["map_tie"] != "auto" else ("task_start" if p["scene_dir"] else "origin")
    if map_tie == "task_start" and not p["scene_dir"]:
        raise BridgeParameterError("parameter 'map_tie' is task_start but there is no task: set scene_dir "
                                   "(scene:= in the fly graph) and index")
    flight_names = ("takeoff_height_m", "flight_time_s", "setpoint_warmup_s", "ack_timeout_s", "heartbeat_wait_s",
                    "ready_timeout_s", "takeoff_timeout_s", "landing_timeout_s", "shutdown_timeout_s",
                    "link_lost_timeout_s", "link_return", "on_failure", "autopilot_fence", "autopilot_fence_action",
                    "autopilot_fence_margin_m", "autopilot_ceiling_margin_m", "positioning_timeout_s", "end_hold_s",
                    "end_action", "max_eph_m", "ekf_variance_max", "position_jump_m", "position_stale_s")
    supervisor_names = ("command_timeout_s", "heartbeat_timeout_s", "fence_margin_m", "fence_margin_per_eph",
                        "fence_brake_accel_m_s2",
                        "fence_response_s", "geofence_hold_s", "landing_speed_m_s")
    overrides = {name: p[name] for name in flight_names + supervisor_names}
    overrides["map_tie"] = map_tie
    overrides["limit_command_accel"] = p["command_accel_limit"] == "supervisor"
    overrides.update(fence_box_xy_m=_fence_box(p["fence_box"]), fence_polygon_xy_m=_fence_polygon(p["fence_polygon"]),
                     fence_z_min_m=_optional(p["fence_z_min"]), fence_z_max_m=_optional(p["fence_z_max"]),
                     control_period_s=1.0 / p["control_rate_hz"])
    try:
        config = default_flight_config(**overrides)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        for name in BRIDGE_SCHEMA.names():  # FlightConfig.x / SupervisorConfig.x_m -> the parameter's name
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
    return FlightSettings(config, takeoff_from_task, p["connection"], p["peer"] or None, p["system_id"],
                          p["component_id"], p["target_system"] or None, (p["origin_x"], p["origin_y"], p["origin_z"]),
                          math.radians(p["origin_yaw_deg"]), p["control_rate_hz"], p["ground_z"])
