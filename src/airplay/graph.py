"""The ROS graphs, described once: which nodes, with which parameters and remappings.

Both ways of starting a graph read these descriptions: ``launch/sim_eval.launch.py`` under
``ros2 launch`` (a ROS 2 distribution, colcon build) and ``airplay launch sim_eval`` (the
pip ROS 2 wheels only: separate processes). No rclpy here (DESIGN.md section 1).

Launch arguments are ``key:=value`` strings (as ``ros2 launch`` takes them); each graph
lists the ones it accepts with defaults, and unknown keys are an error naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeSpec:
    """One node of a graph.

    name: ROS node name. module: Python module whose ``main(args)`` runs the node (what
    ``airplay launch`` starts with ``python -m``). executable: the console script
    installed to lib/airplay for ``ros2 launch`` / ``ros2 run``. parameters: ROS
    parameters (name -> bool/int/float/str). remappings: (from, to) topic pairs.
    required: the whole graph stops when this node exits (the evaluator).
    """

    name: str
    module: str
    executable: str
    parameters: dict = field(default_factory=dict)
    remappings: tuple = ()
    required: bool = False


SIM_EVAL_ARGUMENTS: dict[str, str] = {
    "scenes": "scenes",            # scene folders, comma-separated, or a folder of scenes;
                                   # relative paths are taken from each node's working folder
    "scene": "",                   # one scene folder (the same as scenes:=FOLDER)
    "policy": "expert",
    "checkpoint": "",              # checkpoint folder of a learned policy (act, dp, cnn_bc; airplay train --out)
    "execution_horizon": "0",      # controls executed per predicted chunk (0: the policy's own)
    "setting": "pointgoal",
    "episodes": "10",              # per scene
    "seed": "0",
    "out": "out/sim-eval-ros",     # results folder, relative to the evaluator's working folder
    "lockstep": "true",
    "command_timeout_s": "10.0",   # lockstep: bounded wall-clock wait for the policy's command
    "clock_rate_hz": "10.0",       # /clock per second of sim time (0: every 20 ms step); odom has every stamp
    "render_backend": "auto",
    "render_images": "true",
    "episode_timeout_s": "300.0",  # the evaluator's wall-clock limit per episode (then: no_command)
    "bootstrap": "1000",           # bootstrap resamples of the confidence intervals in summary.json
    # setting:=vln with policy:=airvln_r1 (README "Vision-language navigation"; airplay.vln.options)
    "vln_backend": "transformers",  # transformers (model:=DIR) or openai (endpoint:=URL)
    "model": "",                   # transformers: local Qwen2.5-VL folder (e.g. the AirVLN-R1 weights)
    "endpoint": "",                # openai: API base of an OpenAI-compatible server, http://127.0.0.1:8000/v1
    "served_model": "",            # openai: model name ("" = the server's first)
    "device": "cpu",               # transformers: cpu or cuda[:N]
    "max_new_tokens": "64",        # tokens per answer
    "image_size": "",              # W,H: resize the views sent to the model ("" = as rendered)
    "history_offsets": "",         # history views, steps back, e.g. -7,-4,-2,-1 ("" = that default)
    "vln_config": "",              # YAML instead of config/vln.yaml
    "vln_episodes": "",            # episode file (airplay's, or AirNav/CityNav-style) instead of sampling
}
"""Launch arguments of the sim_eval graph and their defaults."""


class GraphArgumentError(ValueError):
    """A launch argument that the graph does not accept or cannot parse."""


def parse_launch_arguments(tokens: list[str], accepted: dict[str, str]) -> dict[str, str]:
    """``["policy:=expert", ...]`` -> {key: value} over ``accepted``'s defaults."""
    values = dict(accepted)
    for token in tokens:
        if ":=" not in token:
            raise GraphArgumentError(f"launch argument {token!r} must look like key:=value")
        key, value = token.split(":=", 1)
        if key not in accepted:
            raise GraphArgumentError(f"unknown launch argument {key!r}; accepted: {', '.join(sorted(accepted))}")
        values[key] = value
    return values


def _flag(values: dict[str, str], key: str) -> bool:
    text = values[key].strip().lower()
    if text not in ("true", "false", "1", "0"):
        raise GraphArgumentError(f"launch argument {key}:={values[key]} must be true or false")
    return text in ("true", "1")


def _number(values: dict[str, str], key: str, kind=float):
    try:
        return kind(values[key])
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise GraphArgumentError(f"launch argument {key}:={values[key]} must be {what}") from None


def _choice(values: dict[str, str], key: str, choices: tuple[str, ...]) -> str:
    if values[key] not in choices:
        raise GraphArgumentError(f"launch argument {key}:={values[key]} must be one of {', '.join(choices)}")
    return values[key]


def sim_eval_graph(arguments: dict[str, str] | None = None) -> list[NodeSpec]:
    """The closed-loop evaluation graph: sim, renderer, policy, evaluator (DESIGN.md section 4)."""
    v = dict(SIM_EVAL_ARGUMENTS)
    v.update(arguments or {})
    if v["scene"]:
        v["scenes"] = v["scene"]
    _choice(v, "render_backend", ("auto", "cpu", "gsplat"))
    common = {"use_sim_time": True}
    episode = {
        "scenes": v["scenes"],
        "setting": _choice(v, "setting", ("pointgoal", "imagegoal", "goalfree", "vln")),
        "episodes": _number(v, "episodes", int),
        "seed": _number(v, "seed", int),
    }
    lockstep = _flag(v, "lockstep")
    timeout_s = _number(v, "command_timeout_s")
    render_images = _flag(v, "render_images")
    learned = {"checkpoint": v["checkpoint"], "execution_horizon": _number(v, "execution_horizon", int)}
    vln = _vln_arguments(v, episode, render_images)
    return [
        NodeSpec("sim", "airplay.nodes.sim_node", "sim_node",
                 {**common, **episode, "lockstep": lockstep, "command_timeout_s": timeout_s,
                  "clock_rate_hz": _number(v, "clock_rate_hz")}),
        NodeSpec("renderer", "airplay.nodes.renderer_node", "renderer_node",
                 {**common, **episode, "lockstep": lockstep, "render_backend": v["render_backend"],
                  "render_images": render_images}),
        NodeSpec("policy", "airplay.nodes.policy_node", "policy_node",
                 {**common, **episode, "lockstep": lockstep, "policy": v["policy"], **learned, **vln}),
        NodeSpec("evaluator", "airplay.nodes.evaluator_node", "evaluator_node",
                 {**common, **episode, "policy": v["policy"], **learned, "out": v["out"],
                  "render_images": render_images, "bootstrap": _number(v, "bootstrap", int),
                  "episode_timeout_s": _number(v, "episode_timeout_s")},
                 required=True),
    ]


_VLN_ARGUMENTS = ("vln_backend", "model", "endpoint", "served_model", "device", "max_new_tokens", "image_size",
                  "history_offsets", "vln_config", "vln_episodes")


def _vln_arguments(v: dict[str, str], episode: dict, render_images: bool) -> dict:
    """Setting vln: check the AirVLN-R1 arguments, add the episode ones (vln_config,
    vln_episodes) to ``episode`` (every node derives the episodes) and return the policy
    node's backend parameters; other settings: {} (and policy:=airvln_r1 is refused)."""
    vln_policy, vln_setting = v["policy"] == "airvln_r1", episode["setting"] == "vln"
    if vln_policy != vln_setting:
        raise GraphArgumentError("launch arguments policy:=airvln_r1 and setting:=vln go together "
                                 f"(got policy:={v['policy']} setting:={episode['setting']})")
    if not vln_setting:
        return {}
    if not render_images:
        raise GraphArgumentError("launch argument render_images:=false cannot be used with setting:=vln "
                                 "(AirVLN-R1 reads the camera)")
    from airplay.vln.options import EPISODE_OPTIONS, VLN_OPTIONS, VLNOptionError, parse_vln_options

    try:
        parse_vln_options({k: v[k] for k in VLN_OPTIONS})
    except VLNOptionError as exc:
        raise GraphArgumentError(str(exc).replace("parameter '", "launch argument '")) from None
    episode.update({k: v[k] for k in EPISODE_OPTIONS})
    return {k: v[k] for k in VLN_OPTIONS if k not in EPISODE_OPTIONS}


COLLECT_ARGUMENTS: dict[str, str] = {
    **{k: v for k, v in SIM_EVAL_ARGUMENTS.items()
       if k not in ("policy", "checkpoint", "execution_horizon", "out") and k not in _VLN_ARGUMENTS},
    "out": "bags",                 # the recorder's bags: OUT/<scene>/<task_id>/
    "results": "out/collect-ros",  # the evaluator's results of the expert flights
    "record_depth": "false",
    "split": "episode",            # episode | none (one bag for the run)
    "max_bytes": "0",              # split the bag's files at this many bytes (0: never)
    "topics": "",                  # the recorder's topics, comma-separated absolute names ("": its defaults)
}
"""Launch arguments of the collect graph (sim_eval with the expert, plus the recorder)."""


def collect_graph(arguments: dict[str, str] | None = None) -> list[NodeSpec]:
    """Expert demonstrations recorded from the live graph: sim_eval's nodes with the expert + ``recorder``."""
    v = dict(COLLECT_ARGUMENTS)
    v.update(arguments or {})
    nodes = sim_eval_graph({**{k: v[k] for k in SIM_EVAL_ARGUMENTS if k in v}, "policy": "expert", "out": v["results"]})
    sim = nodes[0].parameters
    recorder = {k: sim[k] for k in ("use_sim_time", "scenes", "setting", "episodes", "seed", "lockstep")}
    recorder.update(out=v["out"], record_depth=_flag(v, "record_depth"), split=_choice(v, "split", ("episode", "none")),
                    max_bytes=_number(v, "max_bytes", int), topics=v["topics"])
    return nodes + [NodeSpec("recorder", "airplay.nodes.recorder_node", "recorder_node", recorder)]


FLY_ARGUMENTS: dict[str, str] = {
    "connection": "udp:127.0.0.1:14540",  # MAVLink: udp:/udpin: listen, udpout:, tcp:, serial:DEVICE:BAUD
    "policy": "expert",
    "checkpoint": "",              # checkpoint folder of a learned policy (act, dp, cnn_bc)
    "execution_horizon": "0",      # controls executed per predicted chunk (0: the policy's own)
    "scene": "",                   # scene folder: the expert's task, and the rehearsal camera (renderer)
    "index": "0",                  # task index in the scene (as `airplay vehicle --scene --task`)
    "episodes": "10",
    "seed": "0",
    "setting": "",                 # "": pointgoal, or vln with policy:=airvln_r1
    "camera_topic": "",            # a real camera driver's RGB topic; empty: render the scene at odom
    "depth_topic": "",             # a real depth topic (with camera_topic)
    "render_backend": "auto",
    "render_images": "true",
    "takeoff_height_m": "1.5",
    "flight_time_s": "0",          # land after this long in the air under the policy (0: on `land`/`estop`)
    "command_timeout_s": "0.5",    # supervisor watchdog: hover when the newest cmd_vel is older
    "heartbeat_timeout_s": "1.5",
    "fence_box": "",               # x_min,y_min,x_max,y_max map metres ("": none)
    "fence_z_min": "nan",
    "fence_z_max": "nan",
    # policy:=airvln_r1 (README "Vision-language navigation", "On a vehicle"): the sim_eval VLN arguments, and
    "instruction": "",             # the instruction to fly ("": the operator's on the `instruction` topic; in a
                                   # rehearsal, the VLN episode's for (scene, index) when none has come)
    **{k: SIM_EVAL_ARGUMENTS[k] for k in _VLN_ARGUMENTS},
}
"""Launch arguments of the fly graph and their defaults."""


def fly_graph(arguments: dict[str, str] | None = None) -> list[NodeSpec]:
    """The policy on a vehicle: camera (the renderer at the vehicle's odom for a rehearsal, or a
    driver's topics remapped in), ``policy`` (not lockstep), ``mavlink_bridge`` (supervisor +
    MAVLink; required: the graph ends when it has landed). No sim (DESIGN.md sections 4 and 8)."""
    v = dict(FLY_ARGUMENTS)
    v.update(arguments or {})
    _choice(v, "render_backend", ("auto", "cpu", "gsplat"))
    if not v["scene"] and not v["camera_topic"]:
        raise GraphArgumentError("launch argument scene:=FOLDER is needed to rehearse (the renderer is the camera), "
                                 "or camera_topic:=TOPIC for a real camera")
    if v["depth_topic"] and not v["camera_topic"]:
        raise GraphArgumentError("launch argument depth_topic:= needs camera_topic:= as well")
    vln_policy = v["policy"] == "airvln_r1"
    v["setting"] = v["setting"] or ("vln" if vln_policy else "pointgoal")
    episode = {"scenes": v["scene"] or "scenes", "episodes": _number(v, "episodes", int), "seed": _number(v, "seed", int),
               "setting": _choice(v, "setting", ("pointgoal", "imagegoal", "goalfree", "vln"))}
    if vln_policy and not v["scene"]:
        raise GraphArgumentError("launch argument scene:=FOLDER is needed with policy:=airvln_r1 (the scene sets the "
                                 "action space's scale; in a rehearsal it is the camera and the episode)")
    if v["instruction"] and not vln_policy:
        raise GraphArgumentError(f"launch argument instruction:= goes with policy:=airvln_r1 (got policy:={v['policy']})")
    vln = _vln_arguments(v, episode, _flag(v, "render_images") or bool(v["camera_topic"]))
    if vln:  # on a vehicle: no evaluator (the policy node's docstring)
        vln.update(vehicle=True, instruction=v["instruction"], episode_instruction=not v["camera_topic"])
    bridge = {"connection": v["connection"], "scene_dir": v["scene"], "index": _number(v, "index", int)}
    for key in ("takeoff_height_m", "flight_time_s", "command_timeout_s", "heartbeat_timeout_s", "fence_z_min",
                "fence_z_max"):
        bridge[key] = _number(v, key)
    bridge["fence_box"] = v["fence_box"]
    bridge["land_on_policy_stop"] = True  # the policy's stop request (episode/policy "stop": true) lands
    remap = []
    if v["camera_topic"]:
        remap.append(("camera/image_raw", v["camera_topic"]))
        if v["depth_topic"]:
            remap.append(("camera/depth/image_raw", v["depth_topic"]))
    nodes = []
    if not v["camera_topic"]:
        nodes.append(NodeSpec("renderer", "airplay.nodes.renderer_node", "renderer_node",
                              {**episode, "lockstep": False, "render_backend": v["render_backend"],
                               "render_images": _flag(v, "render_images")}))
    nodes.append(NodeSpec("policy", "airplay.nodes.policy_node", "policy_node",
                          {**episode, "lockstep": False, "policy": v["policy"], "checkpoint": v["checkpoint"],
                           "execution_horizon": _number(v, "execution_horizon", int), **vln},
                          remappings=tuple(remap)))
    nodes.append(NodeSpec("mavlink_bridge", "airplay.nodes.mavlink_bridge_node", "mavlink_bridge_node", bridge,
                          required=True))
    return nodes


GRAPHS = {"sim_eval": (sim_eval_graph, SIM_EVAL_ARGUMENTS), "collect": (collect_graph, COLLECT_ARGUMENTS),
          "fly": (fly_graph, FLY_ARGUMENTS)}
"""Graph name -> (builder, accepted launch arguments)."""
