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
    (["setting:=vln"], "setting:=vln must be one of pointgoal, imagegoal, goalfree"),
    (["render_backend:=vulkan"], "render_backend:=vulkan must be one of auto, cpu, gsplat"),
])
def test_bad_values_name_the_argument(tokens, words):
    with pytest.raises(GraphArgumentError, match=words):
        sim_eval_graph(parse_launch_arguments(tokens, SIM_EVAL_ARGUMENTS))
