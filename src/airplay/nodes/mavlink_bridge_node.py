"""``mavlink_bridge``: ``cmd_vel`` -> safety supervisor -> MAVLink velocity setpoints; telemetry -> ``odom``.

A thin node around :class:`airplay.bridge.flight.FlightController` (the flight sequence, the
supervisor, the setpoint stream) and :class:`airplay.bridge.mavlink_link.Autopilot` (MAVLink 2
over pymavlink). With ``autostart:=true`` it connects, arms, takes off to
``takeoff_height_m``, streams setpoints, switches to OFFBOARD (PX4) / flies GUIDED (ArduPilot),
and from then on sends the supervised policy command every control period.

Subscribes: ``cmd_vel`` geometry_msgs/TwistStamped (heading frame, the policy's stamp on the
wall clock), ``estop`` std_msgs/Empty (operator stop: land, latched), ``land``
std_msgs/Empty (normal landing; also after ``flight_time_s``), and ``episode/policy``
std_msgs/String JSON (the policy's end of its episode, e.g. AirVLN-R1's STOP or spent step
budget): with ``land_on_policy_stop:=true`` (default) a report with ``"stop": true`` while
flying lands the vehicle like ``land`` (logged with the policy's ``stop_reason``; the phase
goes to ``landing`` on ``vehicle/phase``). An ``estop`` std_srvs/Trigger service is offered
where std_srvs is installed.

Publishes: ``odom`` nav_msgs/Odometry (map ENU -> base_link FLU, the conventions of
:mod:`airplay.nodes.common`; map = the autopilot's local frame turned to ENU, shifted by
``origin_x/y/z``), ``vehicle/armed`` std_msgs/Bool, ``vehicle/mode`` std_msgs/String (the
autopilot's mode name), ``vehicle/phase`` std_msgs/String (the bridge's sequence phase),
``vehicle/battery`` sensor_msgs/BatteryState, ``supervisor/interventions`` std_msgs/String (one
JSON object per intervention: time_s, kind, reason, command_in, command_out; also logged), and,
when ``scene_dir`` is set, ``episode/status`` {"episode": 0, "status": "started", "stamp_ns",
"scene_dir", "index"} once flying (repeated every second; the policy and renderer nodes start
their episode on it) and {"status": "landed"} after touchdown.

The node exits when the vehicle has landed (code 0) or the sequence failed (code 1), so that
``airplay launch fly`` ends with the flight.
"""

from __future__ import annotations

import json
import logging
import math
import time

from geometry_msgs.msg import TwistStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.node import Node
from sensor_msgs.msg import BatteryState
from std_msgs.msg import Bool, Empty, String

from airplay.nodes.common import (EPISODE_STATUS, RELIABLE, ParameterError, command_from_twist, declare, json_message,
                                  ns_from_stamp, odometry_from_state, run_node)


def _fence_box(text: str):
    if not text.strip():
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    if len(values) != 4:
        raise ParameterError(f"parameter 'fence_box' must be 'x_min,y_min,x_max,y_max' (map metres), got {text!r}")
    return values


def _fence_polygon(text: str):
    if not text.strip():
        return None
    try:
        return tuple(tuple(float(v) for v in point.split(",")) for point in text.split(";"))
    except ValueError:
        raise ParameterError(f"parameter 'fence_polygon' must be 'x,y;x,y;x,y...' (map metres), got {text!r}") from None


def _optional(value: float):
    return None if math.isnan(value) else value


class MavlinkBridgeNode(Node):
    def __init__(self) -> None:
        super().__init__("mavlink_bridge")
        from airplay.bridge.flight import FlightController, default_flight_config
        from airplay.bridge.mavlink_link import Autopilot

        p = {name: declare(self, name, default) for name, default in (
            ("connection", "udp:127.0.0.1:14540"), ("system_id", 1), ("component_id", 191), ("target_system", 0),
            ("autostart", True), ("takeoff_height_m", 1.5), ("flight_time_s", 0.0), ("setpoint_warmup_s", 0.5),
            ("ack_timeout_s", 1.0), ("heartbeat_wait_s", 30.0), ("control_rate_hz", 50.0),
            ("command_timeout_s", 0.5), ("heartbeat_timeout_s", 1.5), ("fence_box", ""), ("fence_polygon", ""),
            ("fence_z_min", math.nan), ("fence_z_max", math.nan), ("geofence_hold_s", 2.0),
            ("landing_speed_m_s", 0.5), ("origin_x", 0.0), ("origin_y", 0.0), ("origin_z", 0.0),
            ("scene_dir", ""), ("index", 0), ("exit_when_landed", True), ("land_on_policy_stop", True))}
        self.p = p
        if not (isinstance(p["control_rate_hz"], float) and p["control_rate_hz"] > 2.0):
            raise ParameterError(f"parameter 'control_rate_hz' must be > 2 (PX4 drops OFFBOARD below 2 Hz), "
                                 f"got {p['control_rate_hz']!r}")
        for name in ("system_id", "component_id"):
            if not isinstance(p[name], int) or not 1 <= p[name] <= 255:
                raise ParameterError(f"parameter '{name}' must be an integer 1..255, got {p[name]!r}")
        overrides = {name: p[name] for name in ("takeoff_height_m", "flight_time_s", "setpoint_warmup_s",
                                                 "ack_timeout_s", "heartbeat_wait_s", "command_timeout_s",
                                                 "heartbeat_timeout_s", "geofence_hold_s", "landing_speed_m_s")}
        overrides.update(fence_box_xy_m=_fence_box(p["fence_box"]), fence_polygon_xy_m=_fence_polygon(p["fence_polygon"]),
                         fence_z_min_m=_optional(p["fence_z_min"]), fence_z_max_m=_optional(p["fence_z_max"]),
                         control_period_s=1.0 / p["control_rate_hz"])
        try:
            config = default_flight_config(**overrides)
        except (ValueError, TypeError) as exc:
            raise ParameterError(f"bridge parameters: {exc}") from None
        try:
            self.autopilot = Autopilot(p["connection"], p["system_id"], p["component_id"],
                                       target_system=p["target_system"] or None, clock=time.time)
        except ValueError as exc:
            raise ParameterError(f"parameter 'connection': {exc}") from None
        self.autopilot.telemetry.origin_enu[:] = (p["origin_x"], p["origin_y"], p["origin_z"])
        self.flight = FlightController(self.autopilot, config, clock=time.time,
                                       on_intervention=self.on_intervention, on_phase=self.on_phase)
        self.exit_code = 0
        self._pending_interventions = []
        self._last_position_update = 0
        self._last_status = None
        self._last_status_s = 0.0
        self._last_episode_s = -math.inf
        self._started_ns = None

        self.odom_pub = self.create_publisher(Odometry, "odom", RELIABLE)
        self.armed_pub = self.create_publisher(Bool, "vehicle/armed", RELIABLE)
        self.mode_pub = self.create_publisher(String, "vehicle/mode", RELIABLE)
        self.phase_pub = self.create_publisher(String, "vehicle/phase", RELIABLE)
        self.battery_pub = self.create_publisher(BatteryState, "vehicle/battery", RELIABLE)
        self.interventions_pub = self.create_publisher(String, "supervisor/interventions", RELIABLE)
        self.status_pub = self.create_publisher(String, "episode/status", EPISODE_STATUS)
        self.create_subscription(TwistStamped, "cmd_vel", self.on_cmd_vel, RELIABLE)
        self.create_subscription(Empty, "estop", lambda _: self.flight.operator_stop("estop topic"), RELIABLE)
        self.create_subscription(Empty, "land", lambda _: self.flight.land("land topic"), RELIABLE)
        if p["land_on_policy_stop"]:
            self.create_subscription(String, "episode/policy", self.on_policy_report, RELIABLE)
        try:
            from std_srvs.srv import Trigger

            self.create_service(Trigger, "estop", self.on_estop_service)
        except ImportError:
            self.get_logger().info("std_srvs not installed: operator stop on the 'estop' topic only")
        self.wall = Clock(clock_type=ClockType.SYSTEM_TIME)
        self.create_timer(1.0 / p["control_rate_hz"], self.on_tick, clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.autopilot.start()
        self.get_logger().info(f"MAVLink on {p['connection']} as system {p['system_id']} component "
                               f"{p['component_id']}; waiting for an autopilot heartbeat")
        if p["autostart"]:
            self.flight.start()

    # -- inputs ------------------------------------------------------------------------------
    def on_cmd_vel(self, msg: TwistStamped) -> None:
        self.flight.on_command(command_from_twist(msg), ns_from_stamp(msg.header.stamp) * 1e-9)

    def on_policy_report(self, msg: String) -> None:
        """The policy ended its episode: with "stop": true (STOP, its step budget) land while flying."""
        try:
            report = json.loads(msg.data)
            stop = report.get("stop") is True
        except (ValueError, AttributeError):
            self.get_logger().error(f"episode/policy: not a JSON object: {msg.data[:200]!r}")
            return
        if stop and self.flight.phase == "flying":
            reason = f"policy stop ({report.get('stop_reason') or 'stop'}, {report.get('vln_steps', '?')} steps)"
            self.get_logger().info(f"{reason}: landing")
            self.flight.land(reason)

    def on_estop_service(self, request, response):
        self.flight.operator_stop("estop service")
        response.success, response.message = True, "landing"
        return response

    # -- called from the flight's threads: queue, publish on the timer ------------------------
    def on_intervention(self, intervention) -> None:
        self._pending_interventions.append(intervention)

    def on_phase(self, phase: str) -> None:
        pass  # logged by airplay.bridge; published on vehicle/phase by the timer (ROS logging stays on one thread)

    # -- the control period ------------------------------------------------------------------
    def on_tick(self) -> None:
        fc = self.flight
        fc.tick()
        now_ns = self.wall.now().nanoseconds
        telemetry = self.autopilot.telemetry
        if telemetry.updates != self._last_position_update:
            state = telemetry.state()
            if state is not None:
                self._last_position_update = telemetry.updates
                self.odom_pub.publish(odometry_from_state(state, now_ns))
        while self._pending_interventions:
            intervention = self._pending_interventions.pop(0)  # logged by airplay.supervisor (once)
            self.interventions_pub.publish(String(data=json.dumps(intervention.to_dict())))
        self.publish_status(now_ns)
        if fc.phase == "flying" and self.p["scene_dir"] and now_ns * 1e-9 - self._last_episode_s >= 1.0:
            if self._started_ns is None:
                self._started_ns = now_ns
            self.status_pub.publish(json_message({"episode": 0, "status": "started", "stamp_ns": self._started_ns,
                                                  "scene_dir": self.p["scene_dir"], "index": self.p["index"]}))
            self._last_episode_s = now_ns * 1e-9
        if fc.phase in ("landed", "failed") and self.p["exit_when_landed"]:
            if fc.phase == "failed":
                self.get_logger().error(f"flight sequence failed: {fc.error}")
                self.exit_code = 1
            elif self.p["scene_dir"]:
                self.status_pub.publish(json_message({"episode": 0, "status": "landed"}))
            self.publish_status(now_ns, force=True)
            # The last state (landed or failed, disarmed) must reach the reliable subscribers before
            # the process ends: DDS drops what is not yet acknowledged when its writer goes away.
            for pub in (self.status_pub, self.interventions_pub, self.armed_pub, self.mode_pub, self.phase_pub):
                pub.wait_for_all_acked(Duration(seconds=1.0))
            self.get_logger().info(f"{fc.phase}: bridge exits")
            self.context.try_shutdown()

    def publish_status(self, now_ns: int, force: bool = False) -> None:
        st = self.autopilot.status
        status = (st.armed, st.mode, self.flight.phase)
        if not force and status == self._last_status and now_ns * 1e-9 - self._last_status_s < 0.5:
            return
        self._last_status, self._last_status_s = status, now_ns * 1e-9
        self.armed_pub.publish(Bool(data=bool(st.armed)))
        self.mode_pub.publish(String(data=st.mode))
        self.phase_pub.publish(String(data=self.flight.phase))
        battery = BatteryState()
        battery.header.stamp.sec, battery.header.stamp.nanosec = divmod(now_ns, 1_000_000_000)
        battery.voltage = float("nan") if st.battery_voltage_v is None else st.battery_voltage_v
        battery.current = float("nan") if st.battery_current_a is None else -st.battery_current_a  # discharging < 0
        battery.percentage = float("nan") if st.battery_remaining is None else st.battery_remaining
        battery.present = st.battery_voltage_v is not None
        battery.power_supply_technology = BatteryState.POWER_SUPPLY_TECHNOLOGY_LIPO
        self.battery_pub.publish(battery)

    def destroy_node(self) -> None:
        self.flight.close()
        super().destroy_node()


def main(args=None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(levelname)s: %(message)s")
    from rclpy._rclpy_pybind11 import RCLError

    try:
        return run_node(MavlinkBridgeNode, args)
    except RCLError as exc:  # SIGTERM's shutdown racing the executor's wait set: still a shutdown
        logging.getLogger("airplay.bridge").info("shut down (%s)", str(exc).split(",")[0])
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
