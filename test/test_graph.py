"""The one description of the ROS graphs, read by ros2 launch and by airplay launch."""

from __future__ import annotations

import pytest

from airplay.graph import (COLLECT_ARGUMENTS, FLY_ARGUMENTS, GRAPHS, SIM_EVAL_ARGUMENTS, GraphArgumentError,
                           LaunchArgument, collect_graph, defaults, fly_graph, parse_launch_arguments, sim_eval_graph)


def test_sim_eval_graph_nodes_and_parameters():
    values = parse_launch_arguments(["policy:=expert", "episodes:=3", "lockstep:=false"], SIM_EVAL_ARGUMENTS)
    nodes = {n.name: n for n in sim_eval_graph(values)}
    assert set(nodes) == {"sim", "renderer", "policy", "evaluator"}
    assert [n.name for n in sim_eval_graph(values) if n.required] == ["evaluator"]
    assert nodes["sim"].parameters["lockstep"] is False
    assert nodes["sim"].parameters["episodes"] == 3 and isinstance(nodes["sim"].parameters["episodes"], int)
    # No wall-clock limit ends an episode: the sim and evaluator get none.
    assert not {"command_timeout_s", "episode_timeout_s"} & (set(nodes["sim"].parameters)
                                                             | set(nodes["evaluator"].parameters))
    for name in ("policy", "evaluator"):  # the policy's CPU budget: off by default, a float
        budget = nodes[name].parameters["policy_budget_ms"]
        assert budget == 0.0 and isinstance(budget, float), name
    assert "policy_budget_ms" not in nodes["sim"].parameters and "policy_budget_ms" not in nodes["renderer"].parameters
    assert all(n.parameters["use_sim_time"] is True for n in nodes.values())
    assert nodes["policy"].parameters["policy"] == "expert"
    assert "sim_eval" in GRAPHS


def test_policy_backend_reaches_the_policy_node_of_sim_eval_and_fly():
    """policy_backend:=onnxruntime (a learned policy's ONNX export) is the policy node's alone;
    torch by default; a bad value names the argument."""
    values = parse_launch_arguments(["policy:=cnn_bc", "checkpoint:=ck", "policy_backend:=onnxruntime"],
                                    SIM_EVAL_ARGUMENTS)
    nodes = {n.name: n for n in sim_eval_graph(values)}
    assert nodes["policy"].parameters["policy_backend"] == "onnxruntime"
    assert all("policy_backend" not in n.parameters for name, n in nodes.items() if name != "policy")
    fly = {n.name: n for n in fly_graph(parse_launch_arguments(["policy:=cnn_bc", "checkpoint:=ck", "camera_topic:=cam",
                                                                "policy_backend:=onnxruntime"], FLY_ARGUMENTS))}
    assert fly["policy"].parameters["policy_backend"] == "onnxruntime"
    assert {n.name: n for n in sim_eval_graph({})}["policy"].parameters["policy_backend"] == "torch"
    assert "policy_backend" not in COLLECT_ARGUMENTS
    with pytest.raises(GraphArgumentError, match="policy_backend:=tensorrt must be one of torch, onnxruntime"):
        sim_eval_graph(parse_launch_arguments(["policy_backend:=tensorrt"], SIM_EVAL_ARGUMENTS))


def test_scene_is_another_name_for_scenes():
    values = parse_launch_arguments(["scene:=scenes/urban_0"], SIM_EVAL_ARGUMENTS)
    assert all(n.parameters.get("scenes", "scenes/urban_0") == "scenes/urban_0" for n in sim_eval_graph(values))


@pytest.mark.parametrize("tokens, words", [
    (["bogus:=1"], "unknown launch argument 'bogus'"),
    (["policy=expert"], "must look like key:=value"),
])
def test_bad_launch_arguments_name_the_key(tokens, words):
    with pytest.raises(GraphArgumentError, match=words):
        parse_launch_arguments(tokens, SIM_EVAL_ARGUMENTS)


@pytest.mark.parametrize("tokens, words", [
    (["lockstep:=maybe"], "lockstep:=maybe must be true or false"),
    (["episodes:=ten"], "episodes:=ten must be an integer"),
    (["setting:=flying"], "setting:=flying must be one of pointgoal, imagegoal, goalfree, vln"),
    (["setting:=vln"], "policy:=airvln_r1 and setting:=vln go together"),
    (["policy:=airvln_r1"], "policy:=airvln_r1 and setting:=vln go together"),
    (["policy:=airvln_r1", "setting:=vln"], "launch argument 'model' must name a local Qwen2.5-VL folder"),
    (["policy:=airvln_r1", "setting:=vln", "vln_backend:=openai"], "launch argument 'endpoint' must be"),
    (["policy:=airvln_r1", "setting:=vln", "vln_backend:=openai", "endpoint:=http://127.0.0.1:8000/v1",
      "image_size:=56"], "launch argument 'image_size' must be 2 integers"),
    (["policy:=airvln_r1", "setting:=vln", "vln_backend:=openai", "endpoint:=http://127.0.0.1:8000/v1",
      "render_images:=false"], "render_images:=false cannot be used with setting:=vln"),
    (["policy:=airvln_r1", "setting:=vln", "vln_backend:=llama"], "launch argument 'vln_backend' must be one of"),
    (["render_backend:=vulkan"], "render_backend:=vulkan must be one of auto, cpu, gsplat"),
])
def test_bad_values_name_the_argument(tokens, words):
    with pytest.raises(GraphArgumentError, match=words):
        sim_eval_graph(parse_launch_arguments(tokens, SIM_EVAL_ARGUMENTS))


def test_vln_arguments_reach_the_nodes(tmp_path):
    """setting:=vln policy:=airvln_r1: every node gets the episode options, the policy node the backend's."""
    (tmp_path / "model").mkdir()
    values = parse_launch_arguments(["setting:=vln", "policy:=airvln_r1", f"model:={tmp_path / 'model'}",
                                     "image_size:=56,56", "history_offsets:=-4,-2,-1", "max_new_tokens:=32"],
                                    SIM_EVAL_ARGUMENTS)
    nodes = {n.name: n for n in sim_eval_graph(values)}
    assert all(n.parameters["setting"] == "vln" and n.parameters["vln_config"] == ""
               and "vln_episodes" in n.parameters for n in nodes.values())
    policy = nodes["policy"].parameters
    assert policy["policy"] == "airvln_r1" and policy["vln_backend"] == "transformers"
    assert policy["model"] == str(tmp_path / "model") and policy["image_size"] == "56,56"
    assert policy["history_offsets"] == "-4,-2,-1" and policy["max_new_tokens"] == 32
    assert "model" not in nodes["sim"].parameters
    plain = {n.name: n for n in sim_eval_graph(parse_launch_arguments([], SIM_EVAL_ARGUMENTS))}
    assert "vln_config" not in plain["sim"].parameters and "model" not in plain["policy"].parameters


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_every_launch_argument_has_a_default_and_a_description(name):
    builder, arguments = GRAPHS[name]
    assert arguments and all(isinstance(a, LaunchArgument) for a in arguments.values())
    for key, argument in arguments.items():
        assert isinstance(argument.default, str), key
        assert argument.description.strip() and argument.description != key, key
        assert "\n" not in argument.description, key
    needed = {"fly": {"scene": "scenes/indoor_0"}}.get(name, {})  # fly: a rehearsal scene or a camera topic
    assert builder({**defaults(arguments), **needed}), name


def test_policy_budget_reaches_the_policy_and_the_evaluator():
    nodes = {n.name: n for n in sim_eval_graph(parse_launch_arguments(["policy_budget_ms:=2.5"], SIM_EVAL_ARGUMENTS))}
    assert nodes["policy"].parameters["policy_budget_ms"] == 2.5 == nodes["evaluator"].parameters["policy_budget_ms"]
    collect = {n.name: n for n in collect_graph(parse_launch_arguments(["policy_budget_ms:=4"], COLLECT_ARGUMENTS))}
    assert collect["policy"].parameters["policy_budget_ms"] == 4.0
    for bad in ("-1", "nan", "inf", "fast"):
        with pytest.raises(GraphArgumentError, match=f"policy_budget_ms:={bad} must be a number"):
            sim_eval_graph(parse_launch_arguments([f"policy_budget_ms:={bad}"], SIM_EVAL_ARGUMENTS))


@pytest.mark.parametrize("key", ["command_timeout_s", "episode_timeout_s"])
def test_wall_clock_limits_are_gone_from_sim_eval_and_collect(key):
    for accepted in (SIM_EVAL_ARGUMENTS, COLLECT_ARGUMENTS):
        with pytest.raises(GraphArgumentError, match=f"unknown launch argument '{key}'"):
            parse_launch_arguments([f"{key}:=10"], accepted)
    assert "policy_budget_ms" in SIM_EVAL_ARGUMENTS and "policy_budget_ms" in COLLECT_ARGUMENTS


def test_fly_keeps_the_supervisor_watchdog():
    watchdog = FLY_ARGUMENTS["command_timeout_s"]
    assert watchdog.default == "0.5" and "watchdog" in watchdog.description
    nodes = fly_graph(parse_launch_arguments(["scene:=s", "command_timeout_s:=0.3"], FLY_ARGUMENTS))
    assert nodes[-1].name == "mavlink_bridge" and nodes[-1].parameters["command_timeout_s"] == 0.3


def test_a_typed_config_gives_the_graph_of_the_same_launch_arguments(tmp_path):
    from airplay.graph import SimEvalConfig, sim_eval_config, sim_eval_nodes

    cfg = SimEvalConfig(scenes="a,b", episodes=3, seed=4, policy_budget_ms=2.5, render_images=False, out="o",
                        clock_rate_hz=0.0, execution_horizon=2)
    tokens = ["scenes:=a,b", "episodes:=3", "seed:=4", "policy_budget_ms:=2.5", "render_images:=false", "out:=o",
              "clock_rate_hz:=0", "execution_horizon:=2"]
    assert sim_eval_nodes(cfg) == sim_eval_graph(parse_launch_arguments(tokens, SIM_EVAL_ARGUMENTS))
    parsed = sim_eval_config(parse_launch_arguments(tokens, SIM_EVAL_ARGUMENTS))
    assert (parsed.episodes, parsed.clock_rate_hz, parsed.render_images) == (3, 0.0, False)
    (tmp_path / "model").mkdir()
    vln = SimEvalConfig(scenes="a", policy="airvln_r1", setting="vln",
                        vln={"model": str(tmp_path / "model"), "max_new_tokens": 32, "image_size": "56,56"})
    policy = {n.name: n for n in sim_eval_nodes(vln)}["policy"].parameters
    assert policy["max_new_tokens"] == 32 and policy["image_size"] == "56,56"
    assert policy["vln_backend"] == "transformers"


def test_viewer_adds_the_viewer_node_and_the_evaluator_waits_for_it():
    """viewer:=true (sim_eval and collect): the viewer node with its sinks, the run's episode and lockstep
    settings; the evaluator waits for it. Default: no viewer node, nothing for the evaluator to wait for."""
    from airplay.node_schemas import VIEWER

    assert "viewer" not in {n.name for n in sim_eval_graph()}
    assert "viewer" not in next(n for n in sim_eval_graph() if n.name == "evaluator").parameters
    tokens = ["viewer:=true", "viewer_out:=run.rrd", "viewer_web_port:=9191", "episodes:=2", "lockstep:=false",
              "render_images:=false"]
    nodes = {n.name: n for n in sim_eval_graph(parse_launch_arguments(tokens, SIM_EVAL_ARGUMENTS))}
    viewer = nodes["viewer"]
    assert (viewer.module, viewer.executable, viewer.required) == ("airplay.nodes.viewer_node", "viewer_node", False)
    assert nodes["evaluator"].parameters["viewer"] is True
    p = viewer.parameters
    assert (p["out"], p["connect"], p["web_port"], p["grpc_port"]) == ("run.rrd", "", 9191, 9876)
    assert (p["episodes"], p["lockstep"], p["render_images"], p["use_sim_time"]) == (2, False, False, True)
    VIEWER.check({k: v for k, v in p.items() if k != "use_sim_time"})  # every parameter is the node's
    collect = {n.name for n in collect_graph(parse_launch_arguments(["viewer:=true"], COLLECT_ARGUMENTS))}
    assert {"viewer", "recorder"} <= collect
    for bad, words in (("viewer:=maybe", "launch argument viewer:=maybe must be true or false"),
                       ("viewer_web_port:=0", "launch argument viewer_web_port:=0 must be a port number 1..65535"),
                       ("viewer_grpc_port:=x", "launch argument viewer_grpc_port:=x must be an integer")):
        with pytest.raises(GraphArgumentError, match=words):
            sim_eval_graph(parse_launch_arguments(["viewer:=true", bad], SIM_EVAL_ARGUMENTS))
