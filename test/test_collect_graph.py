"""`airplay launch collect` and launch/collect.launch.py: sim_eval's graph with the expert plus the
recorder, writing to bags/ by default, from the one description in airplay.graph.collect_graph.
(The graph running for real, with its recorder killed by signals, is test_recorder.py.)"""

from __future__ import annotations

import ast
import inspect
import py_compile
import shlex
from pathlib import Path

import pytest

from airplay.cli import main
from airplay.graph import COLLECT_ARGUMENTS, GRAPHS, collect_graph, defaults, parse_launch_arguments

REPO = Path(__file__).resolve().parents[1]
LAUNCH_FILE = REPO / "launch" / "collect.launch.py"


def test_collect_graph_is_sim_eval_with_the_expert_and_the_recorder():
    nodes = collect_graph()
    assert [n.name for n in nodes] == ["sim", "renderer", "policy", "evaluator", "recorder"]
    assert [n.name for n in nodes if n.required] == ["evaluator"]
    by_name = {n.name: n for n in nodes}
    assert by_name["policy"].parameters["policy"] == "expert"
    rec = by_name["recorder"].parameters
    assert (rec["out"], rec["split"], rec["max_bytes"], rec["record_depth"], rec["topics"]) == ("bags", "episode", 0,
                                                                                                 False, "")
    for key in ("scenes", "setting", "episodes", "seed", "lockstep", "use_sim_time"):
        assert rec[key] == by_name["sim"].parameters[key], key
    assert by_name["evaluator"].parameters["out"] == "out/collect-ros"
    assert GRAPHS["collect"] == (collect_graph, COLLECT_ARGUMENTS)


def test_cli_launch_collect_print(capsys):
    assert main(["launch", "collect", "--print", "episodes:=3", "out:=/tmp/b", "split:=none", "max_bytes:=1000000",
                 "record_depth:=true", "topics:=/odom,/cmd_vel"]) == 0
    lines = [shlex.split(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [cmd[3] for cmd in lines] == [f"airplay.nodes.{n}_node" for n in ("sim", "renderer", "policy", "evaluator",
                                                                          "recorder")]
    recorder = lines[-1]
    for param in ("out:=/tmp/b", "split:=none", "max_bytes:=1000000", "record_depth:=true", "episodes:=3",
                  "topics:='/odom,/cmd_vel'", "lockstep:=true"):
        assert param in recorder, param


@pytest.mark.parametrize("tokens, words", [(["split:=scene"], "split"), (["max_bytes:=big"], "max_bytes"),
                                           (["record_depth:=maybe"], "record_depth"), (["policy:=act"], "policy")])
def test_bad_collect_arguments_name_the_key(tokens, words, capsys):
    assert main(["launch", "collect", "--print", *tokens]) == 2
    assert words in capsys.readouterr().err


def test_collect_launch_file_reads_the_shared_graph(tmp_path):
    py_compile.compile(str(LAUNCH_FILE), cfile=str(tmp_path / "collect.pyc"), doraise=True)
    tree = ast.parse(LAUNCH_FILE.read_text())
    imported = {(node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    assert imported == {("airplay.ros2_launch", "graph_launch_description")}
    generate = next(node for node in ast.walk(tree)
                    if isinstance(node, ast.FunctionDef) and node.name == "generate_launch_description")
    assert [ast.unparse(n) for n in ast.walk(generate) if isinstance(n, ast.Call)] == [
        "graph_launch_description('collect')"]
    helper = ast.parse((REPO / "src" / "airplay" / "ros2_launch.py").read_text())
    assert {("launch_ros.actions", "Node"), ("launch.event_handlers", "OnProcessExit")} <= {
        (n.module, a.name) for n in ast.walk(helper) if isinstance(n, ast.ImportFrom) for a in n.names}
    text = (REPO / "setup.py").read_text()
    from airplay.nodes import start

    for spec in collect_graph():
        assert f'"{spec.executable} = airplay.nodes.start:{spec.executable}"' in text, spec.executable
        assert f'run("{spec.module}")' in inspect.getsource(getattr(start, spec.executable)), spec.executable


def test_collect_launch_file_under_launch_ros():
    from helpers.installs import import_launch_ros

    import_launch_ros()
    import importlib.util

    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch_ros.actions import Node

    module_spec = importlib.util.spec_from_file_location("collect_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    description = module.generate_launch_description()
    declared = {d.name: d for d in description.entities if isinstance(d, DeclareLaunchArgument)}
    assert set(declared) == set(COLLECT_ARGUMENTS)
    assert all(declared[k].description == a.description for k, a in COLLECT_ARGUMENTS.items())
    context = LaunchContext()
    context.launch_configurations.update(defaults(COLLECT_ARGUMENTS))
    actions = next(e for e in description.entities if isinstance(e, OpaqueFunction)).execute(context)
    assert len([a for a in actions if isinstance(a, Node)]) == len(collect_graph(parse_launch_arguments([],
                                                                                          COLLECT_ARGUMENTS))) == 5
