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
    "setting": "pointgoal",
    "episodes": "10",              # per scene
    "seed": "0",
    "out": "out/sim-eval-ros",     # results folder, relative to the evaluator's working folder
    "lockstep": "true",
    "command_timeout_s": "10.0",   # lockstep: bounded wall-clock wait for the policy's command
    "render_backend": "auto",
    "render_images": "true",
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
        "setting": _choice(v, "setting", ("pointgoal", "imagegoal", "goalfree")),
        "episodes": _number(v, "episodes", int),
        "seed": _number(v, "seed", int),
    }
    lockstep = _flag(v, "lockstep")
    timeout_s = _number(v, "command_timeout_s")
    render_images = _flag(v, "render_images")
    return [
        NodeSpec("sim", "airplay.nodes.sim_node", "sim_node",
                 {**common, **episode, "lockstep": lockstep, "command_timeout_s": timeout_s}),
        NodeSpec("renderer", "airplay.nodes.renderer_node", "renderer_node",
                 {**common, **episode, "lockstep": lockstep, "render_backend": v["render_backend"],
                  "render_images": render_images}),
        NodeSpec("policy", "airplay.nodes.policy_node", "policy_node",
                 {**common, **episode, "lockstep": lockstep, "policy": v["policy"]}),
        NodeSpec("evaluator", "airplay.nodes.evaluator_node", "evaluator_node",
                 {**common, **episode, "policy": v["policy"], "out": v["out"], "render_images": render_images},
                 required=True),
    ]


GRAPHS = {"sim_eval": (sim_eval_graph, SIM_EVAL_ARGUMENTS)}
"""Graph name -> (builder, accepted launch arguments)."""
