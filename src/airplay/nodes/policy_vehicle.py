"""The vehicle policy node's part: AirVLN-R1 flying a vehicle (``policy:=airvln_r1 vehicle:=true``).

This is the ``policy`` node of the fly graph for AirVLN-R1 (:mod:`airplay.nodes.policy_node`
picks it; every other policy flies a vehicle as the lockstep node does without lockstep,
:mod:`airplay.nodes.policy_lockstep`). There is no evaluator and no lockstep.

The episode starts on the bridge's ``episode/status`` "started" (scene_dir, index: the scene's
action space and the task, derived as sim_eval samples it; :mod:`airplay.nodes.policy_core`).
The instruction is the first of: one received on ``instruction`` (std_msgs/String, reliable:
the operator's) before the navigator's first step, the ``instruction`` parameter, and, with
``episode_instruction:=true`` (a rehearsal with the renderer as the camera), the instruction of
the VLN episode (scene, index) derived as in sim_eval; one that arrives later is logged and not
flown. Until there is one the node sends nothing (the bridge's supervisor hovers on the stale
command).

The node acts on every ``odom`` (REP-105, from the bridge: reliable, keep-last 1, so it acts on
the newest; the state's map velocity is read back with
:func:`airplay.nodes.common.state_from_odometry`) with the latest camera image
(``camera/image_raw``, and ``camera/depth/image_raw`` where a camera gives depth: best effort,
newest frame only), stamping its ``cmd_vel`` with the odom's stamp: when the navigator starts a
step (``wants_image``) it hovers (a zero command) until an image stamped at or after that odom
has arrived, so the model sees a view from where the last action ended (depth is passed on when
present, not waited for). During a model call nothing is sent (the bridge hovers). When the
navigator ends the episode (STOP, its step budget) the node publishes its report on
``episode/policy`` with ``"stop": true`` (the bridge lands on it) and hovers (zero ``cmd_vel``
on every odom) from then on.
"""

from __future__ import annotations

import numpy as np
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import String

from airplay.nodes.common import (EPISODE_STATUS, LATEST_ONLY, LATEST_SENSOR, LOCKSTEP_STREAM, RELIABLE, ns_from_stamp,
                                  state_from_odometry)
from airplay.nodes.policy_core import PolicyCore


class VehiclePolicy:
    """The subscriptions and flight of the vehicle policy node (module docstring) on ``node``,
    around ``core`` (AirVLN-R1's). ``instruction``: the ``instruction`` parameter (empty: none);
    ``episode_instruction``: the parameter of that name."""

    def __init__(self, node: Node, core: PolicyCore, instruction: str, episode_instruction: bool) -> None:
        self.node, self.core = node, core
        self.instruction_parameter = instruction
        self.episode_instruction = episode_instruction
        self.latest: dict[str, Image] = {}  # "rgb", "depth": the newest camera images
        self.view_after = None  # ns: a step's view must be stamped at or after this odom stamp (None: no step waits)
        images = LOCKSTEP_STREAM if core.lockstep else LATEST_SENSOR  # real time: act on the newest view
        node.create_subscription(String, "episode/status", self.on_episode_status, EPISODE_STATUS)
        node.create_subscription(Odometry, "odom", self.on_odom, LATEST_ONLY)  # act on the newest
        node.create_subscription(Image, "camera/image_raw", lambda m: self.latest.__setitem__("rgb", m), images)
        node.create_subscription(Image, "camera/depth/image_raw", lambda m: self.latest.__setitem__("depth", m),
                                 images)
        node.create_subscription(String, "instruction", self.on_instruction, RELIABLE)

    def on_episode_status(self, msg: String) -> None:
        start = self.core.on_episode_status(msg)
        if start is None:
            return
        if start.reset_error is not None:
            self.node.get_logger().error(f"episode {self.core.episode}: the navigator's reset failed: "
                                         f"{start.reset_error}")
        if self.core.instruction is None:
            self._default_instruction(int(start.status["index"]))

    def on_instruction(self, msg: String) -> None:
        """The operator's instruction: flown when it comes before the navigator's first step."""
        core, log = self.core, self.node.get_logger()
        flying = core.policy is not None and core.gate.start_ns is not None and core.policy.steps > 0
        if core.reported is None:
            if flying:
                if str(msg.data) != core.instruction:
                    log.warning(f"instruction {msg.data!r} came while the navigator flies {core.instruction!r}: "
                                "not flown")
                return
            core.instruction = str(msg.data)
            log.info(f"instruction from the operator: {core.instruction!r}")

    def _default_instruction(self, index: int) -> None:
        """With no instruction from the operator yet: the parameter's, or the VLN episode's."""
        core, log = self.core, self.node.get_logger()
        if self.instruction_parameter:
            core.instruction, source = self.instruction_parameter, "parameter 'instruction'"
        elif self.episode_instruction:
            core.tasks.load(core.policy_scene)
            core.instruction = core.tasks.vln.episodes[index].instruction
            source = f"VLN episode {index} of {core.tasks.world.name}"
        else:
            log.info("waiting for the operator's instruction on 'instruction' (std_msgs/String)")
            return
        log.info(f"instruction from {source}: {core.instruction!r}")

    def on_odom(self, msg: Odometry) -> None:
        """One command per odom (module docstring)."""
        from airplay.vln.action_executor import HOVER

        core = self.core
        stamp = ns_from_stamp(msg.header.stamp)
        if core.gate.start_ns is None or stamp < core.gate.start_ns:
            return
        if core.episode_over:
            core.send_command(HOVER, stamp)  # the episode is over: hover until landed
            return
        if core.instruction is None:
            return  # nothing to fly yet: the bridge's supervisor hovers
        rgb = self.latest.get("rgb")
        if core.policy.wants_image:
            if self.view_after is None:
                self.view_after = stamp
            if rgb is None or ns_from_stamp(rgb.header.stamp) < self.view_after:
                core.send_command(HOVER, stamp)  # wait for a view from here
                return
            self.view_after = None
        obs = core.observation(state_from_odometry(msg), rgb, self.latest.get("depth"))
        cmd = np.asarray(core.policy.select_action(obs), np.float32)
        if core.policy.done:
            core.report(stop=True, stamp=stamp)
            cmd = HOVER
            self.node.get_logger().info(f"navigator ended ({core.policy.stop_reason}) after {core.policy.steps} "
                                        f"steps: {core.policy.past_actions}")
        core.send_command(cmd, stamp)

    def close(self) -> None:
        """At shutdown: nothing to sum up (the vehicle's frames are not matched by stamp)."""
