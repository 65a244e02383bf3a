"""The lockstep policy node's part: one command per observation, matched to the sim's steps by stamp.

This is the ``policy`` node of sim_eval (in lockstep, or with ``lockstep:=false`` beside a
real-time sim) and of the fly graph for every policy but AirVLN-R1 on a vehicle
(:mod:`airplay.nodes.policy_vehicle`). :mod:`airplay.nodes.policy_node` picks it.

It acts once on each stamp (ns sim time) for which it holds the state AND the RGB and depth
images (and, for imagegoal, the goal image of the episode; for AirVLN-R1 the episode's
instruction), with the observation of :meth:`airplay.nodes.policy_core.PolicyCore.observation`.
Which episode a frame belongs to is decided by its stamp
(:class:`airplay.world.lockstep.EpisodeGate`): frames of an episode whose start has not arrived
are held until it does, frames of an ended episode and stale ones are dropped, and a repeated
state (the sim re-publishes while it waits) gets the same answer again; each kind is counted,
logged once, and summed up when the node stops ("observation frames by verdict: ..."). No
message order makes the node act with the wrong task or fail. The state is the sim's exact
state on ``sim/state`` in lockstep (the REP-105 ``odom``'s body-frame velocity reads back only
to a few ulp, which would make the observation differ from the in-process one;
:mod:`airplay.nodes.common`), and ``odom`` without lockstep (a real-time sim; the fly graph,
where the bridge publishes it). Camera streams: reliable in lockstep, else best effort, newest
frame only (act on the newest view).

The policy is called through :mod:`airplay.policies.guard`: when it raises (in ``reset`` or
``select_action``), or a step uses more than ``policy_budget_ms`` of CPU time (0, the default:
no budget), the node publishes on ``episode/policy`` {"episode", "stop": true, "stamp_ns",
"status": "policy_error" | "over_budget", "error"} instead of a command; the sim ends the
episode there with that status, and the evaluation goes on.

AirVLN-R1 in sim_eval: the instruction is the episode's, carried by the "started" status; else
the text last received on ``instruction`` (std_msgs/String, reliable). The node acts on an
episode's observations only once it has an instruction for that episode. When the navigator
ends the episode (STOP, or its step budget) the node publishes, instead of a ``cmd_vel`` for that
observation, its report on ``episode/policy`` with "stop": true; the sim ends the episode there.
When the sim ends it first (collision, time limit, ...) the node publishes the same report with
"stop": false on the terminal ``episode/status`` (:mod:`airplay.nodes.policy_core`).
"""

from __future__ import annotations

import sys

from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import String

from airplay.nodes.common import (EPISODE_STATUS, LATEST_SENSOR, LOCKSTEP_STREAM, RELIABLE, SIM_STATE_TOPIC, GateLog,
                                  ns_from_stamp, rgb_from_image, state_from_odometry, state_from_sim_state)
from airplay.nodes.policy_core import PolicyCore

MAX_PENDING_STAMPS = 64
"""Observations waiting for their state, RGB and depth; beyond this the oldest are forgotten (in
lockstep there is only ever one)."""


class LockstepPolicy:
    """The subscriptions and step matching of the lockstep policy node (module docstring) on
    ``node``, around ``core``; ``budget_ms``: the ``policy_budget_ms`` parameter (ms of CPU time
    per step, 0: no budget)."""

    def __init__(self, node: Node, core: PolicyCore, budget_ms: float) -> None:
        self.node, self.core, self.budget_ms = node, core, budget_ms
        self.gate_log = GateLog(node, "observation")
        self.pending: dict[int, dict] = {}  # stamp ns -> the parts received: "state", "rgb", "depth" messages
        self.answer = None          # (publisher, message) sent for the latest handled stamp: sent again on a repeat
        self.reset_error = None     # why the policy's reset failed for the live episode (policy_error)
        self.goal_image = None      # (stamp ns, (H, W, 3) uint8 rgb) of the latest goal_image
        # lockstep: the sim's exact state; else (a real-time sim, the fly graph's bridge) REP-105 odom
        self.state_of = state_from_sim_state if core.lockstep else state_from_odometry
        images = LOCKSTEP_STREAM if core.lockstep else LATEST_SENSOR  # real time: act on the newest view
        node.create_subscription(String, "episode/status", self.on_episode_status, EPISODE_STATUS)
        node.create_subscription(Odometry, SIM_STATE_TOPIC if core.lockstep else "odom",
                                 lambda m: self.on_part(m, "state"), RELIABLE)
        node.create_subscription(Image, "camera/image_raw", lambda m: self.on_part(m, "rgb"), images)
        node.create_subscription(Image, "camera/depth/image_raw", lambda m: self.on_part(m, "depth"), images)
        node.create_subscription(Image, "goal_image", self.on_goal_image, RELIABLE)
        node.create_subscription(String, "instruction", self.on_instruction, RELIABLE)

    def on_episode_status(self, msg: String) -> None:
        start = self.core.on_episode_status(msg)
        if start is None:
            return
        self.pending, self.answer, self.reset_error = {}, None, start.reset_error
        if self.goal_image is not None and self.goal_image[0] < self.core.gate.start_ns:
            self.goal_image = None
        for _, (key, item) in start.released:
            self.on_part(item, key)

    def on_instruction(self, msg: String) -> None:
        if self.core.instruction is None:  # the episode's own (in its "started" status) wins
            self.core.instruction = str(msg.data)
            self._try_pending()

    def on_goal_image(self, msg: Image) -> None:
        self.goal_image = (ns_from_stamp(msg.header.stamp), rgb_from_image(msg))
        self._try_pending()

    def _try_pending(self) -> None:
        for stamp in sorted(self.pending):
            self.try_act(stamp)

    def on_part(self, msg, key: str) -> None:
        """One part ("state", "rgb", "depth") of the observation stamped as ``msg``, sorted by the gate."""
        from airplay.world.lockstep import CURRENT, DUPLICATE, HELD

        gate = self.core.gate
        stamp = ns_from_stamp(msg.header.stamp)
        verdict = gate.classify(stamp)
        self.gate_log.note(verdict, stamp)
        if verdict == HELD:
            gate.hold(stamp, (key, msg))
        elif verdict == DUPLICATE:
            if key == "state" and self.answer is not None:  # the sim asks again: our answer may have been lost
                self.answer[0].publish(self.answer[1])
        elif verdict == CURRENT:
            self.pending.setdefault(stamp, {})[key] = msg
            while len(self.pending) > MAX_PENDING_STAMPS:  # without lockstep, stamps whose parts never all come
                del self.pending[min(self.pending)]
            self.try_act(stamp)

    def try_act(self, stamp: int) -> None:
        """Act on ``stamp`` (ns) once its observation is whole (module docstring)."""
        core = self.core
        parts = self.pending.get(stamp)
        if parts is None or len(parts) < 3 or not core.gate.live:
            return
        if core.setting == "imagegoal" and (self.goal_image is None or self.goal_image[0] != core.gate.start_ns):
            return
        if core.vln is not None and (core.instruction is None or core.episode_over):
            return  # no instruction for this episode yet, or the episode is over for the navigator
        from airplay.policies import guard

        self.pending = {s: v for s, v in self.pending.items() if s > stamp}
        core.gate.handled(stamp)
        if self.reset_error is not None:
            self._stop(stamp, status=guard.POLICY_ERROR, error=self.reset_error)
            return
        goal_image = self.goal_image[1] if core.setting == "imagegoal" else None
        obs = core.observation(self.state_of(parts["state"]), parts["rgb"], parts["depth"], goal_image)
        step = guard.act(core.policy, obs, self.budget_ms)
        if step.status is not None:
            self._stop(stamp, status=step.status, error=step.error)
        elif core.vln is not None and core.policy.done:  # STOP or the budget: end the episode here
            self._stop(stamp)
        else:
            self.answer = (core.cmd_pub, core.send_command(step.command, stamp))

    def _stop(self, stamp: int, status: str | None = None, error: str | None = None) -> None:
        """End the episode at ``stamp`` with the policy's report, which is then the answer to a repeat."""
        sent = self.core.report(stop=True, stamp=stamp, status=status, error=error)
        if sent is not None:
            self.answer = (self.core.report_pub, sent)

    def close(self) -> None:
        """At shutdown: the frames counted by verdict, on stderr (print, not the logger: rosout's
        publisher may be gone already)."""
        print(f"observation frames by verdict: {GateLog.summary(self.core.gate)}", file=sys.stderr, flush=True)
