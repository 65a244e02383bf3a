"""``policy``: observation (state + camera [+ goal]) -> ``cmd_vel``, stamped with the observation's stamp.

The policy is chosen by the ``policy`` parameter (:func:`airplay.policies.make_policy`); learned
ones (act, dp, cnn_bc) are loaded from the ``checkpoint`` folder, and ``execution_horizon``
(0 = the policy's own) sets how many controls of each predicted chunk are executed. With
``policy_backend:=onnxruntime`` a learned cnn_bc, act or dp runs from its ONNX export (``checkpoint``:
the export folder, or a checkpoint exported into CHECKPOINT/onnx; :mod:`airplay.policies.onnx_runtime`)
on one onnxruntime thread, with the same commands as torch's within the export's checked tolerance. The node
loads what its policy needs and nothing else (the expert: the scene's planning grid). Before it
subscribes to ``episode/command`` (the evaluator's sign that it is ready) the policy is made for
the first scene and warmed up (:mod:`airplay.policies.warmup`), so that no kernel compiles and
no model loads inside an episode.

At each ``episode/status`` "started" (the evaluator's command echoed by the sim: the task
itself) it calls ``policy.reset(task)`` (the expert is privileged and plans from it). It acts
once on each stamp for which it holds the state AND the RGB and depth images (and, for
imagegoal, the goal image of the episode), with the observation dict AirPlayEnv builds:
``rgb``, ``depth``, ``state`` (float32 13-vector), and ``goal`` (pointgoal, heading frame) or
``goal_image`` (imagegoal). Which episode a frame belongs to is decided by its stamp
(:class:`airplay.world.lockstep.EpisodeGate`): frames of an episode whose start has not arrived
are held until it does, frames of an ended episode and stale ones are dropped, and a repeated
state (the sim re-publishes while it waits) gets the same answer again; each kind is counted
and logged once. No message order makes the node act with the wrong task or fail. The state is
the sim's exact state on ``sim/state`` in lockstep (the REP-105 ``odom``'s body-frame velocity
reads back only to a few ulp, which would make the observation differ from the in-process one;
:mod:`airplay.nodes.common`), and ``odom`` without lockstep (a real-time sim; the fly graph,
where the bridge publishes it).

The policy is called through :mod:`airplay.policies.guard`: when it raises (in ``reset`` or
``select_action``), or a step uses more than ``policy_budget_ms`` of CPU time (0, the default:
no budget), the node publishes on ``episode/policy`` {"episode", "stop": true, "stamp_ns",
"status": "policy_error" | "over_budget", "error"} instead of a command; the sim ends the
episode there with that status, and the evaluation goes on.

AirVLN-R1 (``policy:=airvln_r1``, setting vln): the navigator's backend comes from the
parameters ``vln_backend`` (transformers | openai), ``model`` (folder) or ``endpoint`` (URL),
``served_model``, ``device``, ``max_new_tokens``, ``image_size`` ("W,H"), ``history_offsets``
("-7,-4,-2,-1") and ``vln_config`` (:mod:`airplay.vln.options`; errors name the parameter); the
model is loaded (or the server asked for its model) at start-up, before the node joins the
graph. The observation is the one the in-process VLN runner gives the navigator: ``rgb``,
``depth``, ``state`` and ``instruction``, the episode's instruction (carried by the "started"
status; else the text last received on ``instruction``, std_msgs/String, reliable); the node
acts on an episode's observations only once it has an instruction for that episode. When the
navigator ends the episode (STOP, or its step budget) the node publishes, instead of a
``cmd_vel`` for that observation, ``episode/policy`` (std_msgs/String JSON, reliable)
{"episode", "stop": true, "stamp_ns", "stop_reason", "vln_steps", "queries",
"format_failures", "model_time_s", "actions", "backend", "model", "history_offsets"}; the sim ends the episode
there. When the sim ends it first (collision, time limit, ...) the node publishes the same
report with "stop": false on the terminal ``episode/status``. Either way the report is the
policy's last word on the episode (the evaluator records the episode with it), and the node
forgets the instruction before sending it, so the next instruction is the next episode's.
The report also carries the ``instruction`` flown.

AirVLN-R1 on a vehicle (``vehicle:=true``, the fly graph): there is no evaluator and no
lockstep. The episode starts on the bridge's ``episode/status`` "started" (scene_dir, index:
the scene's action space). The instruction is the first of: one received on ``instruction``
(the operator's) before the navigator's first step, the ``instruction`` parameter, and, with
``episode_instruction:=true`` (a rehearsal with the renderer as the camera), the instruction of
the VLN episode (scene, index) derived as in sim_eval; one that arrives later is logged and
not flown. Until there is one the node sends nothing (the bridge's supervisor hovers on the
stale command). The node acts on every ``odom`` (REP-105; the state's map velocity is read
back with :func:`airplay.nodes.common.state_from_odometry`) with the latest camera
image: when the navigator starts a step (``wants_image``) it hovers until an image stamped at
or after that odom has arrived, so the model sees a view from where the last action ended
(depth is passed on when present, not waited for). During a model call nothing is sent (the
bridge hovers). When the navigator ends the episode (STOP, its step budget) the node publishes
its report on ``episode/policy`` with ``"stop": true`` (the bridge lands on it) and hovers
(zero ``cmd_vel`` on every odom) from then on.
"""

from __future__ import annotations

import time

import numpy as np
from geometry_msgs.msg import TwistStamped
from nav_msgs.msg import Odometry
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import String

from airplay.frames import heading_of_state
from airplay.node_schemas import POLICY_NODE
from airplay.nodes.common import (CONTROL_DT_NS, EPISODE_STATUS, LATEST_ONLY, LATEST_SENSOR, LOCKSTEP_STREAM, RELIABLE,
                                  EpisodeTasks,
                                  GateLog, ParameterError, WorldCache, depth_from_image, episode_parameters,
                                  first_scene, json_message, json_payload, ns_from_stamp, one_compute_thread,
                                  rgb_from_image, run_node, SIM_STATE_TOPIC, state_from_odometry,
                                  state_from_sim_state, twist_from_command)
from airplay.nodes.params import declare_schema


MAX_PENDING_STAMPS = 64
"""Observations waiting for their state, RGB and depth; beyond this the oldest are forgotten (in
lockstep there is only ever one)."""


class PolicyNode(Node):
    def __init__(self) -> None:
        from airplay.policies import POLICY_NAMES, is_policy_name, reads_vln_options
        from airplay.world.lockstep import EpisodeGate

        super().__init__("policy")
        values = declare_schema(self, POLICY_NODE)
        p = episode_parameters(values)
        self.params = p
        self.setting = p["setting"]
        self.policy_name = values["policy"]
        self.lockstep = values["lockstep"]
        if not self.lockstep:
            one_compute_thread(torch_too=True)  # real time: leave the cores to the loop's other nodes
        if not is_policy_name(self.policy_name):
            raise ParameterError(f"parameter 'policy' must be one of {', '.join(POLICY_NAMES)} or module:factory, "
                                 f"got {self.policy_name!r}")
        self.checkpoint = values["checkpoint"]
        self.policy_backend = values["policy_backend"]
        self.execution_horizon = values["execution_horizon"]
        self.budget_ms = values["policy_budget_ms"]
        self._check_policy_parameters()
        if self.setting == "vln" and not reads_vln_options(self.policy_name):
            raise ParameterError(f"parameter 'policy' must be airvln_r1 in the vln setting, got {self.policy_name!r}")
        self.vln = self._vln_backend(p, values) if reads_vln_options(self.policy_name) else None
        self.on_vehicle = self.vln is not None and self.vln["vehicle"]
        self.worlds = WorldCache()
        self.vehicle_tasks = None   # a vehicle's tasks, derived from (scene, index) as sim_eval samples them
        self.policy = None
        self.policy_scene = None    # the scene folder the policy was made for
        self.task = None
        self.episode = None         # the sim's episode number of the live episode
        self.reset_error = None     # why the policy's reset failed for the live episode (policy_error)
        self.goal_image = None      # (stamp, rgb) of the latest goal_image
        self.instruction = None     # vln: the text of the current episode (None: not received yet)
        self.reported = None        # vln: the episode whose report was sent, and that report
        self.pending: dict[int, dict] = {}
        self.answer = None          # (publisher, message) sent for the latest handled stamp: sent again on a repeat
        self.gate = EpisodeGate(CONTROL_DT_NS, self.lockstep)
        self.gate_log = GateLog(self, "observation")
        scene = first_scene(p["scenes"])
        if scene is not None:
            self._warm_up(scene)
        qos = LOCKSTEP_STREAM if self.lockstep else LATEST_SENSOR  # real time: act on the newest view
        self.cmd_pub = self.create_publisher(TwistStamped, "cmd_vel", LOCKSTEP_STREAM if self.lockstep else RELIABLE)
        self.report_pub = self.create_publisher(String, "episode/policy", RELIABLE)
        self.create_subscription(String, "episode/status", self.on_episode_status, EPISODE_STATUS)
        if self.on_vehicle:
            self.latest: dict[str, Image] = {}
            self.view_after = None  # a step's view must be stamped at or after this odom stamp
            self.create_subscription(Odometry, "odom", self.on_vehicle_odom, LATEST_ONLY)  # act on the newest
            self.create_subscription(Image, "camera/image_raw", lambda m: self.latest.__setitem__("rgb", m), qos)
            self.create_subscription(Image, "camera/depth/image_raw", lambda m: self.latest.__setitem__("depth", m),
                                     qos)
        else:
            # lockstep: the sim's exact state; else (a real-time sim, the fly graph's bridge) REP-105 odom
            self.state_of = state_from_sim_state if self.lockstep else state_from_odometry
            self.create_subscription(Odometry, SIM_STATE_TOPIC if self.lockstep else "odom",
                                     lambda m: self.on_part(m, "state"), RELIABLE)
            self.create_subscription(Image, "camera/image_raw", lambda m: self.on_part(m, "rgb"), qos)
            self.create_subscription(Image, "camera/depth/image_raw", lambda m: self.on_part(m, "depth"), qos)
        self.create_subscription(Image, "goal_image", self.on_goal_image, RELIABLE)
        self.create_subscription(String, "instruction", self.on_instruction, RELIABLE)
        self.create_subscription(String, "episode/command", self.on_episode_command, RELIABLE)  # last: ready

    def _check_policy_parameters(self) -> None:
        """Fail at start-up, naming the parameter, rather than at the first episode."""
        from airplay.policies import LEARNED_POLICIES, PLUGIN_NAME, plugin_factory

        if PLUGIN_NAME.fullmatch(self.policy_name):
            try:
                plugin_factory(self.policy_name)
            except ValueError as err:
                raise ParameterError(f"parameter 'policy': {err}") from None
        if self.policy_backend != "torch":
            from airplay.policies.onnx_format import EXPORTABLE

            if self.policy_name not in EXPORTABLE:
                raise ParameterError(f"parameter 'policy_backend' {self.policy_backend} is for the exported learned "
                                     f"policies ({', '.join(EXPORTABLE)}), not {self.policy_name!r}")
        if self.policy_name in LEARNED_POLICIES:
            from airplay.policies.checkpoint import policy_class, read_config
            from airplay.policies.onnx_format import read_sidecar

            if not self.checkpoint:
                raise ParameterError(f"parameter 'checkpoint' must name the checkpoint folder of the "
                                     f"{self.policy_name!r} policy")
            try:
                if self.policy_backend == "torch":
                    cls, config = read_config(self.checkpoint)
                    kind = cls.name
                else:  # the ONNX export's sidecar (airplay.policies.onnx_format)
                    _, meta = read_sidecar(self.checkpoint)
                    kind = meta["type"]
                    config = policy_class(kind).config_class.from_dict(meta["config"])
            except ValueError as err:
                raise ParameterError(f"parameter 'checkpoint': {err}") from None
            if kind != self.policy_name:
                raise ParameterError(f"parameter 'checkpoint' holds a {kind!r} policy, not {self.policy_name!r}")
            if config.adapter != "hold" and self.execution_horizon > config.chunk_size:  # hold: any H
                raise ParameterError(f"parameter 'execution_horizon' must be <= the chunk size "
                                     f"{config.chunk_size}, got {self.execution_horizon}")
    def _vln_backend(self, p: dict, values: dict) -> dict:
        """Check the VLN parameters and load the backend (the model) now, naming the parameter on error."""
        from airplay.vln.backends import BackendError, make_backend
        from airplay.vln.options import EPISODE_OPTIONS, VLN_OPTIONS, VLNOptionError, parse_vln_options

        if self.setting != "vln":
            raise ParameterError(f"parameter 'setting' must be vln for policy airvln_r1, got {self.setting!r}")
        on_vehicle = {k: values[k] for k in ("vehicle", "instruction", "episode_instruction")}
        if (on_vehicle["instruction"] or on_vehicle["episode_instruction"]) and not on_vehicle["vehicle"]:
            raise ParameterError("parameters 'instruction' and 'episode_instruction' are for a vehicle "
                                 "(vehicle:=true); in sim_eval the evaluator sends each episode's instruction")
        try:
            o = parse_vln_options({**{k: values[k] for k in VLN_OPTIONS if k not in EPISODE_OPTIONS},
                                   **{k: p[k] or "" for k in EPISODE_OPTIONS}})
        except VLNOptionError as exc:
            raise ParameterError(str(exc)) from None
        try:
            backend = make_backend(o["backend"], model=o["model"], endpoint=o["endpoint"], device=o["device"],
                                   max_new_tokens=o["max_new_tokens"], served_model=o["served_model"])
        except BackendError as exc:
            name = ("device" if str(exc).startswith("device ") else
                    "model" if o["backend"] == "transformers" else "endpoint")
            raise ParameterError(f"parameter '{name}': {exc}") from None
        return {**o, **on_vehicle, "backend_object": backend}

    def _warm_up(self, scene_dir: str) -> None:
        """Make the policy for the first scene and call it once (module docstring). The
        navigator (AirVLN-R1) is not called: its model was loaded with the node, and a call
        costs a real query."""
        from airplay.policies.warmup import warm_policy

        t0 = time.monotonic()
        try:
            self._policy_for(scene_dir)
        except Exception as exc:  # reported again, with the episode, when it starts
            self.get_logger().warning(f"could not make the {self.policy_name} policy for {scene_dir}: {exc}")
            return
        if self.vln is None:
            error = warm_policy(self.policy, self.worlds.get(scene_dir), self.setting)
            if error is not None:
                self.get_logger().warning(f"the {self.policy_name} policy failed its warm-up: {error}")
        backend = f" ({self.policy_backend})" if self.policy_backend != "torch" else ""
        self.get_logger().info(f"{self.policy_name} policy ready in {time.monotonic() - t0:.1f} s{backend}")

    def _policy_for(self, scene_dir: str):
        """The policy for ``scene_dir`` (made anew for a new scene: the expert plans in it)."""
        from airplay.policies import make_policy

        if scene_dir == self.policy_scene:
            return self.policy
        world = self.worlds.get(scene_dir)
        if self.vln is not None:  # one navigator, the scene's action space (as the in-process runner)
            from airplay.vln.actions import load_vln_config

            vcfg = load_vln_config(self.vln["vln_config"])
            if self.policy is None:
                from airplay.vln.navigator import navigator_with_backend

                self.policy = navigator_with_backend(self.vln["backend_object"], world, vcfg,
                                                     self.vln["history_offsets"], self.vln["image_size"])
            self.policy.set_actions(vcfg.action_space(world.name, world.scene.spec.category))
        else:
            self.policy = make_policy(self.policy_name, world, checkpoint=self.checkpoint or None,
                                      execution_horizon=self.execution_horizon or None, backend=self.policy_backend)
        self.policy_scene = scene_dir
        return self.policy

    def on_instruction(self, msg: String) -> None:
        if self.on_vehicle:
            flying = self.policy is not None and self.gate.start_ns is not None and self.policy.steps > 0
            if flying and self.reported is None:
                if str(msg.data) != self.instruction:
                    self.get_logger().warning(f"instruction {msg.data!r} came while the navigator flies "
                                              f"{self.instruction!r}: not flown")
                return
            if self.reported is None:
                self.instruction = str(msg.data)
                self.get_logger().info(f"instruction from the operator: {self.instruction!r}")
            return
        if self.instruction is None:  # the episode's own (in its "started" status) wins
            self.instruction = str(msg.data)
            for stamp in sorted(self.pending):
                self.try_act(stamp)

    # -- reports ---------------------------------------------------------------------------
    def report(self, stop: bool, stamp: int | None = None, status: str | None = None, error: str | None = None) -> None:
        """The policy's end of the episode on ``episode/policy`` (module docstring): the
        navigator's STOP, step budget or (``stop`` False) acknowledgement of the sim's end, or
        a failure (``status`` policy_error / over_budget with ``error``)."""
        if self.reported is not None and self.reported[0] == self.episode:
            return
        info = {"episode": self.episode, "stop": stop, "stamp_ns": stamp}
        if status is not None:
            info.update(status=status, error=error)
        if self.vln is not None and self.policy is not None:
            backend = self.vln["backend_object"]
            info.update({"instruction": self.instruction, **self.policy.episode_info(),
                         "backend": getattr(backend, "name", ""), "model": str(getattr(backend, "model_name", "")),
                         "history_offsets": list(self.policy.prompts.history_offsets)})
            self.instruction = None  # the next instruction is the next episode's
        self.reported = (self.episode, json_message(info))
        self.report_pub.publish(self.reported[1])
        if stop and stamp is not None:
            self.answer = (self.report_pub, self.reported[1])
        if status is not None:
            self.get_logger().error(f"episode {self.episode}: {status}: {error}")

    # -- episodes --------------------------------------------------------------------------
    def on_episode_command(self, msg: String) -> None:
        try:
            scene_dir = str(json_payload(msg)["scene_dir"])
        except (ValueError, KeyError, TypeError) as exc:  # a bad command must not kill the node
            self.get_logger().error(f"bad episode/command {msg.data[:200]!r}: {exc}")
            return
        if scene_dir != self.policy_scene:
            self._warm_up(scene_dir)  # ahead of the episode

    def _task_of(self, status: dict):
        """The episode's task: the one its "started" status carries (sim_eval), or, on a vehicle
        (the bridge names the scene and task index), derived as sim_eval samples it."""
        from airplay.tasks.sampler import Task

        if "task" in status:
            return Task.from_dict(status["task"])
        if self.vehicle_tasks is None:
            self.vehicle_tasks = EpisodeTasks.from_parameters(self.params)
        return self.vehicle_tasks.task(str(status["scene_dir"]), status["index"])

    def on_episode_status(self, msg: String) -> None:
        try:
            status = json_payload(msg)
            started = status.get("status") == "started"
            scene_dir = str(status["scene_dir"]) if started else None
            released = self.gate.apply(status)
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/status {msg.data[:200]!r}: {exc}")
            return
        if not started:
            if self.vln is not None and self.policy is not None and status.get("episode") == self.episode:
                self.report(stop=False)  # the sim ended it (no-op when we stopped it)
            return
        if released is None:
            return  # not newer than the live episode (a repeat)
        self.episode = status.get("episode")
        self.pending, self.answer, self.reset_error = {}, None, None
        try:
            self.task = self._task_of(status)
            self._policy_for(scene_dir)
        except Exception as exc:
            from airplay.policies.guard import describe

            self.task, self.reset_error = None, describe(exc)
        if self.reset_error is None:
            from airplay.policies import guard

            self.reset_error = guard.reset(self.policy, self.task)
        if self.vln is not None and status.get("instruction"):
            self.instruction = str(status["instruction"])
        if self.on_vehicle and self.instruction is None:
            self._default_instruction(int(status["index"]))
        if self.goal_image is not None and self.goal_image[0] < self.gate.start_ns:
            self.goal_image = None
        for _, (key, item) in released:
            self.on_part(item, key)

    def _default_instruction(self, index: int) -> None:
        """On a vehicle with no instruction from the operator yet: the parameter's, or the VLN episode's."""
        if self.vln["instruction"]:
            self.instruction, source = self.vln["instruction"], "parameter 'instruction'"
        elif self.vln["episode_instruction"]:
            if self.vehicle_tasks is None:
                self.vehicle_tasks = EpisodeTasks.from_parameters(self.params)
            self.vehicle_tasks.load(self.policy_scene)
            self.instruction = self.vehicle_tasks.vln.episodes[index].instruction
            source = f"VLN episode {index} of {self.vehicle_tasks.world.name}"
        else:
            self.get_logger().info("waiting for the operator's instruction on 'instruction' (std_msgs/String)")
            return
        self.get_logger().info(f"instruction from {source}: {self.instruction!r}")

    def on_vehicle_odom(self, msg: Odometry) -> None:
        """On a vehicle: one command per odom (module docstring)."""
        from airplay.vln.action_executor import HOVER

        stamp = ns_from_stamp(msg.header.stamp)
        if self.gate.start_ns is None or stamp < self.gate.start_ns:
            return
        if self.reported is not None and self.reported[0] == self.episode:
            self.cmd_pub.publish(twist_from_command(HOVER, stamp))  # the episode is over: hover until landed
            return
        if self.instruction is None:
            return  # nothing to fly yet: the bridge's supervisor hovers
        rgb = self.latest.get("rgb")
        if self.policy.wants_image:
            if self.view_after is None:
                self.view_after = stamp
            if rgb is None or ns_from_stamp(rgb.header.stamp) < self.view_after:
                self.cmd_pub.publish(twist_from_command(HOVER, stamp))  # wait for a view from here
                return
            self.view_after = None
        state = state_from_odometry(msg)
        obs = {"rgb": rgb_from_image(rgb), "state": state.astype(np.float32), "instruction": self.instruction}
        if "depth" in self.latest:
            obs["depth"] = depth_from_image(self.latest["depth"])
        cmd = np.asarray(self.policy.select_action(obs), np.float32)
        if self.policy.done:
            self.report(stop=True, stamp=stamp)
            cmd = HOVER
            self.get_logger().info(f"navigator ended ({self.policy.stop_reason}) after {self.policy.steps} steps: "
                                   f"{self.policy.past_actions}")
        self.cmd_pub.publish(twist_from_command(cmd, stamp))

    # -- observations ----------------------------------------------------------------------
    def on_goal_image(self, msg: Image) -> None:
        self.goal_image = (ns_from_stamp(msg.header.stamp), rgb_from_image(msg))
        for stamp in sorted(self.pending):
            self.try_act(stamp)

    def on_part(self, msg, key: str) -> None:
        from airplay.world.lockstep import CURRENT, DUPLICATE, HELD

        stamp = ns_from_stamp(msg.header.stamp)
        verdict = self.gate.classify(stamp)
        self.gate_log.note(verdict, stamp)
        if verdict == HELD:
            self.gate.hold(stamp, (key, msg))
        elif verdict == DUPLICATE:
            if key == "state" and self.answer is not None:  # the sim asks again: our answer may have been lost
                self.answer[0].publish(self.answer[1])
        elif verdict == CURRENT:
            self.pending.setdefault(stamp, {})[key] = msg
            while len(self.pending) > MAX_PENDING_STAMPS:  # without lockstep, stamps whose parts never all come
                del self.pending[min(self.pending)]
            self.try_act(stamp)

    def try_act(self, stamp: int) -> None:
        parts = self.pending.get(stamp)
        if parts is None or len(parts) < 3 or not self.gate.live:
            return
        if self.setting == "imagegoal" and (self.goal_image is None or self.goal_image[0] != self.gate.start_ns):
            return
        if self.vln is not None and (self.instruction is None or self.reported is not None
                                     and self.reported[0] == self.episode):
            return  # no instruction for this episode yet, or the episode is over for the navigator
        from airplay.policies import guard

        self.pending = {s: v for s, v in self.pending.items() if s > stamp}
        self.gate.handled(stamp)
        if self.reset_error is not None:
            self.report(stop=True, stamp=stamp, status=guard.POLICY_ERROR, error=self.reset_error)
            return
        step = guard.act(self.policy, self._observation(parts), self.budget_ms)
        if step.status is not None:
            self.report(stop=True, stamp=stamp, status=step.status, error=step.error)
        elif self.vln is not None and self.policy.done:  # STOP or the budget: end the episode here
            self.report(stop=True, stamp=stamp)
        else:
            msg = twist_from_command(np.asarray(step.command, np.float32), stamp)
            self.cmd_pub.publish(msg)
            self.answer = (self.cmd_pub, msg)

    def _observation(self, parts: dict) -> dict:
        """The observation AirPlayEnv would give for this exact state and these images."""
        from airplay.world.env import goal_in_heading_frame

        state = self.state_of(parts["state"])
        obs = {"rgb": rgb_from_image(parts["rgb"]), "depth": depth_from_image(parts["depth"]),
               "state": state.astype(np.float32)}
        if self.setting == "pointgoal":
            obs["goal"] = goal_in_heading_frame(state[0:3], heading_of_state(state),
                                                self.task.goal_position).astype(np.float32)
        elif self.setting == "imagegoal":
            obs["goal_image"] = self.goal_image[1].copy()
        if self.vln is not None:
            obs["instruction"] = self.instruction
        return obs

    def destroy_node(self) -> None:
        import sys

        # print, not the logger: at shutdown rosout's publisher may be gone already
        print(f"observation frames by verdict: {GateLog.summary(self.gate)}", file=sys.stderr, flush=True)
        super().destroy_node()


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
