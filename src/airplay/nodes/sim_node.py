"""``sim``: dynamics + collision (AirPlayEnv without images), /clock, odom, episode status.

Subscribes ``episode/command`` (JSON, :class:`airplay.world.lockstep.EpisodeCommand`: episode,
scene_dir, index, the task itself, the success radius) and ``cmd_vel``. On a command it resets
the environment of the scene's collision model (loaded once per scene; the splat is never read)
on the command's task and publishes ``episode/status`` {"status": "started", "stamp_ns", and the
command's fields} (reliable, transient-local: :data:`airplay.nodes.common.EPISODE_STATUS`), then
``odom``, ``/clock`` and ``goal_pose`` (the task's goal, not for VLN) stamped with sim time,
and in lockstep ``sim/state``. ``odom`` follows REP-105 (twist in ``base_link``); ``sim/state``
carries the exact 13-vector state (velocity in map) that the policy node observes in lockstep,
so that its observation is the in-process one bit for bit (:mod:`airplay.nodes.common`).

Parameter ``wind`` (empty by default: none): wind, gusts or a velocity impulse acting on the vehicle
(:mod:`airplay.sim.disturbance`), its gusts seeded by ``seed`` and each task's id, as in-process.

Before it subscribes to ``episode/command`` (the evaluator's sign that it is ready) it flies a
short warm-up task of the first scene (:mod:`airplay.world.warmup`), so that no kernel compiles
inside an episode.

Lockstep (``lockstep:=true``): the environment steps only on a ``cmd_vel`` whose stamp equals
the latest odom's stamp; other commands (stale, duplicate, for an ended episode) are dropped and
counted. There is no wall-clock limit on the policy: a slow policy makes the run slower, never
its result different. The only thing that ends an episode without a command is the policy
leaving the graph: once ``cmd_vel`` has had a publisher, an episode during which it has none
(the policy's process ended; DDS notices a killed process after the participant lease of the
Fast DDS profile) ends as ``no_command``. While waiting, the latest odom and sim/state are
re-published every ``republish_s`` of wall time (same stamp, with /clock), so that a message
lost to DDS discovery never stalls the graph; consumers answer the repeat (:mod:`airplay.world.lockstep`).
Without lockstep the environment steps on a 50 Hz wall timer with the latest command (hover if none).

When an episode ends it publishes ``episode/status`` {"episode", "status", "steps",
"trajectory": [[x, y, z], ...] (every step, start included, float64)}, with "error" where the
policy's failure ended it, and waits for the next command.

The policy ends an episode itself with a reliable ``episode/policy`` message {"episode",
"stop": true, "stamp_ns", "status"?, "error"?, "stop_reason"?, ...}: with "status"
``policy_error`` or ``over_budget`` (:mod:`airplay.policies.guard`: it raised, or a step used
more CPU time than its budget) the episode ends with that status and the report's "error";
without one (AirVLN-R1's STOP or spent step budget) with ``policy_stop``
(:attr:`airplay.episode_status.EpisodeStatus.POLICY_STOP`), which the evaluator turns into the
AirNav outcome (:func:`airplay.vln.evaluate.vln_status`). In lockstep the report must be for the
observation the sim waits on; reports for another episode or stamp are ignored.

Sim time: integer nanoseconds, one control period per step; an episode's first observation comes
two periods after the previous episode's last (:func:`airplay.world.lockstep.next_start_ns`), which
is how the other nodes tell episodes apart. ``odom`` carries every step's stamp; ``/clock`` is
published at ``clock_rate_hz`` of sim time (default 10 Hz, the rate gazebo_ros publishes it at;
0: every step), and always at an episode's start and end, so a node's ROS time is at most one
clock period behind the latest odom and exact at episode events. Every ``/clock`` message wakes
every node of the graph (they all use sim time), so at 50 Hz it would be about half of the
graph's messages per step.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rosgraph_msgs.msg import Clock as ClockMsg
from std_msgs.msg import String

from airplay.episode_status import EpisodeStatus
from airplay.node_schemas import SIM
from airplay.nodes.common import (CONTROL_DT_NS, EPISODE_STATUS, LOCKSTEP_STREAM, RELIABLE, SIM_STATE_TOPIC, WorldCache,
                                  command_from_twist, episode_parameters, first_scene, json_message,
                                  json_payload, ns_from_stamp, odometry_from_state, parse_wind, run_node,
                                  sim_state_from_state, stamp_from_ns, transform_from_odometry)
from airplay.nodes.params import declare_schema
from airplay.policies import guard

POLICY_END_STATUSES = (guard.POLICY_ERROR, guard.OVER_BUDGET)
"""Statuses a policy's report may end an episode with (besides its STOP)."""


class SimNode(Node):
    def __init__(self) -> None:
        super().__init__("sim")
        values = declare_schema(self, SIM, {"republish_s": lambda v: setattr(self, "republish_s", v)})
        p = episode_parameters(values)
        self.setting = p["setting"]
        self.lockstep = values["lockstep"]
        self.republish_s = values["republish_s"]
        self.seed = p["seed"]
        self.disturbance = parse_wind(values["wind"])
        clock_rate_hz = values["clock_rate_hz"]
        self.clock_period_ns = int(round(1e9 / clock_rate_hz)) if clock_rate_hz > 0 else 0
        self.clock_ns = None  # the stamp /clock last carried
        self.worlds = WorldCache()
        self.envs: dict = {}  # (scene_dir, success radius) -> AirPlayEnv of the scene's collision model
        self.env = None
        self.episode = None       # the live episode's number; None between episodes
        self.last_ns = None       # the latest observation's stamp (None before the first)
        self.stamp_ns = 0
        self.last_publish = 0.0
        self.latest_cmd = np.zeros(4)
        self.policy_seen = False  # cmd_vel has had a publisher (the policy joined the graph)
        self.dropped: Counter = Counter()  # commands not for the observation waited on, by reason

        scene = first_scene(p["scenes"])
        if scene is not None:
            self._warm_up(scene)
        self.clock_pub = self.create_publisher(ClockMsg, "/clock", 10)
        self.odom_pub = self.create_publisher(Odometry, "odom", LOCKSTEP_STREAM if self.lockstep else RELIABLE)
        self.state_pub = self.create_publisher(Odometry, SIM_STATE_TOPIC, RELIABLE) if self.lockstep else None
        try:  # /tf where tf2_msgs exists (a ROS 2 distribution; the pip wheels lack it)
            from tf2_msgs.msg import TFMessage

            self.tf_pub, self._tf_message = self.create_publisher(TFMessage, "/tf", 10), TFMessage
        except ImportError:
            self.tf_pub = None
        self.goal_pub = self.create_publisher(PoseStamped, "goal_pose", RELIABLE)
        self.status_pub = self.create_publisher(String, "episode/status", EPISODE_STATUS)
        self.cmd_sub = self.create_subscription(TwistStamped, "cmd_vel", self.on_cmd_vel, RELIABLE)
        self.create_subscription(String, "episode/policy", self.on_policy_report, RELIABLE)
        wall = Clock(clock_type=ClockType.STEADY_TIME)
        self.create_timer(0.05, self.on_watchdog, clock=wall)
        if not self.lockstep:
            self.create_timer(CONTROL_DT_NS * 1e-9, self.on_realtime_step, clock=wall)
        self.create_subscription(String, "episode/command", self.on_episode_command, RELIABLE)  # last: ready

    def _warm_up(self, scene_dir: str) -> None:
        """Fly the warm-up task of the first scene (module docstring); a scene that fails to
        load is reported again with the episode that asks for it."""
        from airplay.world.warmup import warm_flight, warmup_task

        t0 = time.monotonic()
        try:
            world = self.worlds.get(scene_dir)
            warm_flight(self._env_for(scene_dir, world.protocol.success_radius_m), warmup_task(world))
        except Exception as exc:
            self.get_logger().warning(f"warm-up on {scene_dir} failed: {exc}")
            return
        self.get_logger().info(f"warmed up on {world.name} in {time.monotonic() - t0:.1f} s")

    def _env_for(self, scene_dir: str, success_radius_m: float):
        """The environment that flies tasks in ``scene_dir`` with this success radius (no images)."""
        from dataclasses import replace

        from airplay.world.env import AirPlayEnv

        key = (scene_dir, float(success_radius_m))
        if key not in self.envs:
            world = self.worlds.get(scene_dir)
            if round(world.vehicle.control_dt_s * 1e9) != CONTROL_DT_NS:
                self.get_logger().warning("vehicle control_dt_s differs from 20 ms; stamps use the vehicle's")
            if world.protocol.success_radius_m != success_radius_m:
                world = replace(world, protocol=replace(world.protocol, success_radius_m=float(success_radius_m)))
            setting = "goalfree" if self.setting == "vln" else self.setting
            self.envs = {k: v for k, v in self.envs.items() if k[0] == scene_dir}  # one scene at a time
            self.envs[key] = AirPlayEnv(world, setting, render_images=False, disturbance=self.disturbance,
                                        disturbance_seed=self.seed)
        return self.envs[key]

    # -- episodes --------------------------------------------------------------------------
    def on_episode_command(self, msg: String) -> None:
        from airplay.world.lockstep import EpisodeCommand, next_start_ns

        try:
            cmd = EpisodeCommand.from_payload(json_payload(msg))
        except ValueError as exc:
            self.get_logger().error(f"bad episode/command {msg.data[:200]!r}: {exc}")
            return
        if self.episode is not None:
            if cmd.episode == self.episode:
                return  # the same command again
            self.get_logger().warning(f"episode {cmd.episode} commanded while episode {self.episode} runs: "
                                      f"episode {self.episode} is left unfinished")
        try:
            env = self._env_for(cmd.scene_dir, cmd.success_radius_m)
        except Exception as exc:  # a bad scene folder must not kill the sim
            self.get_logger().error(f"episode {cmd.episode}: cannot load {cmd.scene_dir}: {exc}")
            return
        self.env = env
        _, info = env.reset(options={"task": cmd.task})
        self.stamp_ns = next_start_ns(self.last_ns, self._dt_ns())
        self.episode = cmd.episode
        self.latest_cmd = np.zeros(4)
        self.status_pub.publish(json_message({**cmd.to_payload(), "status": "started", "stamp_ns": self.stamp_ns}))
        if self.setting != "vln":  # VLN withholds the goal
            goal = PoseStamped()
            goal.header.stamp = stamp_from_ns(self.stamp_ns)
            goal.header.frame_id = "map"
            task = cmd.task
            goal.pose.position.x, goal.pose.position.y, goal.pose.position.z = (float(v) for v in task.goal_position)
            goal.pose.orientation.z, goal.pose.orientation.w = (float(np.sin(task.goal_yaw / 2)),
                                                                float(np.cos(task.goal_yaw / 2)))
            self.goal_pub.publish(goal)
        self.publish_observation(episode_start=True)
        if info["status"] != EpisodeStatus.RUNNING:
            self.finish(info["status"])

    def finish(self, status: str, error: str | None = None) -> None:
        env = self.env
        traj = [[float(x) for x in p] for p in env.trajectory]
        report = {"episode": self.episode, "status": status, "steps": int(env.steps), "trajectory": traj}
        if error is not None:
            report["error"] = error
        self.status_pub.publish(json_message(report))
        self.publish_clock(force=True)
        self.get_logger().info(f"episode {self.episode}: {status} after {env.steps} steps"
                               + (f" ({error})" if error else ""))
        self.episode = None

    def _dt_ns(self) -> int:
        return int(round(self.env.world.vehicle.control_dt_s * 1e9))

    def publish_clock(self, force: bool = False) -> None:
        """/clock with the current stamp: when forced (episode start and end), when the clock
        period has passed since the last one, or every step with ``clock_rate_hz:=0``."""
        if self.clock_ns == self.stamp_ns:
            return
        if (force or self.clock_ns is None or self.clock_period_ns == 0
                or self.stamp_ns // self.clock_period_ns != self.clock_ns // self.clock_period_ns):
            self.clock_pub.publish(ClockMsg(clock=stamp_from_ns(self.stamp_ns)))
            self.clock_ns = self.stamp_ns

    def _state(self) -> np.ndarray:
        """(13,) float64: the vehicle's position, quaternion xyzw, map velocity and body rates."""
        v = self.env.vehicle
        return np.concatenate([v.position[0], v.quat_xyzw[0], v.velocity[0], v.angular_velocity_body[0]])

    def _publish_state(self, state: np.ndarray) -> Odometry:
        """odom (REP-105; the renderer waits on it) then, in lockstep, sim/state (the policy waits on it)."""
        odom = odometry_from_state(state, self.stamp_ns)
        self.odom_pub.publish(odom)
        if self.state_pub is not None:
            self.state_pub.publish(sim_state_from_state(state, self.stamp_ns))
        return odom

    def publish_observation(self, episode_start: bool = False) -> None:
        """odom and sim/state (and /tf) first - the lockstep chain waits on them -, then /clock when due."""
        odom = self._publish_state(self._state())
        if self.tf_pub is not None:
            self.tf_pub.publish(self._tf_message(transforms=[transform_from_odometry(odom)]))
        self.publish_clock(force=episode_start)
        self.last_ns = self.stamp_ns
        self.last_publish = time.monotonic()

    def step(self, cmd: np.ndarray) -> None:
        _, _, _, _, info = self.env.step(cmd)
        self.stamp_ns += self._dt_ns()
        self.publish_observation()
        if info["status"] != EpisodeStatus.RUNNING:
            self.finish(info["status"])

    # -- lockstep --------------------------------------------------------------------------
    def on_cmd_vel(self, msg: TwistStamped) -> None:
        cmd = command_from_twist(msg)
        if not self.lockstep:
            self.latest_cmd = cmd
            return
        stamp = ns_from_stamp(msg.header.stamp)
        if self.episode is None or stamp != self.stamp_ns:
            reason = "between episodes" if self.episode is None else "not for the latest observation"
            if not self.dropped[reason]:
                self.get_logger().info(f"dropping commands {reason} (first at {stamp * 1e-9:.2f} s sim time; "
                                       "counted, logged once)")
            self.dropped[reason] += 1
            return
        if not np.all(np.isfinite(cmd)):
            self.get_logger().error(f"episode {self.episode}: non-finite command {cmd.tolist()} at "
                                    f"{stamp * 1e-9:.2f} s sim time")
            self.finish(guard.POLICY_ERROR, f"ValueError: non-finite command {cmd.tolist()}")
            return
        self.step(cmd)

    def on_policy_report(self, msg: String) -> None:
        """The policy ended its episode (module docstring): end it here at that observation."""
        try:
            report = json_payload(msg)
            episode, stop = report.get("episode"), bool(report.get("stop", False))
            stamp = int(report["stamp_ns"]) if stop else None
            status = str(report.get("status") or EpisodeStatus.POLICY_STOP.value)
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/policy {msg.data[:200]!r}: {exc}")
            return
        if not stop or self.episode is None or episode != self.episode:
            return
        if self.lockstep and stamp != self.stamp_ns:
            return  # not the observation the sim is waiting on
        if status not in (EpisodeStatus.POLICY_STOP, *POLICY_END_STATUSES):
            self.get_logger().error(f"episode/policy status {status!r} is none of {EpisodeStatus.POLICY_STOP}, "
                                    f"{', '.join(POLICY_END_STATUSES)}; ending the episode as {guard.POLICY_ERROR}")
            status = guard.POLICY_ERROR
        error = report.get("error")
        what = (f"the policy stopped ({report.get('stop_reason', '')})" if status == EpisodeStatus.POLICY_STOP
                else f"the policy failed ({status}: {error})")
        self.get_logger().info(f"episode {self.episode}: {what} at {self.stamp_ns * 1e-9:.2f} s sim time")
        self.finish(status, None if error is None else str(error))

    def on_watchdog(self) -> None:
        """Every 50 ms of wall time: has the policy left the graph, is a repeat of odom due."""
        publishers = self.cmd_sub.get_publisher_count()
        self.policy_seen = self.policy_seen or publishers > 0
        if self.episode is None:
            return
        if self.policy_seen and publishers == 0:
            self.get_logger().error(f"episode {self.episode}: the policy left the graph (cmd_vel has no publisher) "
                                    f"at {self.stamp_ns * 1e-9:.2f} s sim time; no command will come")
            self.finish(EpisodeStatus.NO_COMMAND.value)
            return
        now = time.monotonic()
        if self.lockstep and now - self.last_publish > self.republish_s:  # same stamp again: answered again
            self._publish_state(self._state())
            self.clock_pub.publish(ClockMsg(clock=stamp_from_ns(self.stamp_ns)))
            self.clock_ns = self.stamp_ns
            self.last_publish = now

    # -- real time -------------------------------------------------------------------------
    def on_realtime_step(self) -> None:
        if self.episode is not None:
            self.step(self.latest_cmd)


def main(args=None) -> int:
    return run_node(SimNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
