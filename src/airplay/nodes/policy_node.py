"""``policy``: observation (odom + camera [+ goal]) -> ``cmd_vel``, stamped with the observation's stamp.

The policy is chosen by the ``policy`` parameter (:func:`airplay.policies.make_policy`); learned
ones (act, dp, cnn_bc) are loaded from the ``checkpoint`` folder, and ``execution_horizon``
(0 = the policy's own) sets how many controls of each predicted chunk are executed. At each
``episode/status`` "started" it derives the task from (scene_dir, index) exactly as the sim does
and calls ``policy.reset(task)`` (the expert is privileged and plans from it). It acts once on
each stamp for which it holds the odom AND the RGB and depth images (and, for imagegoal, the
goal image of the episode), with the observation dict AirPlayEnv builds:
``rgb``, ``depth``, ``state`` (float32 13-vector), and ``goal`` (pointgoal, heading frame) or
``goal_image`` (imagegoal). A repeated observation (the sim re-publishes while it waits) gets
the same command again; observations older than the episode's start are dropped.
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import TwistStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import String

from airplay.nodes.common import (LOCKSTEP_IMAGES, RELIABLE, SENSOR_DATA, EpisodeTasks, ParameterError, declare,
                                  depth_from_image, episode_parameters, json_payload, ns_from_stamp, rgb_from_image,
                                  run_node, state_from_odometry, twist_from_command, yaw_from_state)


class PolicyNode(Node):
    def __init__(self) -> None:
        super().__init__("policy")
        from airplay.policies import POLICY_NAMES

        p = episode_parameters(self)
        self.setting = p["setting"]
        self.policy_name = declare(self, "policy", "expert")
        self.lockstep = declare(self, "lockstep", True)
        if self.policy_name not in POLICY_NAMES:
            raise ParameterError(f"parameter 'policy' must be one of {', '.join(POLICY_NAMES)}, "
                                 f"got {self.policy_name!r}")
        self.checkpoint = declare(self, "checkpoint", "")
        self.execution_horizon = declare(self, "execution_horizon", 0)
        self._check_policy_parameters()
        self.tasks = EpisodeTasks(p["episodes"], p["seed"], p["setting"])
        self.policy = None
        self.policy_world = None
        self.task = None
        self.start_ns = None
        self.goal_image = None
        self.pending: dict[int, dict] = {}
        self.last = (None, None)  # (stamp, command) of the last action
        qos = LOCKSTEP_IMAGES if self.lockstep else SENSOR_DATA
        self.cmd_pub = self.create_publisher(TwistStamped, "cmd_vel", RELIABLE)
        self.create_subscription(String, "episode/command", self.on_episode_command, RELIABLE)
        self.create_subscription(String, "episode/status", self.on_episode_status, RELIABLE)
        self.create_subscription(Odometry, "odom", lambda m: self.on_part(m, "odom"), RELIABLE)
        self.create_subscription(Image, "camera/image_raw", lambda m: self.on_part(m, "rgb"), qos)
        self.create_subscription(Image, "camera/depth/image_raw", lambda m: self.on_part(m, "depth"), qos)
        self.create_subscription(Image, "goal_image", self.on_goal_image, RELIABLE)

    def _check_policy_parameters(self) -> None:
        """Fail at start-up, naming the parameter, rather than at the first episode."""
        from airplay.policies import LEARNED_POLICIES

        h = self.execution_horizon
        if not isinstance(h, int) or isinstance(h, bool) or h < 0:
            raise ParameterError(f"parameter 'execution_horizon' must be >= 0 (0: the policy's own), "
                                 f"got {h!r}")
        if self.policy_name in LEARNED_POLICIES:
            from airplay.policies.checkpoint import read_config

            if not self.checkpoint:
                raise ParameterError(f"parameter 'checkpoint' must name the checkpoint folder of the "
                                     f"{self.policy_name!r} policy")
            try:
                cls, config = read_config(self.checkpoint)
            except ValueError as err:
                raise ParameterError(f"parameter 'checkpoint': {err}") from None
            if cls.name != self.policy_name:
                raise ParameterError(f"parameter 'checkpoint' holds a {cls.name!r} policy, not {self.policy_name!r}")
            if self.execution_horizon > config.chunk_size:
                raise ParameterError(f"parameter 'execution_horizon' must be <= the chunk size "
                                     f"{config.chunk_size}, got {self.execution_horizon}")

    def on_episode_command(self, msg: String) -> None:
        try:
            self._policy_for(str(json_payload(msg)["scene_dir"]))  # load ahead of the episode
        except Exception as exc:  # a bad command must not kill the node
            self.get_logger().error(f"bad episode/command {msg.data!r}: {exc}")

    def _policy_for(self, scene_dir: str):
        from airplay.policies import make_policy

        world, tasks = self.tasks.load(scene_dir)
        if self.policy_world is not world:
            self.policy = make_policy(self.policy_name, world, checkpoint=self.checkpoint or None,
                                      execution_horizon=self.execution_horizon or None)
            self.policy_world = world
        return tasks

    def on_episode_status(self, msg: String) -> None:
        status = json_payload(msg)
        if status.get("status") != "started":
            return
        start = int(status["stamp_ns"])
        if self.start_ns is not None and start <= self.start_ns:
            return
        tasks = self._policy_for(str(status["scene_dir"]))
        self.task = tasks[int(status["index"])]
        self.policy.reset(self.task)
        self.start_ns = start
        if self.goal_image is not None and self.goal_image[0] < start:
            self.goal_image = None
        self.pending = {s: v for s, v in self.pending.items() if s >= start}
        for stamp in sorted(self.pending):
            self.try_act(stamp)

    def on_goal_image(self, msg: Image) -> None:
        self.goal_image = (ns_from_stamp(msg.header.stamp), rgb_from_image(msg))
        for stamp in sorted(self.pending):
            self.try_act(stamp)

    def on_part(self, msg, key: str) -> None:
        stamp = ns_from_stamp(msg.header.stamp)
        if self.start_ns is not None and stamp < self.start_ns:
            return
        if stamp == self.last[0]:
            if key == "odom":  # the sim re-published: our command may have been lost
                self.cmd_pub.publish(twist_from_command(self.last[1], stamp))
            return
        if self.last[0] is not None and stamp < self.last[0]:
            return
        self.pending.setdefault(stamp, {})[key] = msg
        self.try_act(stamp)

    def try_act(self, stamp: int) -> None:
        parts = self.pending.get(stamp)
        if self.start_ns is None or stamp < self.start_ns or parts is None or len(parts) < 3:
            return
        if self.setting == "imagegoal" and (self.goal_image is None or self.goal_image[0] != self.start_ns):
            return
        from airplay.sim.env import goal_in_heading_frame

        state = state_from_odometry(parts["odom"])
        obs = {"rgb": rgb_from_image(parts["rgb"]), "depth": depth_from_image(parts["depth"]),
               "state": state.astype(np.float32)}
        if self.setting == "pointgoal":
            obs["goal"] = goal_in_heading_frame(state[0:3], yaw_from_state(state),
                                                self.task.goal_position).astype(np.float32)
        elif self.setting == "imagegoal":
            obs["goal_image"] = self.goal_image[1].copy()
        cmd = np.asarray(self.policy.select_action(obs), np.float32)
        self.cmd_pub.publish(twist_from_command(cmd, stamp))
        self.last = (stamp, cmd)
        self.pending = {s: v for s, v in self.pending.items() if s > stamp}


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
