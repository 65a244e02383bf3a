"""``mavlink_bridge``: ``cmd_vel`` -> safety supervisor -> MAVLink setpoints; telemetry -> ``odom``.

A lifecycle node (``lifecycle_msgs``) around :class:`airplay.bridge.flight.FlightController` (the
flight sequence as a state machine, the supervisor, the setpoint stream) and
:class:`airplay.bridge.mavlink_link.Autopilot` (MAVLink 2 over pymavlink). Its parameters are
:data:`airplay.bridge.parameters.BRIDGE_SCHEMA` (read-only; checked in one place).

Lifecycle (``ros2 lifecycle set /mavlink_bridge TRANSITION`` or the ``change_state`` service):

- *configure* (done at start): open the link, wait for the autopilot's HEARTBEAT, log its
  state, run the pre-arm checks (phases ``connecting``, ``checking``, ``ready`` on
  ``vehicle/phase``). Nothing is armed.
- *activate*: the explicit request to arm and fly. Carried out once the checks pass: arm
  (retried while the autopilot's refusal may pass), take off, OFFBOARD/GUIDED, fly the policy.
  ``arm:=true`` activates at start (rehearsals, tests); the ``~/arm`` std_srvs/Trigger service
  does the same as *activate*.
- *deactivate*: land (before arming: withdraw the request).
- *shutdown*, Ctrl-C, SIGTERM: airborne -> land and wait for the touchdown (at most
  ``shutdown_timeout_s``); armed on the ground -> disarm.

Subscribes: ``cmd_vel`` geometry_msgs/TwistStamped (heading frame, the policy's stamp on the
wall clock), ``estop`` std_msgs/Empty (operator stop: land, latched), ``land`` std_msgs/Empty
(normal landing; also after ``flight_time_s``), and ``episode/policy`` std_msgs/String JSON (the
policy's end of its episode): with ``land_on_policy_stop:=true`` a report with ``"stop": true``
while flying lands the vehicle. Services (std_srvs/Trigger): ``estop``, ``land``, and
``~/arm`` (``/mavlink_bridge/arm``). ``airplay bridge state|arm|land|estop`` calls them
(:mod:`airplay.nodes.bridge_control`) where there is no ``ros2`` CLI.

The mission (``scene_dir`` and ``index``: the task as sim_eval samples it, from ``episodes``,
``seed``, ``setting``; :mod:`airplay.bridge.mission`, :mod:`airplay.bridge.flight_mission`): the
map is tied to the vehicle's pose at the task's start (``map_tie``), the take-off goes to the
start's height, the bridge flies to the start pose (``positioning``) before the policy flies, and
ends the flight by the task's rules (success, timeout, the policy's stop, out of bounds: hold
``end_hold_s``, then land; a collision: land at once).

Publishes: ``odom`` nav_msgs/Odometry (REP-105: map ENU -> base_link FLU, twist in base_link;
:mod:`airplay.nodes.common`; map = the autopilot's local frame turned to ENU, then turned and
shifted by the map tie), ``vehicle/map_tie`` std_msgs/String (JSON: origin_enu, yaw_rad, source;
transient local), ``mission/result`` std_msgs/String (JSON: task_id, status, reason, flown_s,
position, goal_distance_m, closest_goal_distance_m, the mission and the map tie; transient local;
status ``interrupted`` when the flight ended before the mission did), ``vehicle/armed`` std_msgs/Bool, ``vehicle/mode`` std_msgs/String (the
autopilot's mode name), ``vehicle/phase`` std_msgs/String (:class:`airplay.bridge.flight_config.Phase`),
``vehicle/statustext`` std_msgs/String (the autopilot's STATUSTEXTs, "SEVERITY: text"),
``vehicle/battery`` sensor_msgs/BatteryState, ``supervisor/interventions`` std_msgs/String (one
JSON object per intervention), and, when ``scene_dir`` is set, ``episode/status``
{"episode": 0, "status": "started", "scene_dir", "index", "task" (Task.to_dict, not for VLN)}
once flying (every second; the policy and renderer start their episode on it), {"status": <the mission's ending>, "steps" (control periods since
the start: the episode's stamps end here), "trajectory" (the positions the mission judged, map
m)} at its end, and
{"status": "landed"} after touchdown.

With ``exit_when_landed`` (default) the node exits when the flight has ended: landed (code 0;
1 where a failure ended it, e.g. a lost link), left holding or failed (code 1), so that
``airplay launch fly`` ends with the flight.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import deque

import numpy as np
from geometry_msgs.msg import TwistStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.lifecycle import Node as LifecycleNode
from rclpy.lifecycle import TransitionCallbackReturn
from sensor_msgs.msg import BatteryState
from std_msgs.msg import Bool, Empty, String

from airplay.nodes.common import (CONTROL_DT_NS, EPISODE_STATUS, LATEST_ONLY, RELIABLE, ParameterError,
                                  command_from_twist,
                                  json_message, ns_from_stamp, odometry_from_state, run_node)
from airplay.nodes.params import declare_schema
from airplay.nodes.rclpy_private import RCLError

COMMAND_AGE_WINDOW = 3000
"""How many of the latest commands' ages on arrival the bridge keeps for its exit summary (60 s at 50 Hz)."""


class MavlinkBridgeNode(LifecycleNode):
    def __init__(self) -> None:
        super().__init__("mavlink_bridge")
        from airplay.bridge.parameters import BRIDGE_SCHEMA, BridgeParameterError, flight_settings

        self.p = p = declare_schema(self, BRIDGE_SCHEMA)
        try:
            self.settings = flight_settings(p)
        except BridgeParameterError as exc:
            raise ParameterError(f"bridge parameters: {exc}") from None
        self._task_dict = None
        self.judge = self._mission_judge()
        self._pending_ties = []
        self._pending_endings = []
        self._episode_ended = False
        self.autopilot = None
        self.flight = None
        self.exit_code = 0
        self._pending_interventions = []
        self._pending_texts = []
        self._last_position_update = 0
        self._last_status = None
        self._last_status_s = 0.0
        self._last_episode_s = -math.inf
        self._started_ns = None
        self._finished = False
        self._configure_error = ""

        self.odom_pub = self.create_publisher(Odometry, "odom", RELIABLE)
        self.armed_pub = self.create_publisher(Bool, "vehicle/armed", RELIABLE)
        self.mode_pub = self.create_publisher(String, "vehicle/mode", RELIABLE)
        self.phase_pub = self.create_publisher(String, "vehicle/phase", RELIABLE)
        self.text_pub = self.create_publisher(String, "vehicle/statustext", RELIABLE)
        self.battery_pub = self.create_publisher(BatteryState, "vehicle/battery", RELIABLE)
        self.interventions_pub = self.create_publisher(String, "supervisor/interventions", RELIABLE)
        self.status_pub = self.create_publisher(String, "episode/status", EPISODE_STATUS)
        self.tie_pub = self.create_publisher(String, "vehicle/map_tie", EPISODE_STATUS)
        self.result_pub = self.create_publisher(String, "mission/result", EPISODE_STATUS)
        self.create_subscription(TwistStamped, "cmd_vel", self.on_cmd_vel, LATEST_ONLY)  # the newest command
        self.create_subscription(Empty, "estop", lambda _: self.operator_stop("estop topic"), RELIABLE)
        self.create_subscription(Empty, "land", lambda _: self.land("land topic"), RELIABLE)
        if p["land_on_policy_stop"]:
            self.create_subscription(String, "episode/policy", self.on_policy_report, RELIABLE)
        from std_srvs.srv import Trigger

        self.create_service(Trigger, "estop", self.on_estop_service)
        self.create_service(Trigger, "land", self.on_land_service)
        self.create_service(Trigger, "~/arm", self.on_arm_service)
        self.wall = Clock(clock_type=ClockType.SYSTEM_TIME)
        self._command_ages_ms: deque[float] = deque(maxlen=COMMAND_AGE_WINDOW)
        self.create_timer(1.0 / self.settings.control_rate_hz, self.on_tick,
                          clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.trigger_configure()
        if self.flight is None:
            raise ParameterError(f"parameter 'connection': cannot open {p['connection']!r}: {self._configure_error}")
        if p["arm"]:
            self.get_logger().info("arm:=true: activating (arm and fly once the checks pass)")
            self.trigger_activate()
        else:
            self.get_logger().info("waiting for the request to arm: the lifecycle's activate transition "
                                   "(ros2 lifecycle set /mavlink_bridge activate) or the arm service")

    def _mission_judge(self):
        """The task of (scene_dir, index), as sim_eval samples it (the policy node derives the same),
        as the flight's mission (:mod:`airplay.bridge.mission`); None without scene_dir."""
        from dataclasses import replace

        from airplay.bridge.mission import Mission, MissionJudge
        from airplay.nodes.common import EpisodeTasks

        p = self.p
        if not p["scene_dir"]:
            return None
        t0 = time.monotonic()
        tasks = EpisodeTasks(p["episodes"], p["seed"], p["setting"], p["vln_config"] or None,
                             p["vln_episodes"] or None)
        try:
            world, task_list = tasks.load(p["scene_dir"])
        except Exception as exc:  # noqa: BLE001 - a scene that cannot be loaded: say which and why
            raise ParameterError(f"parameter 'scene_dir': cannot load the task's scene {p['scene_dir']!r}: "
                                 f"{exc}") from None
        if not 0 <= p["index"] < len(task_list):
            raise ParameterError(f"parameter 'index' must be 0..{len(task_list) - 1} (the scene's "
                                 f"{len(task_list)} tasks with episodes={p['episodes']}), got {p['index']}")
        task = task_list[p["index"]]
        vln = p["setting"] == "vln"
        radius = tasks.vln.radius_m if vln else world.protocol.success_radius_m
        try:
            mission = Mission.from_task(task, radius, self.settings.ground_z, success_on_entry=not vln)
        except ValueError as exc:
            raise ParameterError(f"parameter 'ground_z': {exc}") from None
        judge = MissionJudge(mission, world.checker)
        # the "started" status carries the task (not a VLN episode, which the policy derives with
        # its instruction): the policy and a recorder take it as it is, sampling nothing in flight
        self._task_dict = None if vln else task.to_dict(path=True)
        judge.checker.status(np.asarray([mission.start_position]))  # build the SDF now, not in flight
        if self.settings.takeoff_from_task:
            self.settings = replace(self.settings, flight=replace(self.settings.flight,
                                                                  takeoff_height_m=mission.takeoff_height_m))
        self.get_logger().info(
            f"mission {task.task_id}: start ({', '.join(f'{v:.2f}' for v in mission.start_position)}) m, yaw "
            f"{math.degrees(mission.start_yaw):.0f} deg, goal ({', '.join(f'{v:.2f}' for v in mission.goal_position)}) m, "
            f"radius {radius:.2f} m, time limit {mission.time_limit_s:.1f} s; take-off to "
            f"{self.settings.flight.takeoff_height_m:.2f} m; map tie {self.settings.flight.map_tie} "
            f"({time.monotonic() - t0:.1f} s to load)")
        return judge

    # -- lifecycle -----------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        from airplay.bridge.flight import FlightController
        from airplay.bridge.mavlink_link import Autopilot

        s = self.settings
        try:
            self.autopilot = Autopilot(s.connection, s.system_id, s.component_id, target_system=s.target_system,
                                       clock=time.time, peer=s.peer)
        except ValueError as exc:
            self._configure_error = str(exc)
            self.get_logger().error(f"configure: {exc}")
            return TransitionCallbackReturn.FAILURE
        from airplay.bridge.map_tie import MapTie

        self.autopilot.telemetry.tie = MapTie(s.origin_enu, s.origin_yaw_rad, "origin")
        if s.flight.map_tie == "origin":
            self._pending_ties.append(self.autopilot.telemetry.tie)
        self.autopilot.on_message.append(self._on_message)
        self.flight = FlightController(self.autopilot, s.flight, clock=time.time,
                                       on_intervention=self._pending_interventions.append, judge=self.judge,
                                       on_tie=self._pending_ties.append, on_mission_end=self._pending_endings.append)
        self.autopilot.start()
        self.flight.start()
        self.get_logger().info(f"MAVLink on {s.connection} as system {s.system_id} component {s.component_id}; "
                               "connecting and checking the autopilot")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        if self.flight is None or not self.flight.request_arm():
            return TransitionCallbackReturn.FAILURE
        return super().on_activate(state)

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        if self.flight is not None:
            if self.flight.airborne:
                self.flight.land("lifecycle deactivate")
            else:
                self.flight.cancel_arm()
        return super().on_deactivate(state)

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        if self.flight is not None and self.flight.airborne:
            self.get_logger().error("cleanup refused: the vehicle is armed and airborne (deactivate lands it)")
            return TransitionCallbackReturn.FAILURE
        self._close_flight()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        self._close_flight()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state) -> TransitionCallbackReturn:
        self._close_flight()
        return TransitionCallbackReturn.SUCCESS

    def _close_flight(self) -> None:
        """Land and wait where airborne (bounded), then close the link."""
        if self.flight is None:
            return
        flight, self.flight = self.flight, None
        flight.shutdown()
        flight.close()
        self._final_phase = flight.phase

    # -- inputs ------------------------------------------------------------------------------
    def operator_stop(self, reason: str) -> bool:
        if self.flight is None:
            return False
        self.flight.operator_stop(reason)
        return True

    def land(self, reason: str) -> bool:
        if self.flight is None:
            return False
        self.flight.land(reason)
        return True

    def on_cmd_vel(self, msg: TwistStamped) -> None:
        if self.flight is not None:
            stamp_ns = ns_from_stamp(msg.header.stamp)
            self._command_ages_ms.append((self.wall.now().nanoseconds - stamp_ns) * 1e-6)
            self.flight.on_command(command_from_twist(msg), stamp_ns * 1e-9)

    def on_policy_report(self, msg: String) -> None:
        """The policy ended its episode: with "stop": true (STOP, its step budget) land while flying."""
        try:
            report = json.loads(msg.data)
            stop = report.get("stop") is True
        except (ValueError, AttributeError):
            self.get_logger().error(f"episode/policy: not a JSON object: {msg.data[:200]!r}")
            return
        if stop and self.flight is not None and self.flight.phase in ("flying", "positioning"):
            reason = f"policy stop ({report.get('stop_reason') or report.get('status') or 'stop'}, " \
                     f"{report.get('vln_steps', '?')} steps)"
            self.get_logger().info(f"{reason}: the mission ends" if self.judge is not None else f"{reason}: landing")
            self.flight.policy_stop(reason)

    def on_estop_service(self, request, response):
        response.success = self.operator_stop("estop service")
        response.message = "landing" if response.success else "not configured: nothing flies"
        return response

    def on_land_service(self, request, response):
        response.success = self.land("land service")
        response.message = "landing" if response.success else "not configured: nothing flies"
        return response

    def on_arm_service(self, request, response):
        """Like the lifecycle's activate transition: the request to arm and fly."""
        from lifecycle_msgs.msg import State

        if self._state_machine.current_state[0] == State.PRIMARY_STATE_ACTIVE:
            response.success, response.message = False, "already active (armed or arming)"
            return response
        result = self.trigger_activate()
        response.success = result == TransitionCallbackReturn.SUCCESS
        response.message = (f"arming once the checks pass (phase {self.flight.phase})" if response.success
                            else "refused: the flight has ended or is landing")
        return response

    def _on_message(self, msg) -> None:
        """Receive thread: queue the autopilot's STATUSTEXTs for the timer (ROS calls stay on one thread)."""
        if msg.get_type() == "STATUSTEXT":
            self._pending_texts.append(str(self.autopilot.status.statustexts[-1]))

    # -- the control period ------------------------------------------------------------------
    def on_tick(self) -> None:
        fc = self.flight
        if fc is None or self._finished:
            return
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
        while self._pending_texts:
            self.text_pub.publish(String(data=self._pending_texts.pop(0)))
        self.publish_status(now_ns)
        self._publish_mission(now_ns)
        if (fc.phase == "flying" and self.p["scene_dir"] and not self._episode_ended
                and now_ns * 1e-9 - self._last_episode_s >= 1.0):
            if self._started_ns is None:
                self._started_ns = now_ns
            started = {"episode": 0, "status": "started", "stamp_ns": self._started_ns,
                       "scene_dir": self.p["scene_dir"], "index": self.p["index"]}
            if self._task_dict is not None:
                started["task"] = self._task_dict
            self.status_pub.publish(json_message(started))
            self._last_episode_s = now_ns * 1e-9
        if fc.finished and self.p["exit_when_landed"]:
            self._finished = True
            if fc.error is not None or fc.phase != "landed":
                self.get_logger().error(f"flight ended {fc.phase}: {fc.error}")
                self.exit_code = 1
            self._interrupt_mission(f"the flight ended {fc.phase} before the mission did"
                                    + (f": {fc.error}" if fc.error else ""), now_ns)
            if self.p["scene_dir"] and fc.phase == "landed":
                self.status_pub.publish(json_message({"episode": 0, "status": "landed"}))
            self.publish_status(now_ns, force=True)
            # The last state (landed or failed, disarmed) must reach the reliable subscribers before
            # the process ends: DDS drops what is not yet acknowledged when its writer goes away.
            for pub in (self.status_pub, self.interventions_pub, self.armed_pub, self.mode_pub, self.phase_pub,
                        self.text_pub, self.result_pub):
                pub.wait_for_all_acked(Duration(seconds=1.0))
            self.get_logger().info(f"{fc.phase}: bridge exits")
            self.context.try_shutdown()

    def _publish_mission(self, now_ns: int) -> None:
        """The map tie and the mission's end, queued by the flight's threads, on their topics (and the
        episode's end on ``episode/status``: the policy and the renderer stop)."""
        while self._pending_ties:
            tie = self._pending_ties.pop(0)
            self.tie_pub.publish(json_message(tie.to_dict()))
        while self._pending_endings:
            ending = self._pending_endings.pop(0)
            self._publish_result(ending, now_ns)

    def _publish_result(self, ending, now_ns: int) -> None:
        closest = self.judge.closest_m
        result = {"task_id": self.judge.mission.task_id, **ending.to_dict(),
                  "closest_goal_distance_m": round(closest, 4) if math.isfinite(closest) else None,
                  "mission": self.judge.mission.to_dict(),
                  "map_tie": self.autopilot.telemetry.tie.to_dict()}
        self.result_pub.publish(json_message(result))
        log = self.get_logger().info if ending.status == "success" else self.get_logger().warning
        log(f"mission result: {ending.status} ({ending.reason}) after {ending.flown_s:.1f} s, "
            f"{ending.goal_distance_m:.2f} m from the goal")
        if self.p["scene_dir"] and not self._episode_ended and self._started_ns is not None:
            self._episode_ended = True
            path = [[round(v, 4) for v in point] for point in self.judge.path]   # what the judge saw, map m
            # steps: control periods from the start to now (rounded up), so that the episode's stamp
            # range (start + steps * 20 ms, as the policy's gate and the recorder cut it) ends here
            steps = max(0, -(-(now_ns - self._started_ns) // CONTROL_DT_NS))
            self.status_pub.publish(json_message({"episode": 0, "status": str(ending.status), "stamp_ns": now_ns,
                                                  "steps": steps, "trajectory": path}))

    def _interrupt_mission(self, reason: str, now_ns: int) -> None:
        """The flight ended before the mission (the operator, a failure, the autopilot's takeover):
        ``mission/result`` says ``interrupted`` and why."""
        if self.judge is None or self.judge.ending is not None:
            return
        state = self.autopilot.telemetry.state()
        ending = self.judge.interrupted(None if state is None else state[0:3], time.time(), reason)
        self._publish_result(ending, now_ns)

    def publish_status(self, now_ns: int, force: bool = False) -> None:
        st = self.autopilot.status
        phase = str(self.flight.phase)
        status = (st.armed, st.mode, phase)
        if not force and status == self._last_status and now_ns * 1e-9 - self._last_status_s < 0.5:
            return
        self._last_status, self._last_status_s = status, now_ns * 1e-9
        self.armed_pub.publish(Bool(data=bool(st.armed)))
        self.mode_pub.publish(String(data=st.mode))
        self.phase_pub.publish(String(data=phase))
        battery = BatteryState()
        battery.header.stamp.sec, battery.header.stamp.nanosec = divmod(now_ns, 1_000_000_000)
        battery.voltage = float("nan") if st.battery_voltage_v is None else st.battery_voltage_v
        battery.current = float("nan") if st.battery_current_a is None else -st.battery_current_a  # discharging < 0
        battery.percentage = float("nan") if st.battery_remaining is None else st.battery_remaining
        battery.present = st.battery_voltage_v is not None
        battery.power_supply_technology = BatteryState.POWER_SUPPLY_TECHNOLOGY_LIPO
        self.battery_pub.publish(battery)

    def destroy_node(self) -> None:
        """Ctrl-C / SIGTERM / the end: land where airborne (bounded), then close."""
        flight = self.flight
        if flight is not None and not flight.finished and flight.airborne:
            self.get_logger().warning("stopping while airborne: landing before the bridge exits")
            flight.shutdown()
            try:  # the end state for the subscribers (the context is still up)
                self.publish_status(self.wall.now().nanoseconds, force=True)
                self._publish_mission(self.wall.now().nanoseconds)
                self._interrupt_mission("the bridge was stopped (Ctrl-C, SIGTERM) before the mission ended",
                                        self.wall.now().nanoseconds)
                for pub in (self.armed_pub, self.mode_pub, self.phase_pub, self.result_pub):
                    pub.wait_for_all_acked(Duration(seconds=1.0))
            except Exception as exc:  # noqa: BLE001 - shutting down: report and go on
                self.get_logger().warning(f"final status not published: {exc}")
        self._close_flight()
        self._log_command_ages()
        super().destroy_node()

    def _log_command_ages(self) -> None:
        """The commands' age on arrival (their stamp is the odom's they answer, so this is odom ->
        camera -> policy -> bridge), over the latest :data:`COMMAND_AGE_WINDOW`: what a policy's
        real-time loop costs, next to ``command_timeout_s``. Printed, as rosout may be gone."""
        import sys

        if self._command_ages_ms:
            ages = np.asarray(self._command_ages_ms)
            p50, p95 = np.percentile(ages, [50, 95])
            print(f"cmd_vel age on arrival over the last {ages.size} commands: p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
                  f"max {ages.max():.1f} ms", file=sys.stderr, flush=True)


def main(args=None) -> int:
    logging.basicConfig(level=logging.INFO, format="[%(name)s] %(levelname)s: %(message)s")
    try:
        return run_node(MavlinkBridgeNode, args)
    except RCLError as exc:  # SIGTERM's shutdown racing the executor's wait set: still a shutdown
        logging.getLogger("airplay.bridge").info("shut down (%s)", str(exc).split(",")[0])
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
