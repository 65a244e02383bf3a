"""The one description of the ROS graphs, read by ros2 launch and by airplay launch."""

from __future__ import annotations

import pytest

from airplay.graph import GRAPHS, SIM_EVAL_ARGUMENTS, GraphArgumentError, parse_launch_arguments, sim_eval_graph


def test_sim_eval_graph_nodes_and_parameters():
    values = parse_launch_arguments(["policy:=expert", "episodes:=3", "lockstep:=false"], SIM_EVAL_ARGUMENTS)
    nodes = {n.name: n for n in sim_eval_graph(values)}
    assert set(nodes) == {"sim", "renderer", "policy", "evaluator"}
    assert [n.name for n in sim_eval_graph(values) if n.required] == ["evaluator"]
    assert nodes["sim"].parameters["lockstep"] is False
    assert nodes["sim"].parameters["episodes"] == 3 and isinstance(nodes["sim"].parameters["episodes"], int)
    assert nodes["sim"].parameters["command_timeout_s"] == pytest.approx(10.0)
    assert all(n.parameters["use_sim_time"] is True for n in nodes.values())
    assert nodes["policy"].parameters["policy"] == "expert"
    assert "sim_eval" in GRAPHS


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
    assert policy["history_offsets"] == "-4,-2,-1" and policy["max_new_tokens"] == "32"
    assert "model" not in nodes["sim"].parameters
    plain = {n.name: n for n in sim_eval_graph(parse_launch_arguments([], SIM_EVAL_ARGUMENTS))}
    assert "vln_config" not in plain["sim"].parameters and "model" not in plain["policy"].parameters
