"""What both kinds of policy node share: the policy made from the parameters, the live episode,
the observation, and what the node publishes (:mod:`airplay.nodes.policy_node` picks the kind).

The policy is chosen by the ``policy`` parameter (:func:`airplay.policies.make_policy`); learned
ones (act, dp, cnn_bc) are loaded from the ``checkpoint`` folder, and ``execution_horizon``
(0 = the policy's own) sets how many controls of each predicted chunk are executed. With
``policy_backend:=onnxruntime`` a learned cnn_bc, act or dp runs from its ONNX export (``checkpoint``:
the export folder, or a checkpoint exported into CHECKPOINT/onnx; :mod:`airplay.policies.onnx_runtime`)
on one onnxruntime thread, with the same commands as torch's within the export's checked tolerance.
Each parameter is checked at start-up (errors name it), and the node loads what its policy
needs and nothing else (the expert: the scene's planning grid). The policy is made for the
first scene and warmed up (:mod:`airplay.policies.warmup`) before the node subscribes to
``episode/command``, and again ahead of each new scene named there, so that no kernel compiles
and no model loads inside an episode.

AirVLN-R1 (``policy:=airvln_r1``, setting vln): the navigator's backend comes from the
parameters ``vln_backend`` (transformers | openai), ``model`` (folder) or ``endpoint`` (URL),
``served_model``, ``device``, ``max_new_tokens``, ``image_size`` ("W,H"), ``history_offsets``
("-7,-4,-2,-1") and ``vln_config`` (:mod:`airplay.vln.options`; errors name the parameter); the
model is loaded (or the server asked for its model) at start-up, before the node joins the
graph. One navigator serves every scene, with the scene's action space.

The episode: at each ``episode/status`` "started" newer than the live one (as
:class:`airplay.world.lockstep.EpisodeGate` orders them) the task is the one the status carries
(sim_eval) or, where it names only ``scene_dir`` and ``index`` (the bridge on a vehicle), the
one sim_eval samples for them (:class:`airplay.nodes.common.EpisodeTasks`), and the node calls
``policy.reset(task)`` (the expert is privileged and plans from it) through
:mod:`airplay.policies.guard`. The VLN instruction carried by the status is the episode's.

The observation is the dict AirPlayEnv builds: ``rgb`` (H, W, 3) uint8, ``depth`` (H, W, 1)
float32 m along the optical axis, ``state`` float32 13-vector (position m in map, quaternion
xyzw of base_link in map, velocity m/s in MAP, body rates rad/s), and ``goal`` (pointgoal: the
goal minus the position in m, in the yaw-only heading frame x forward, y left, z up) or
``goal_image`` (imagegoal, like ``rgb``), and ``instruction`` (vln).

Published: ``cmd_vel`` (geometry_msgs/TwistStamped, heading frame ``base_stabilized``: vx, vy,
vz m/s, yaw rate rad/s; stamped with the observation's stamp; in lockstep
:data:`~airplay.nodes.common.LOCKSTEP_STREAM`, else reliable depth 10), and ``episode/policy``
(std_msgs/String JSON, reliable): the policy's last word on an episode, {"episode", "stop",
"stamp_ns"} with "status" and "error" for a failure (policy_error, over_budget) and, for
AirVLN-R1, {"stop_reason", "vln_steps", "queries", "format_failures", "model_time_s",
"actions", "backend", "model", "history_offsets", "instruction"}. The node forgets the
instruction before it sends the report, so the next instruction is the next episode's.
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import NamedTuple

import numpy as np
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from sensor_msgs.msg import Image
from std_msgs.msg import String

from airplay.frames import heading_of_state
from airplay.nodes.common import (CONTROL_DT_NS, LOCKSTEP_STREAM, RELIABLE, EpisodeTasks, ParameterError, WorldCache,
                                  depth_from_image, episode_parameters, first_scene, json_message, json_payload,
                                  one_compute_thread, rgb_from_image, twist_from_command)


class EpisodeStart(NamedTuple):
    """An episode that has just started here (:meth:`PolicyCore.on_episode_status`)."""

    status: dict
    """Its ``episode/status`` "started" payload."""
    released: list
    """(stamp ns, (part, message)) the gate held for it, oldest first: the kind handles them now."""
    reset_error: str | None
    """Why making the task or the policy, or ``policy.reset``, failed (None: it did not)."""


class PolicyCore:
    """The policy of a ``policy`` node (module docstring), with the node's publishers and its
    live episode. ``values``: the node's declared parameters (airplay.node_schemas.POLICY_NODE).

    Raises :class:`~airplay.nodes.common.ParameterError` naming the parameter that is wrong."""

    def __init__(self, node: Node, values: dict) -> None:
        from airplay.policies import POLICY_NAMES, is_policy_name, reads_vln_options
        from airplay.world.lockstep import EpisodeGate

        self.node = node
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
        self._check_policy_parameters()
        if self.setting == "vln" and not reads_vln_options(self.policy_name):
            raise ParameterError(f"parameter 'policy' must be airvln_r1 in the vln setting, got {self.policy_name!r}")
        self.vln = self._vln_backend(values) if reads_vln_options(self.policy_name) else None
        """AirVLN-R1's options (:func:`airplay.vln.options.parse_vln_options`) with its loaded
        backend as "backend_object"; None for a policy that reads no VLN options."""
        self.on_vehicle = self.vln is not None and values["vehicle"]
        """AirVLN-R1 on a vehicle (``vehicle:=true``): the node is a vehicle node."""
        self.worlds = WorldCache()
        self.policy = None
        self.policy_scene = None    # the scene folder the policy was made for
        self.gate = EpisodeGate(CONTROL_DT_NS, self.lockstep)
        """The live episode: its number and start stamp (ns sim time), and which stamps belong to it."""
        self.episode = None         # the sim's (or the bridge's) episode number of the live episode
        self.task = None            # its task (None: it could not be made)
        self.instruction = None     # vln: the text of the current episode (None: not received yet)
        self.reported = None        # the episode whose report was sent, and that report
        scene = first_scene(p["scenes"])
        if scene is not None:
            self.warm_up(scene)
        self.cmd_pub = node.create_publisher(TwistStamped, "cmd_vel", LOCKSTEP_STREAM if self.lockstep else RELIABLE)
        self.report_pub = node.create_publisher(String, "episode/policy", RELIABLE)

    # -- parameters ------------------------------------------------------------------------
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

    def _vln_backend(self, values: dict) -> dict:
        """Check the VLN parameters and load the backend (the model) now, naming the parameter on error."""
        from airplay.vln.backends import BackendError, make_backend
        from airplay.vln.options import EPISODE_OPTIONS, VLN_OPTIONS, VLNOptionError, parse_vln_options

        if self.setting != "vln":
            raise ParameterError(f"parameter 'setting' must be vln for policy airvln_r1, got {self.setting!r}")
        if (values["instruction"] or values["episode_instruction"]) and not values["vehicle"]:
            raise ParameterError("parameters 'instruction' and 'episode_instruction' are for a vehicle "
                                 "(vehicle:=true); in sim_eval the evaluator sends each episode's instruction")
        try:
            o = parse_vln_options({**{k: values[k] for k in VLN_OPTIONS if k not in EPISODE_OPTIONS},
                                   **{k: self.params[k] or "" for k in EPISODE_OPTIONS}})
        except VLNOptionError as exc:
            raise ParameterError(str(exc)) from None
        try:
            backend = make_backend(o["backend"], model=o["model"], endpoint=o["endpoint"], device=o["device"],
                                   max_new_tokens=o["max_new_tokens"], served_model=o["served_model"])
        except BackendError as exc:
            name = ("device" if str(exc).startswith("device ") else
                    "model" if o["backend"] == "transformers" else "endpoint")
            raise ParameterError(f"parameter '{name}': {exc}") from None
        return {**o, "backend_object": backend}

    # -- the policy ------------------------------------------------------------------------
    def warm_up(self, scene_dir: str) -> None:
        """Make the policy for ``scene_dir`` and call it once (module docstring). The navigator
        (AirVLN-R1) is not called: its model was loaded with the node, and a call costs a real query."""
        from airplay.policies.warmup import warm_policy

        log = self.node.get_logger()
        t0 = time.monotonic()
        try:
            self.policy_for(scene_dir)
        except Exception as exc:  # reported again, with the episode, when it starts
            log.warning(f"could not make the {self.policy_name} policy for {scene_dir}: {exc}")
            return
        if self.vln is None:
            error = warm_policy(self.policy, self.worlds.get(scene_dir), self.setting)
            if error is not None:
                log.warning(f"the {self.policy_name} policy failed its warm-up: {error}")
        backend = f" ({self.policy_backend})" if self.policy_backend != "torch" else ""
        log.info(f"{self.policy_name} policy ready in {time.monotonic() - t0:.1f} s{backend}")

    def policy_for(self, scene_dir: str):
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

    def on_episode_command(self, msg: String) -> None:
        """``episode/command`` (the evaluator's next episode): make the policy for a new scene ahead of it."""
        try:
            scene_dir = str(json_payload(msg)["scene_dir"])
        except (ValueError, KeyError, TypeError) as exc:  # a bad command must not kill the node
            self.node.get_logger().error(f"bad episode/command {msg.data[:200]!r}: {exc}")
            return
        if scene_dir != self.policy_scene:
            self.warm_up(scene_dir)  # ahead of the episode

    # -- the episode -----------------------------------------------------------------------
    @cached_property
    def tasks(self) -> EpisodeTasks:
        """The tasks per scene as sim_eval samples them, made when first asked for (a vehicle's
        episode names its scene and task index only)."""
        return EpisodeTasks.from_parameters(self.params)

    def _task_of(self, status: dict):
        """The episode's task: the one its "started" status carries (sim_eval), or, on a vehicle
        (the bridge names the scene and task index), derived as sim_eval samples it."""
        from airplay.tasks.sampler import Task

        if "task" in status:
            return Task.from_dict(status["task"])
        return self.tasks.task(str(status["scene_dir"]), status["index"])

    def on_episode_status(self, msg: String) -> EpisodeStart | None:
        """Apply an ``episode/status``: a terminal one of the live episode gets the navigator's
        report with "stop": false (the sim ended it first; nothing when the policy stopped it); a
        "started" one newer than the live episode starts it (module docstring) and is returned.
        None for anything else (a repeat, an end; a bad message is logged)."""
        try:
            status = json_payload(msg)
            started = status.get("status") == "started"
            scene_dir = str(status["scene_dir"]) if started else None
            released = self.gate.apply(status)
        except (ValueError, KeyError, TypeError) as exc:
            self.node.get_logger().error(f"bad episode/status {msg.data[:200]!r}: {exc}")
            return None
        if not started:
            if self.vln is not None and self.policy is not None and status.get("episode") == self.episode:
                self.report(stop=False)  # the sim ended it (no-op when we stopped it)
            return None
        if released is None:
            return None  # not newer than the live episode (a repeat)
        self.episode = status.get("episode")
        reset_error = None
        try:
            self.task = self._task_of(status)
            self.policy_for(scene_dir)
        except Exception as exc:
            from airplay.policies.guard import describe

            self.task, reset_error = None, describe(exc)
        if reset_error is None:
            from airplay.policies import guard

            reset_error = guard.reset(self.policy, self.task)
        if self.vln is not None and status.get("instruction"):
            self.instruction = str(status["instruction"])
        return EpisodeStart(status, released, reset_error)

    @property
    def episode_over(self) -> bool:
        """The policy has sent its report on the live episode (its STOP, a failure, the sim's end)."""
        return self.reported is not None and self.reported[0] == self.episode

    # -- output ----------------------------------------------------------------------------
    def observation(self, state: np.ndarray, rgb: Image, depth: Image | None = None,
                    goal_image: np.ndarray | None = None) -> dict:
        """The observation AirPlayEnv would give (module docstring) for the (13,) ``state`` and
        these images; ``depth`` left out where None, ``goal_image`` (H, W, 3) uint8 for imagegoal."""
        from airplay.world.env import goal_in_heading_frame

        obs = {"rgb": rgb_from_image(rgb)}
        if depth is not None:
            obs["depth"] = depth_from_image(depth)
        obs["state"] = state.astype(np.float32)
        if self.setting == "pointgoal":
            obs["goal"] = goal_in_heading_frame(state[0:3], heading_of_state(state),
                                                self.task.goal_position).astype(np.float32)
        elif self.setting == "imagegoal":
            obs["goal_image"] = goal_image.copy()
        if self.vln is not None:
            obs["instruction"] = self.instruction
        return obs

    def send_command(self, cmd: np.ndarray, stamp_ns: int) -> TwistStamped:
        """Publish the (4,) heading-frame command [vx, vy, vz m/s, yaw rate rad/s] on ``cmd_vel``
        stamped ``stamp_ns`` (the observation's stamp); returns the message sent."""
        msg = twist_from_command(np.asarray(cmd, np.float32), stamp_ns)
        self.cmd_pub.publish(msg)
        return msg

    def report(self, stop: bool, stamp: int | None = None, status: str | None = None,
               error: str | None = None) -> String | None:
        """The policy's end of the episode on ``episode/policy`` (module docstring): the
        navigator's STOP, step budget or (``stop`` False) acknowledgement of the sim's end, or
        a failure (``status`` policy_error / over_budget with ``error``). Returns the message
        sent, or None where the live episode's report was sent already."""
        if self.episode_over:
            return None
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
        if status is not None:
            self.node.get_logger().error(f"episode {self.episode}: {status}: {error}")
        return self.reported[1]
