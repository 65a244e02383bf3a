"""The ROS graphs, described once: which nodes, with which parameters and remappings.

Both ways of starting a graph read these descriptions: ``launch/sim_eval.launch.py`` under
``ros2 launch`` (a ROS 2 distribution, colcon build) and ``airplay launch sim_eval`` (the
pip ROS 2 wheels only: separate processes). No rclpy here (DESIGN.md section 1).

Launch arguments are ``key:=value`` strings (as ``ros2 launch`` takes them); each graph
lists the ones it accepts, each with its default and description (:class:`LaunchArgument`:
the launch files declare them from here, ``airplay launch GRAPH --help`` prints them), and
unknown keys are an error naming the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from airplay import node_schemas as schemas
from airplay.bridge.parameters import BRIDGE_SCHEMA, FLY_GRAPH_SETS, BridgeParameterError, coerce, flight_settings
from airplay.node_params import Param, launch_text
from airplay.policies.registry import reads_vln_options


@dataclass(frozen=True)
class NodeSpec:
    """One node of a graph.

    name: ROS node name. module: Python module whose ``main(args)`` runs the node (what
    ``airplay launch`` starts with ``python -m``). executable: the console script
    installed to lib/airplay for ``ros2 launch`` / ``ros2 run``. parameters: ROS
    parameters (name -> bool/int/float/str). remappings: (from, to) topic pairs.
    required: the whole graph stops when this node exits (the evaluator). stop_grace_s:
    seconds between the signals that stop it (SIGINT, then SIGTERM, then SIGKILL; both
    launchers; None: the launcher's default, 5 s), e.g. longer for the bridge, which lands
    before it exits.
    """

    name: str
    module: str
    executable: str
    parameters: dict = field(default_factory=dict)
    remappings: tuple = ()
    required: bool = False
    stop_grace_s: float | None = None


@dataclass(frozen=True)
class LaunchArgument:
    """One launch argument: its default (a ``key:=value`` string, as ``ros2 launch`` takes it)
    and the one-line description that ``ros2 launch ... --show-args`` and ``airplay launch
    GRAPH --help`` print."""

    default: str
    description: str


def defaults(arguments: dict[str, LaunchArgument]) -> dict[str, str]:
    """{key: default} of a graph's launch arguments."""
    return {key: argument.default for key, argument in arguments.items()}


_A = LaunchArgument

def _from_schema(param: Param, description: str | None = None) -> LaunchArgument:
    """The launch argument that sets node parameter ``param``: its default, and its description
    (or ``description`` where the graph gives the argument a narrower meaning)."""
    return LaunchArgument(launch_text(param.default), description or param.description())


def _schema_arguments(schema, names) -> dict[str, LaunchArgument]:
    return {name: _from_schema(schema[name]) for name in names}


_VIEWER_ARGUMENTS: dict[str, LaunchArgument] = {
    "viewer": _A("false", "true: add the viewer node, which streams the run to rerun (camera, depth, trajectory and "
                          "goal over the scene, commands, episode status) and serves rerun's web viewer on "
                          "127.0.0.1:viewer_web_port while the graph runs (or writes viewer_out)"),
    **{f"viewer_{name}": _from_schema(schemas.VIEWER[name]) for name in ("out", "connect", "web_port", "grpc_port")},
}
"""The live view's launch arguments (airplay.nodes.viewer_node; docs/evaluation.md, docs/vehicle.md)."""


SIM_EVAL_ARGUMENTS: dict[str, LaunchArgument] = {
    "scenes": _from_schema(schemas.EPISODE["scenes"]),
    "scene": _A("", "one scene folder (the same as scenes:=FOLDER, and used instead of it when given)"),
    **_schema_arguments(schemas.EVALUATOR, ("policy", "checkpoint", "execution_horizon", "setting", "episodes",
                                            "seed", "out")),
    "policy_backend": _from_schema(schemas.POLICY_BACKEND),
    "lockstep": _from_schema(schemas.LOCKSTEP),
    "policy_budget_ms": _from_schema(schemas.POLICY_BUDGET_MS),
    "clock_rate_hz": _from_schema(schemas.SIM["clock_rate_hz"]),
    "wind": _from_schema(schemas.WIND),
    "render_backend": _from_schema(schemas.RENDERER["render_backend"]),
    "render_images": _from_schema(schemas.RENDER_IMAGES),
    "bootstrap": _from_schema(schemas.EVALUATOR["bootstrap"]),
    # setting:=vln with policy:=airvln_r1 (docs/vln.md; airplay.vln.options)
    **{p.name: _from_schema(p) for p in schemas.VLN_BACKEND},
    **_schema_arguments(schemas.EPISODE, ("vln_config", "vln_episodes")),
    # the live view (airplay.nodes.viewer_node, docs/evaluation.md)
    **_VIEWER_ARGUMENTS,
}
"""Launch arguments of the sim_eval graph: default and description of each."""


class GraphArgumentError(ValueError):
    """A launch argument that the graph does not accept or cannot parse."""


def unknown_argument_message(key: str, accepted) -> str:
    """The error for a launch argument ``key`` that is not among ``accepted`` (names)."""
    return f"unknown launch argument {key!r}; accepted: {', '.join(sorted(accepted))}"


def parse_launch_arguments(tokens: list[str], accepted: dict[str, LaunchArgument]) -> dict[str, str]:
    """``["policy:=expert", ...]`` -> {key: value} over ``accepted``'s defaults; a token that is
    not ``key:=value`` or names a key not in ``accepted`` is a GraphArgumentError naming it."""
    values = defaults(accepted)
    for token in tokens:
        if ":=" not in token:
            raise GraphArgumentError(f"launch argument {token!r} must look like key:=value")
        key, value = token.split(":=", 1)
        if key not in accepted:
            raise GraphArgumentError(unknown_argument_message(key, accepted))
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


def _budget_ms(values: dict[str, str], key: str) -> float:
    budget = _number(values, key)
    if not (budget >= 0.0 and math.isfinite(budget)):
        raise GraphArgumentError(f"launch argument {key}:={values[key]} must be a number >= 0 (0: no budget)")
    return budget


def _wind(values: dict[str, str], key: str) -> str:
    from airplay.sim.disturbance import Disturbance, DisturbanceError

    try:
        Disturbance.parse(values[key])
    except DisturbanceError as exc:
        raise GraphArgumentError(f"launch argument {key}:={values[key]}: {exc}") from None
    return values[key]


def _choice(values: dict[str, str], key: str, choices: tuple[str, ...]) -> str:
    if values[key] not in choices:
        raise GraphArgumentError(f"launch argument {key}:={values[key]} must be one of {', '.join(choices)}")
    return values[key]


def _default(param: Param):
    return field(default=param.default)


@dataclass(frozen=True)
class SimEvalConfig:
    """The sim_eval graph's settings, typed (defaults: the node schemas'). ``scenes``: scene
    folders, comma-separated (relative paths are taken from each node's working folder).
    ``vln``: setting vln, the AirVLN-R1 options by launch argument name (vln_backend, model,
    ..., vln_config, vln_episodes; missing ones take their defaults)."""

    scenes: str = _default(schemas.EPISODE["scenes"])
    policy: str = _default(schemas.POLICY)
    checkpoint: str = _default(schemas.CHECKPOINT)
    execution_horizon: int = _default(schemas.EXECUTION_HORIZON)
    policy_backend: str = _default(schemas.POLICY_BACKEND)
    setting: str = _default(schemas.EPISODE["setting"])
    episodes: int = _default(schemas.EPISODE["episodes"])
    seed: int = _default(schemas.EPISODE["seed"])
    out: str = _default(schemas.EVALUATOR["out"])
    lockstep: bool = _default(schemas.LOCKSTEP)
    policy_budget_ms: float = _default(schemas.POLICY_BUDGET_MS)
    clock_rate_hz: float = _default(schemas.SIM["clock_rate_hz"])
    wind: str = _default(schemas.WIND)
    render_backend: str = _default(schemas.RENDERER["render_backend"])
    render_images: bool = _default(schemas.RENDER_IMAGES)
    bootstrap: int = _default(schemas.EVALUATOR["bootstrap"])
    vln: dict = field(default_factory=dict)
    viewer: bool = False
    viewer_out: str = _default(schemas.VIEWER["out"])
    viewer_connect: str = _default(schemas.VIEWER["connect"])
    viewer_web_port: int = _default(schemas.VIEWER["web_port"])
    viewer_grpc_port: int = _default(schemas.VIEWER["grpc_port"])


def sim_eval_config(arguments: dict[str, str] | None = None) -> SimEvalConfig:
    """The sim_eval graph's launch arguments (key -> text, over their defaults) parsed into its
    typed settings; GraphArgumentError naming the argument that cannot be parsed."""
    v = defaults(SIM_EVAL_ARGUMENTS)
    v.update(arguments or {})
    return SimEvalConfig(
        scenes=v["scene"] or v["scenes"], policy=v["policy"], checkpoint=v["checkpoint"],
        execution_horizon=_number(v, "execution_horizon", int),
        policy_backend=_choice(v, "policy_backend", schemas.POLICY_BACKENDS),
        setting=_choice(v, "setting", schemas.SETTINGS), episodes=_number(v, "episodes", int),
        seed=_number(v, "seed", int), out=v["out"], lockstep=_flag(v, "lockstep"),
        policy_budget_ms=_budget_ms(v, "policy_budget_ms"), clock_rate_hz=_number(v, "clock_rate_hz"),
        wind=_wind(v, "wind"),
        render_backend=_choice(v, "render_backend", schemas.RENDER_BACKENDS),
        render_images=_flag(v, "render_images"), bootstrap=_number(v, "bootstrap", int),
        vln={k: v[k] for k in _VLN_ARGUMENTS}, viewer=_flag(v, "viewer"), viewer_out=v["viewer_out"],
        viewer_connect=v["viewer_connect"], viewer_web_port=_port(v, "viewer_web_port"),
        viewer_grpc_port=_port(v, "viewer_grpc_port"))


def _port(values: dict[str, str], key: str) -> int:
    port = _number(values, key, int)
    if not 1 <= port <= 65535:
        raise GraphArgumentError(f"launch argument {key}:={values[key]} must be a port number 1..65535")
    return port


def sim_eval_graph(arguments: dict[str, str] | None = None) -> list[NodeSpec]:
    """The closed-loop evaluation graph from its launch arguments (:func:`sim_eval_config`)."""
    return sim_eval_nodes(sim_eval_config(arguments))


def sim_eval_nodes(cfg: SimEvalConfig) -> list[NodeSpec]:
    """The closed-loop evaluation graph: sim, renderer, policy, evaluator (DESIGN.md section 4),
    and with ``viewer`` the viewer node (:mod:`airplay.nodes.viewer_node`)."""
    common = {"use_sim_time": True}
    episode = {"scenes": cfg.scenes, "setting": cfg.setting, "episodes": cfg.episodes, "seed": cfg.seed}
    lockstep, budget_ms, render_images = cfg.lockstep, float(cfg.policy_budget_ms), cfg.render_images
    learned = {"checkpoint": cfg.checkpoint, "execution_horizon": cfg.execution_horizon}
    vln_values = {p.name: p.default for p in schemas.VLN_BACKEND}
    vln_values.update({"vln_config": "", "vln_episodes": "", **cfg.vln, "policy": cfg.policy})
    vln = _vln_arguments(vln_values, episode, render_images)
    wind = {"wind": cfg.wind} if cfg.wind else {}  # absent when off: the nodes' default, no disturbance
    return [
        NodeSpec("sim", "airplay.nodes.sim_node", "sim_node",
                 {**common, **episode, "lockstep": lockstep, "clock_rate_hz": float(cfg.clock_rate_hz),
                  **wind}),
        NodeSpec("renderer", "airplay.nodes.renderer_node", "renderer_node",
                 {**common, **episode, "lockstep": lockstep, "render_backend": cfg.render_backend,
                  "render_images": render_images}),
        NodeSpec("policy", "airplay.nodes.policy_node", "policy_node",
                 {**common, **episode, "lockstep": lockstep, "policy": cfg.policy, **learned,
                  "policy_backend": cfg.policy_backend, "policy_budget_ms": budget_ms, **vln}),
        NodeSpec("evaluator", "airplay.nodes.evaluator_node", "evaluator_node",
                 {**common, **episode, "policy": cfg.policy, **learned, "out": cfg.out,
                  "render_images": render_images, "bootstrap": cfg.bootstrap,
                  "policy_budget_ms": budget_ms, **wind, **({"viewer": True} if cfg.viewer else {})},
                 required=True),
    ] + ([NodeSpec("viewer", "airplay.nodes.viewer_node", "viewer_node",
                   {**common, **episode, "lockstep": lockstep, "render_images": render_images,
                    "out": cfg.viewer_out, "connect": cfg.viewer_connect, "web_port": cfg.viewer_web_port,
                    "grpc_port": cfg.viewer_grpc_port})] if cfg.viewer else [])


_VLN_ARGUMENTS = (*(p.name for p in schemas.VLN_BACKEND), "vln_config", "vln_episodes")


def _vln_arguments(v: dict[str, str], episode: dict, render_images: bool) -> dict:
    """Setting vln: check the AirVLN-R1 arguments, add the episode ones (vln_config,
    vln_episodes) to ``episode`` (every node derives the episodes) and return the policy
    node's backend parameters; other settings: {} (and policy:=airvln_r1 is refused)."""
    vln_policy, vln_setting = reads_vln_options(v["policy"]), episode["setting"] == "vln"
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
    return {k: schemas.POLICY_NODE[k].coerce(v[k]) for k in VLN_OPTIONS if k not in EPISODE_OPTIONS}


COLLECT_ARGUMENTS: dict[str, LaunchArgument] = {
    **{k: v for k, v in SIM_EVAL_ARGUMENTS.items()
       if k not in ("policy", "checkpoint", "execution_horizon", "policy_backend", "out") and k not in _VLN_ARGUMENTS},
    "out": _from_schema(schemas.RECORDER["out"]),
    "results": _A("out/collect-ros", "the evaluator's results folder for the expert flights"),
    **_schema_arguments(schemas.RECORDER, ("record_depth", "split", "max_bytes", "topics")),
}
"""Launch arguments of the collect graph (sim_eval with the expert, plus the recorder)."""


def collect_graph(arguments: dict[str, str] | None = None) -> list[NodeSpec]:
    """Expert demonstrations recorded from the live graph: sim_eval's nodes with the expert + ``recorder``."""
    v = defaults(COLLECT_ARGUMENTS)
    v.update(arguments or {})
    nodes = sim_eval_graph({**{k: v[k] for k in SIM_EVAL_ARGUMENTS if k in v}, "policy": "expert", "out": v["results"]})
    sim = nodes[0].parameters
    recorder = {k: sim[k] for k in ("use_sim_time", "scenes", "setting", "episodes", "seed", "lockstep")}
    recorder.update(out=v["out"], record_depth=_flag(v, "record_depth"),
                    split=_choice(v, "split", schemas.RECORDER["split"].choices),
                    max_bytes=_number(v, "max_bytes", int), topics=v["topics"])
    return nodes + [NodeSpec("recorder", "airplay.nodes.recorder_node", "recorder_node", recorder)]


FLY_ARGUMENTS: dict[str, LaunchArgument] = {
    "connection": _from_schema(BRIDGE_SCHEMA["connection"]),
    **_schema_arguments(schemas.POLICY_NODE, ("policy", "checkpoint", "execution_horizon", "policy_backend")),
    "scene": _A("", "scene folder: the expert's task, and the rehearsal camera (the renderer)"),
    "index": _from_schema(BRIDGE_SCHEMA["index"], "task index in the scene (as airplay vehicle --scene --task)"),
    "episodes": _from_schema(schemas.EPISODE["episodes"], "tasks sampled in the scene (index picks one of them)"),
    "seed": _from_schema(schemas.EPISODE["seed"]),
    "setting": _A("", "task setting (empty: pointgoal, or vln with policy:=airvln_r1)"),
    "camera_topic": _A("", "a real camera driver's RGB topic (empty: render the scene at odom)"),
    "depth_topic": _A("", "a real depth topic (with camera_topic)"),
    "render_backend": _from_schema(schemas.RENDERER["render_backend"], "renderer backend of a rehearsal: auto, cpu "
                                                                       "or gsplat (CUDA)"),
    "render_images": _from_schema(schemas.RENDER_IMAGES, "render RGB and depth in a rehearsal (false: zero images)"),
    # every mavlink_bridge parameter (airplay.bridge.parameters), under its own name:
    **{p.name: _from_schema(p, "mavlink_bridge: " + p.description())
       for p in BRIDGE_SCHEMA if p.name not in FLY_GRAPH_SETS and p.name != "connection"},
    # policy:=airvln_r1 (docs/vln.md, docs/vehicle.md): the sim_eval VLN arguments, and
    "instruction": _from_schema(schemas.POLICY_NODE["instruction"], "policy:=airvln_r1: the instruction to fly "
                                "(empty: the operator's on the instruction topic; in a rehearsal, the VLN episode's "
                                "for (scene, index) when none has come)"),
    **{k: SIM_EVAL_ARGUMENTS[k] for k in _VLN_ARGUMENTS},
    "record": _A("", "a folder: add the recorder, which writes the flight as an MCAP bag, OUT/<scene>/<task_id>/ (the "
                     "images the policy saw, odom, its commands, the mission's statuses and result, the map tie, the "
                     "phases; /vehicle/truth where a simulator publishes it): airplay replay checks a policy against it"),
    # the live view of the flight (airplay.nodes.viewer_node with vehicle:=true; docs/vehicle.md)
    **_VIEWER_ARGUMENTS,
    "viewer": _A("false", "true: add the viewer node, which streams the flight to rerun (camera, trajectory and goal "
                          "over the scene, commands, the vehicle's phases and the supervisor's interventions) and "
                          "serves rerun's web viewer on 127.0.0.1:viewer_web_port (or writes viewer_out)"),
}
"""Launch arguments of the fly graph: default and description of each."""


FLY_RECORD_TOPICS = ("/camera/image_raw", "/camera/depth/image_raw", "/camera/camera_info", "/odom", "/cmd_vel",
                     "/episode/status", "/episode/policy", "/mission/result", "/vehicle/map_tie", "/vehicle/phase",
                     "/vehicle/mode", "/supervisor/interventions", "/vehicle/truth")
"""What ``record:=`` records of a flight (``/vehicle/truth``: a simulator's true pose, where one
publishes it, as the SITL harness does)."""


def fly_graph(arguments: dict[str, str] | None = None) -> list[NodeSpec]:
    """The policy on a vehicle: camera (the renderer at the vehicle's odom for a rehearsal, or a
    driver's topics remapped in), ``policy`` (not lockstep), ``mavlink_bridge`` (supervisor +
    MAVLink; required: the graph ends when it has landed). No sim (DESIGN.md sections 4 and 8)."""
    v = defaults(FLY_ARGUMENTS)
    v.update(arguments or {})
    _choice(v, "render_backend", schemas.RENDER_BACKENDS)
    if not v["scene"] and not v["camera_topic"]:
        raise GraphArgumentError("launch argument scene:=FOLDER is needed to rehearse (the renderer is the camera), "
                                 "or camera_topic:=TOPIC for a real camera")
    if v["depth_topic"] and not v["camera_topic"]:
        raise GraphArgumentError("launch argument depth_topic:= needs camera_topic:= as well")
    vln_policy = reads_vln_options(v["policy"])
    v["setting"] = v["setting"] or ("vln" if vln_policy else "pointgoal")
    episode = {"scenes": v["scene"] or "scenes", "episodes": _number(v, "episodes", int),
               "seed": _number(v, "seed", int), "setting": _choice(v, "setting", schemas.SETTINGS)}
    if vln_policy and not v["scene"]:
        raise GraphArgumentError("launch argument scene:=FOLDER is needed with policy:=airvln_r1 (the scene sets the "
                                 "action space's scale; in a rehearsal it is the camera and the episode)")
    if v["instruction"] and not vln_policy:
        raise GraphArgumentError("launch argument instruction:= goes with policy:=airvln_r1 "
                                 f"(got policy:={v['policy']})")
    vln = _vln_arguments(v, episode, _flag(v, "render_images") or bool(v["camera_topic"]))
    if vln:  # on a vehicle: no evaluator (the policy node's docstring)
        vln.update(vehicle=True, instruction=v["instruction"], episode_instruction=not v["camera_topic"])
    bridge = _bridge_parameters(v, episode)
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
                           "execution_horizon": _number(v, "execution_horizon", int),
                           "policy_backend": _choice(v, "policy_backend", schemas.POLICY_BACKENDS), **vln},
                          remappings=tuple(remap)))
    if _flag(v, "viewer"):  # it publishes nothing: the flight is the same without it
        nodes.append(NodeSpec("viewer", "airplay.nodes.viewer_node", "viewer_node",
                              {**episode, "lockstep": False, "vehicle": True,
                               "render_images": _flag(v, "render_images") or bool(v["camera_topic"]),
                               "out": v["viewer_out"], "connect": v["viewer_connect"],
                               "web_port": _port(v, "viewer_web_port"), "grpc_port": _port(v, "viewer_grpc_port")},
                              remappings=tuple(remap)))
    if v["record"]:
        if not v["scene"]:
            raise GraphArgumentError("launch argument record:= needs scene:= (a bag is one task's flight)")
        nodes.append(NodeSpec("recorder", "airplay.nodes.recorder_node", "recorder_node",
                              {**episode, "lockstep": False, "out": v["record"], "split": "episode",
                               "record_depth": True, "topics": ",".join(FLY_RECORD_TOPICS)}))
    # Ctrl-C while airborne: the bridge lands and waits for the touchdown before it exits
    nodes.append(NodeSpec("mavlink_bridge", "airplay.nodes.mavlink_bridge_node", "mavlink_bridge_node", bridge,
                          required=True, stop_grace_s=bridge["shutdown_timeout_s"] + 5.0))
    return nodes


def _bridge_parameters(v: dict[str, str], episode: dict) -> dict:
    """The mavlink_bridge node's parameters from the fly graph's arguments, typed and checked
    (:func:`airplay.bridge.parameters.flight_settings`); errors name the launch argument. The
    task (scene, index and the arguments that sample the scene's tasks, as the policy node's)
    is the bridge's mission."""
    values = {name: v[name] for name in BRIDGE_SCHEMA.names() if name in v}
    values.update(scene_dir=v["scene"], index=v["index"], exit_when_landed="true",
                  land_on_policy_stop="true")  # the policy's stop request (episode/policy "stop": true) lands
    values.update({k: str(episode[k]) for k in ("episodes", "seed", "setting", "vln_config", "vln_episodes")
                   if k in episode})
    try:
        typed = {name: coerce(name, value) for name, value in values.items()}
        flight_settings(typed)
    except BridgeParameterError as exc:
        raise GraphArgumentError(str(exc).replace("parameter '", "launch argument '")) from None
    return typed


GRAPHS = {"sim_eval": (sim_eval_graph, SIM_EVAL_ARGUMENTS), "collect": (collect_graph, COLLECT_ARGUMENTS),
          "fly": (fly_graph, FLY_ARGUMENTS)}
"""Graph name -> (builder, accepted launch arguments)."""

EXTRA_ROS2_LAUNCH_ARGUMENTS = ("launch-prefix", "launch-prefix-filter")
"""Launch arguments that ``ros2 launch`` itself adds for its ``--launch-prefix`` and
``--launch-prefix-filter`` options (read by launch_ros's Node): accepted by every graph's
launch file, unknown to ``airplay launch``."""
