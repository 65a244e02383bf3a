"""``sim``: dynamics + collision (AirPlayEnv without images), /clock, odom, episode status.

Subscribes ``episode/command`` (JSON {"episode", "scene_dir", "index"}) and ``cmd_vel``.
On a command it loads the scene's World (once per scene), derives the task as
``sample_tasks(scene, grid, episodes, seed, setting, protocol)[index]`` and resets the env.
It publishes ``episode/status`` {"episode", "status": "started", "stamp_ns", "scene_dir",
"index"}, then ``/clock`` and ``odom`` stamped with sim time, and ``goal_pose`` (the task's
goal, for pointgoal).

Lockstep (``lockstep:=true``): the env steps only on a ``cmd_vel`` whose stamp equals the
latest odom's stamp. Without one within ``command_timeout_s`` of wall time the episode ends
as ``no_command`` (logged). While waiting, the latest odom is re-published every
``republish_s`` (same stamp, with /clock) so that a message lost to discovery never stalls
the graph; the evaluator also takes it as the sim's heartbeat.
Without lockstep the env steps on a 50 Hz wall timer with the latest command (hover if none).

When the episode ends it publishes ``episode/status`` {"episode", "status", "steps",
"trajectory": [[x, y, z], ...] (every step, start included, float64)} and waits.

Setting vln (AirVLN-R1): the tasks are the VLN episodes' and the env flies them goal-free with
a zero success radius, as the in-process VLN runner does
(:func:`airplay.vln.evaluate.vln_scene`: entering the radius does not end the episode); no
``goal_pose`` is published (the goal is withheld). The policy ends an episode (its STOP, or its
step budget) with a reliable ``episode/policy`` message {"episode", "stop": true, "stamp_ns",
"stop_reason", ...}: in lockstep the sim then ends the episode at that observation, without
stepping, with status ``policy_stop`` (:data:`airplay.vln.evaluate.POLICY_STOP`); the
evaluator turns it into the AirNav outcome (success within the radius, else ``stopped`` or
``timeout``). A stop for another episode or another stamp is ignored.

Sim time: integer nanoseconds, one control period per step; each reset advances it by one
period as well, so every observation of the run has its own stamp. ``odom`` carries every
step's stamp; ``/clock`` is published at ``clock_rate_hz`` of sim time (default 10 Hz, the
rate gazebo_ros publishes it at; 0: every step), and always at an episode's start and end,
so a node's ROS time is at most one clock period behind the latest odom and exact at episode
events. Every ``/clock`` message wakes every node of the graph (they all use sim time), so
at 50 Hz it would be about half of the graph's messages per step.
"""

from __future__ import annotations

import time

import numpy as np
from geometry_msgs.msg import PoseStamped, TwistStamped
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rosgraph_msgs.msg import Clock as ClockMsg
from std_msgs.msg import String

from airplay.nodes.common import (CONTROL_DT_NS, RELIABLE, EpisodeTasks, ParameterError, command_from_twist, declare,
                                  episode_parameters, json_message, json_payload, ns_from_stamp,
                                  odometry_from_state, preload_first_scene, run_node, stamp_from_ns, transform_from_odometry)


class SimNode(Node):
    def __init__(self) -> None:
        super().__init__("sim")
        p = episode_parameters(self)
        self.setting = p["setting"]
        self.lockstep = declare(self, "lockstep", True)
        self.command_timeout_s = float(declare(self, "command_timeout_s", 10.0))
        self.republish_s = float(declare(self, "republish_s", 0.5))
        clock_rate_hz = declare(self, "clock_rate_hz", 10.0)
        if not isinstance(self.lockstep, bool):
            raise ParameterError(f"parameter 'lockstep' must be true or false, got {self.lockstep!r}")
        if not self.command_timeout_s > 0:
            raise ParameterError(f"parameter 'command_timeout_s' must be > 0, got {self.command_timeout_s!r}")
        if not self.republish_s > 0:
            raise ParameterError(f"parameter 'republish_s' must be > 0, got {self.republish_s!r}")
        if isinstance(clock_rate_hz, bool) or not isinstance(clock_rate_hz, (int, float)) or not clock_rate_hz >= 0:
            raise ParameterError(f"parameter 'clock_rate_hz' must be a number >= 0 (0: every step), "
                                 f"got {clock_rate_hz!r}")
        self.clock_period_ns = int(round(1e9 / clock_rate_hz)) if clock_rate_hz > 0 else 0
        self.clock_ns = None  # the stamp /clock last carried
        self.tasks = EpisodeTasks.from_parameters(p)
        self.env = None
        self.env_source = None  # the World the env was made for
        self.episode = None
        self.stamp_ns = 0
        self.published_any = False
        self.waiting_since = 0.0
        self.last_publish = 0.0
        self.latest_cmd = np.zeros(4)

        preload_first_scene(self, p["scenes"], self.tasks.load)
        self.clock_pub = self.create_publisher(ClockMsg, "/clock", 10)
        self.odom_pub = self.create_publisher(Odometry, "odom", RELIABLE)
        try:  # /tf where tf2_msgs exists (a ROS 2 distribution; the pip wheels lack it)
            from tf2_msgs.msg import TFMessage

            self.tf_pub, self._tf_message = self.create_publisher(TFMessage, "/tf", 10), TFMessage
        except ImportError:
            self.tf_pub = None
        self.goal_pub = self.create_publisher(PoseStamped, "goal_pose", RELIABLE)
        self.status_pub = self.create_publisher(String, "episode/status", RELIABLE)
        self.create_subscription(String, "episode/command", self.on_episode_command, RELIABLE)
        self.create_subscription(TwistStamped, "cmd_vel", self.on_cmd_vel, RELIABLE)
        self.create_subscription(String, "episode/policy", self.on_policy_report, RELIABLE)
        wall = Clock(clock_type=ClockType.STEADY_TIME)
        if self.lockstep:
            self.create_timer(0.05, self.on_watchdog, clock=wall)
        else:
            self.create_timer(CONTROL_DT_NS * 1e-9, self.on_realtime_step, clock=wall)

    # -- episodes --------------------------------------------------------------------------
    def on_episode_command(self, msg: String) -> None:
        from airplay.sim.env import AirPlayEnv

        try:
            cmd = json_payload(msg)
            episode, scene_dir, index = int(cmd["episode"]), str(cmd["scene_dir"]), int(cmd["index"])
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/command {msg.data!r}: {exc}")
            return
        try:
            world, tasks = self.tasks.load(scene_dir)
        except Exception as exc:  # a bad scene folder must not kill the sim
            self.get_logger().error(f"episode {episode}: cannot load {scene_dir}: {exc}")
            return
        if round(world.vehicle.control_dt_s * 1e9) != CONTROL_DT_NS:
            self.get_logger().warning("vehicle control_dt_s differs from 20 ms; stamps use the vehicle's")
        if self.env is None or self.env_source is not world:
            if self.setting == "vln":  # goal-free, no success on entering the radius (as in-process)
                self.env = AirPlayEnv(self.tasks.vln.env_world, "goalfree", tasks=tasks, render_images=False)
            else:
                self.env = AirPlayEnv(world, self.setting, tasks=tasks, render_images=False)
            self.env_source = world
        if not 0 <= index < len(tasks):
            self.get_logger().error(f"episode/command index {index} outside 0..{len(tasks) - 1}")
            return
        task = tasks[index]
        _, info = self.env.reset(options={"task": task})
        if self.published_any:
            self.stamp_ns += self._dt_ns()
        self.episode = episode
        self.latest_cmd = np.zeros(4)
        self.status_pub.publish(json_message({"episode": episode, "status": "started", "stamp_ns": self.stamp_ns,
                                              "scene_dir": scene_dir, "index": index}))
        if self.setting != "vln":  # VLN withholds the goal
            goal = PoseStamped()
            goal.header.stamp = stamp_from_ns(self.stamp_ns)
            goal.header.frame_id = "map"
            goal.pose.position.x, goal.pose.position.y, goal.pose.position.z = (float(v) for v in task.goal_position)
            goal.pose.orientation.z, goal.pose.orientation.w = float(np.sin(task.goal_yaw / 2)), float(
                np.cos(task.goal_yaw / 2))
            self.goal_pub.publish(goal)
        self.publish_observation(episode_start=True)
        if info["status"] != "running":
            self.finish(info["status"])

    def finish(self, status: str) -> None:
        env = self.env
        traj = [[float(x) for x in p] for p in env.trajectory]
        self.status_pub.publish(json_message({"episode": self.episode, "status": status, "steps": int(env.steps),
                                              "trajectory": traj}))
        self.publish_clock(force=True)
        self.get_logger().info(f"episode {self.episode}: {status} after {env.steps} steps")
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

    def publish_observation(self, episode_start: bool = False) -> None:
        """odom (and /tf) first - the lockstep chain waits on it -, then /clock when due."""
        v = self.env.vehicle
        state = np.concatenate([v.position[0], v.quat_xyzw[0], v.velocity[0], v.angular_velocity_body[0]])
        odom = odometry_from_state(state, self.stamp_ns)
        self.odom_pub.publish(odom)
        if self.tf_pub is not None:
            self.tf_pub.publish(self._tf_message(transforms=[transform_from_odometry(odom)]))
        self.publish_clock(force=episode_start)
        self.published_any = True
        self.last_publish = self.waiting_since = time.monotonic()

    def step(self, cmd: np.ndarray) -> None:
        _, _, _, _, info = self.env.step(cmd)
        self.stamp_ns += self._dt_ns()
        self.publish_observation()
        if info["status"] != "running":
            self.finish(info["status"])

    # -- lockstep --------------------------------------------------------------------------
    def on_cmd_vel(self, msg: TwistStamped) -> None:
        cmd = command_from_twist(msg)
        if not self.lockstep:
            self.latest_cmd = cmd
            return
        if self.episode is None or ns_from_stamp(msg.header.stamp) != self.stamp_ns:
            return  # stale or duplicate: not the command for the latest observation
        self.step(cmd)

    def on_policy_report(self, msg: String) -> None:
        """The policy ended its episode (STOP or its step budget): end it here at that observation."""
        from airplay.vln.evaluate import POLICY_STOP

        try:
            report = json_payload(msg)
            episode, stop = report.get("episode"), bool(report.get("stop", False))
            stamp = int(report["stamp_ns"]) if stop else None
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/policy {msg.data[:200]!r}: {exc}")
            return
        if not stop or self.episode is None or episode != self.episode:
            return
        if self.lockstep and stamp != self.stamp_ns:
            return  # not the observation the sim is waiting on
        self.get_logger().info(f"episode {self.episode}: the policy stopped ({report.get('stop_reason', '')}) "
                               f"at {self.stamp_ns * 1e-9:.2f} s sim time")
        self.finish(POLICY_STOP)

    def on_watchdog(self) -> None:
        if self.episode is None:
            return
        now = time.monotonic()
        if now - self.waiting_since > self.command_timeout_s:
            self.get_logger().error(f"episode {self.episode}: no command for the observation at "
                                    f"{self.stamp_ns * 1e-9:.2f} s sim time within {self.command_timeout_s} s")
            self.finish("no_command")
        elif now - self.last_publish > self.republish_s:  # same stamp again: also a heartbeat
            v = self.env.vehicle
            state = np.concatenate([v.position[0], v.quat_xyzw[0], v.velocity[0], v.angular_velocity_body[0]])
            self.odom_pub.publish(odometry_from_state(state, self.stamp_ns))
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
