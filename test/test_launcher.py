"""``airplay launch``: one process per node, output behind node names, the graph stopped as a
whole (required node done, a crash, Ctrl-C) with no process left behind; parameters that rclpy
reads back with their types; the ros2 launch file, the console scripts and the Dockerfile that
read the same graph description."""

from __future__ import annotations

import ast
import json
import math
import os
import py_compile
import queue
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import alive

from airplay.cli import main
from airplay.graph import SIM_EVAL_ARGUMENTS, NodeSpec, defaults, sim_eval_graph
from airplay.launcher import format_parameter, graph_environment, launch_graph, node_command

REPO = Path(__file__).resolve().parents[1]

# A stand-in node: reads its -p parameters from the command line like a node would, prints,
# optionally starts a grandchild, ignores SIGINT/SIGTERM if asked, sleeps, exits with a code.
FAKE_NODE = '''
import os, signal, subprocess, sys, time

argv = sys.argv[1:]
params = {}
name = "?"
for flag, rule in zip(argv, argv[1:]):
    key, _, value = rule.partition(":=")
    if flag == "-p":
        params[key] = value
    elif flag == "-r" and key == "__node":
        name = value
if params.get("stubborn") == "true":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"pid {os.getpid()}", flush=True)
if params.get("grandchild") == "true":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(f"child {child.pid}", flush=True)
for i in range(int(params.get("lines", "0"))):
    print(f"{name} line {i}", flush=True)
print(f"{name} on stderr", file=sys.stderr, flush=True)
try:
    time.sleep(float(params.get("sleep_s", "0")))
except KeyboardInterrupt:
    sys.exit(0)
sys.exit(int(params.get("exit_code", "0")))
'''

# A real rclpy node that declares whatever parameters it was given and prints them as JSON.
PARAM_ECHO = '''
import json, sys
import rclpy
from rclpy.node import Node



def main(args=None):
    rclpy.init(args=sys.argv)
    node = Node("param_echo", automatically_declare_parameters_from_overrides=True)
    values = {name: [type(p.value).__name__, p.value if p.value == p.value else "nan"]
              for name, p in node.get_parameters_by_prefix("").items()}
    print(json.dumps({"node": node.get_name(), "parameters": values}), flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0
'''


@pytest.fixture
def fake_env(tmp_path) -> dict[str, str]:
    """Environment whose PYTHONPATH holds the fake node modules (and airplay's src)."""
    (tmp_path / "fake_node.py").write_text(FAKE_NODE)
    (tmp_path / "param_echo.py").write_text(PARAM_ECHO)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def fake(name: str, required: bool = False, **params) -> NodeSpec:
    return NodeSpec(name, "fake_node", "fake_node", params, required=required)


def pids_in(text: str, label: str = "pid") -> list[int]:
    """Pids the fake nodes printed ("[name] pid N"), not those in the launcher's own messages."""
    return [int(m) for m in re.findall(rf"^\[\w+\] {label} (\d+)$", text, flags=re.MULTILINE)]


def wait_dead(pids: list[int], timeout_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# --- the launcher on a fake graph -----------------------------------------------------------------

def test_output_is_prefixed_and_required_exit_stops_the_rest(fake_env, capsys):
    nodes = [fake("sleeper", sleep_s=60.0, lines=1), fake("worker", required=True, lines=2, sleep_s=1.0)]
    t0 = time.monotonic()
    code = launch_graph(nodes, env=fake_env, grace_s=3.0)
    elapsed = time.monotonic() - t0
    out, err = capsys.readouterr()
    assert code == 0
    assert elapsed < 30.0, elapsed  # not the sleeper's 60 s
    assert "[worker] worker line 0" in out and "[worker] worker line 1" in out
    assert "[sleeper] sleeper line 0" in out
    assert "[sleeper] sleeper on stderr" in err and "[worker] worker on stderr" in err
    assert "required node worker exited (code 0)" in err
    pids = pids_in(out)
    assert len(pids) == 2 and wait_dead(pids) == []


def test_a_crashing_node_stops_the_graph_and_is_reported(fake_env, capsys):
    nodes = [fake("sleeper", sleep_s=60.0), fake("crasher", exit_code=3, sleep_s=0.3),
             fake("evaluator", required=True, sleep_s=60.0)]
    t0 = time.monotonic()
    code = launch_graph(nodes, env=fake_env, grace_s=3.0)
    out, err = capsys.readouterr()
    assert code == 3
    assert time.monotonic() - t0 < 30.0  # not the others' 60 s
    assert "node crasher crashed (code 3)" in err
    pids = pids_in(out)
    assert len(pids) == 3 and wait_dead(pids) == []


def test_nodes_that_ignore_sigint_and_sigterm_are_killed(fake_env, capsys):
    nodes = [fake("stubborn", stubborn=True, sleep_s=60.0, grandchild=True),
             fake("worker", required=True, exit_code=5, sleep_s=0.5)]
    t0 = time.monotonic()
    code = launch_graph(nodes, env=fake_env, grace_s=0.3)
    out, err = capsys.readouterr()
    assert code == 5
    assert time.monotonic() - t0 < 30.0  # not the stubborn node's 60 s
    assert "required node worker failed (code 5)" in err
    assert "sending SIGKILL to stubborn" in err
    pids = pids_in(out) + pids_in(out, "child")
    assert len(pids) == 3 and wait_dead(pids) == []


def test_sigint_to_the_launcher_stops_every_process(fake_env, tmp_path):
    script = tmp_path / "run_graph.py"
    script.write_text(textwrap.dedent('''
        import sys
        from airplay.graph import NodeSpec
        from airplay.launcher import launch_graph

        nodes = [NodeSpec(n, "fake_node", "fake_node", {"sleep_s": 60.0, "grandchild": True},
                          required=(n == "c")) for n in ("a", "b", "c")]
        sys.exit(launch_graph(nodes, grace_s=3.0))
    '''))
    proc = subprocess.Popen([sys.executable, str(script)], env=fake_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    seen: list[str] = []
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 15.0
        while time.monotonic() < deadline and len(pids_in("".join(seen), "child")) < 3:
            try:
                seen.append(lines.get(timeout=0.2))
            except queue.Empty:
                pass
        text = "".join(seen)
        pids = pids_in(text) + pids_in(text, "child")
        assert len(pids) == 6, text
        assert all(alive(p) for p in pids)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=15) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        for pid in pids_in("".join(seen)):  # on failure only: the nodes' groups, started by this test
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
    reader.join(timeout=5)
    while not lines.empty():
        seen.append(lines.get())
    assert "SIGINT received; stopping the graph" in "".join(seen)
    assert wait_dead(pids) == []


@pytest.mark.ros
@pytest.mark.slow
def test_ctrl_c_stops_a_real_graph_quietly(indoor_1, tmp_path, own_ros_domain):
    """`airplay launch sim_eval` mid-run, Ctrl-C to its process group (its nodes have sessions of
    their own, so each gets the launcher's one SIGINT): every node ends cleanly, in time, with no
    traceback, no SIGTERM and nothing left (run_node's shutdown, airplay.nodes.shutdown)."""
    pytest.importorskip("rclpy")
    from conftest import descendants
    from helpers.installs import isolated

    scene = indoor_1
    log = tmp_path / "launch.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(isolated([sys.executable, "-m", "airplay.cli", "launch", "sim_eval", f"scenes:={scene}",
                                          "episodes:=50", "render_images:=false", f"out:={tmp_path / 'out'}"]),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    nodes: list[int] = []
    try:
        deadline = time.monotonic() + 600  # a hang guard: nodes warm their kernels before "graph ready"
        while "episode 1/50 " not in log.read_text():  # mid-run: the evaluator logged episode 1 of 50 done
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        nodes = [pid for pid in descendants(proc.pid) if alive(pid)]
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for pid in nodes:  # on failure only: the nodes' own groups, started by this test
            if alive(pid):
                os.killpg(pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 130, text
    assert len(nodes) >= 4 and wait_dead(nodes) == [], text
    assert "SIGINT received; stopping the graph" in text
    # No SIGTERM: every node ended within the launcher's 5 s grace after its SIGINT.
    assert "Traceback" not in text and "sending SIGTERM" not in text and "sending SIGKILL" not in text, text


# --- parameters ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (True, "true"), (False, "false"), (0, "0"), (-7, "-7"),
    (10.0, "10.0"), (1e-05, "1.0e-05"), (1e20, "1.0e+20"), (-2.5, "-2.5"),
    (math.inf, ".inf"), (-math.inf, "-.inf"), (math.nan, ".nan"),
    ("scenes", "scenes"), ("out/sim-eval-ros", "out/sim-eval-ros"), ("/abs/path_1.x", "/abs/path_1.x"),
    ("1", "'1'"), ("true", "'true'"), ("Off", "'Off'"), ("nan", "'nan'"), ("", "''"),
    ("it's", "'it''s'"), ("a b", "'a b'"), ("a,b", "'a,b'"),
])
def test_format_parameter(value, text):
    assert format_parameter(value) == text


def test_format_parameter_rejects_other_types():
    with pytest.raises(TypeError, match="list"):
        format_parameter([1, 2])


ROUND_TRIP = {
    "flag": True, "off": False, "count": 3, "negative": -7, "zero": 0,
    "whole": 10.0, "ratio": 0.25, "tiny": 1e-05, "big": 1e20, "minus_inf": -math.inf, "not_a_number": math.nan,
    "word": "scenes", "path": "out/x", "abs_path": "/data/scenes/indoor_0", "dash": "sim-eval",
    "digits": "1", "float_text": "3.5", "neg_text": "-1", "hex_text": "0x10", "sci_text": "1e5",
    "true_text": "true", "yes_text": "yes", "off_text": "Off", "y_text": "y", "nan_text": "nan", "inf_text": "inf",
    "null_text": "null", "tilde": "~", "empty": "", "quote": "it's", "double_quote": 'say "hi"',
    "space": "a b", "colon": "a: b", "comma": "a,b", "list_text": "[1, 2]", "map_text": "{}", "hash": "#x",
    "backslash": "C:\\dir", "unicode": "zürich", "assign": "a:=b", "dash_first": "-x", "dot_first": ".hidden",
}


@pytest.mark.ros
def test_parameters_round_trip_through_rclpy(fake_env):
    pytest.importorskip("rclpy")
    spec = NodeSpec("echo_node", "param_echo", "param_echo", ROUND_TRIP)
    res = subprocess.run(node_command(spec), env=graph_environment(fake_env), capture_output=True,
                         text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout.strip().splitlines()[-1])
    assert report["node"] == "echo_node"
    got = report["parameters"]
    python_types = {bool: "bool", int: "int", float: "float", str: "str"}
    for key, value in ROUND_TRIP.items():
        kind, back = got[key]
        assert kind == python_types[type(value)], (key, value, got[key])
        if isinstance(value, float) and math.isnan(value):
            assert back == "nan"
        else:
            assert back == value, (key, value, got[key])


def test_graph_environment_sets_loopback_dds_only_where_absent():
    env = graph_environment({"PATH": "/bin"})
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert Path(env["FASTDDS_DEFAULT_PROFILES_FILE"]).name == "fastdds_localhost.xml"
    assert Path(env["FASTDDS_DEFAULT_PROFILES_FILE"]).is_file()
    mine = graph_environment({"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET", "FASTDDS_DEFAULT_PROFILES_FILE": "/p.xml"})
    assert mine["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET" and mine["FASTDDS_DEFAULT_PROFILES_FILE"] == "/p.xml"


# --- airplay launch --------------------------------------------------------------------------------

def test_cli_launch_print(capsys):
    assert main(["launch", "sim_eval", "--print", "policy:=expert", "episodes:=3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4
    commands = [shlex.split(line) for line in lines]
    names = ["sim", "renderer", "policy", "evaluator"]
    for cmd, name in zip(commands, names):
        assert cmd[1:5] == ["-m", "airplay.nodes.start", f"airplay.nodes.{name}_node", "--ros-args"]
        assert f"__node:={name}" in cmd
        assert "episodes:=3" in cmd or name == "renderer"
        assert "use_sim_time:=true" in cmd
    sim, renderer, policy, evaluator = commands
    assert "lockstep:=true" in sim and "seed:=0" in sim
    assert not any("timeout" in arg for arg in sim + evaluator)  # no wall-clock limit ends an episode
    assert "policy_budget_ms:=0.0" in policy and "policy_budget_ms:=0.0" in evaluator
    assert "render_images:=true" in renderer and "scenes:=scenes" in renderer
    assert "policy:=expert" in policy and "policy:=expert" in evaluator
    assert "out:=out/sim-eval-ros" in evaluator


def test_cli_launch_help_lists_each_argument_with_its_description(capsys):
    assert main(["launch", "sim_eval", "--help"]) == 0
    out = capsys.readouterr().out
    for key, argument in SIM_EVAL_ARGUMENTS.items():
        assert f"  {key}:={argument.default}\n" in out, key
        assert " ".join(argument.description.split()[:4]) in " ".join(out.split()), key


def test_cli_launch_errors_name_the_problem(capsys):
    assert main(["launch", "sim_eval", "bogus:=1"]) == 2
    assert "bogus" in capsys.readouterr().err
    assert main(["launch", "no_such_graph"]) == 2
    assert "no_such_graph" in capsys.readouterr().err
    assert main(["launch", "sim_eval", "episodes:=many"]) == 2
    assert "episodes" in capsys.readouterr().err


# --- ros2 launch, console scripts, Docker ----------------------------------------------------------

LAUNCH_FILE = REPO / "launch" / "sim_eval.launch.py"
ROS2_LAUNCH = REPO / "src" / "airplay" / "ros2_launch.py"


def imports_of(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every ``from module import name`` in the file, in functions too."""
    return {(node.module, alias.name) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) for alias in node.names}


def test_launch_files_compile_and_name_their_graph(tmp_path):
    """Each launch file is the one helper called with its graph's name in airplay.graph.GRAPHS."""
    from airplay.graph import GRAPHS

    for name in GRAPHS:
        path = REPO / "launch" / f"{name}.launch.py"
        py_compile.compile(str(path), cfile=str(tmp_path / f"{name}.pyc"), doraise=True)
        assert imports_of(path) == {("airplay.ros2_launch", "graph_launch_description")}, path
        tree = ast.parse(path.read_text())
        functions = {node.name: node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        calls = [ast.unparse(node) for node in ast.walk(functions["generate_launch_description"])
                 if isinstance(node, ast.Call)]
        assert calls == [f"graph_launch_description({name!r})"], path
    from airplay.ros2_launch import graph_launch_description

    with pytest.raises(KeyError, match="unknown graph 'sim-eval'; graphs: collect, fly, sim_eval"):
        graph_launch_description("sim-eval")
    # The one helper all three launch files call: launch_ros Nodes, exit handlers, Shutdown.
    assert {("launch_ros.actions", "Node"), ("launch.event_handlers", "OnProcessExit"), ("launch.events", "Shutdown"),
            ("launch.actions", "DeclareLaunchArgument")} <= imports_of(ROS2_LAUNCH)


def test_launch_file_under_launch_ros():
    from helpers.installs import import_launch_ros

    import_launch_ros()
    import importlib.util

    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction, RegisterEventHandler
    from launch_ros.actions import Node

    module_spec = importlib.util.spec_from_file_location("sim_eval_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    description = module.generate_launch_description()
    declared = [e for e in description.entities if isinstance(e, DeclareLaunchArgument)]
    assert {d.name for d in declared} == set(SIM_EVAL_ARGUMENTS)
    for d in declared:  # --show-args prints the graph's own descriptions and defaults
        assert d.description == SIM_EVAL_ARGUMENTS[d.name].description
        assert [t.describe() for t in d.default_value] == [repr(SIM_EVAL_ARGUMENTS[d.name].default)]
    context = LaunchContext()
    context.launch_configurations.update(dict(defaults(SIM_EVAL_ARGUMENTS), episodes="3"))
    opaque = next(e for e in description.entities if isinstance(e, OpaqueFunction))
    actions = opaque.execute(context)
    nodes = [a for a in actions if isinstance(a, Node)]
    assert len(nodes) == len(sim_eval_graph()) == 4
    # Every node's exit is watched (a non-zero code fails the launch), the required one's too.
    assert sum(isinstance(a, RegisterEventHandler) for a in actions) == 4
    context.launch_configurations.update(viewer="true", viewer_out="run.rrd")  # the live view's node
    actions = opaque.execute(context)
    assert len([a for a in actions if isinstance(a, Node)]) == 5


def test_setup_installs_node_executables_and_launch_files():
    text = (REPO / "setup.py").read_text()
    for spec in sim_eval_graph():
        assert f'"{spec.executable} = airplay.nodes.start:{spec.executable}"' in text, spec.executable
    assert '(f"share/{PACKAGE}/launch", glob("launch/*.py"))' in text
    assert "install_scripts=$base/lib/airplay" in (REPO / "setup.cfg").read_text()
    assert LAUNCH_FILE.is_file()


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of docker/Dockerfile, continuation lines joined, comments dropped."""
    text = (REPO / "docker" / "Dockerfile").read_text()
    logical, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip("\\").rstrip() + " "
        if not line.rstrip().endswith("\\"):
            logical.append(current.strip())
            current = ""
    return [tuple(entry.split(None, 1)) for entry in logical]


def test_dockerfile_structure():
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "ros:jazzy")
    runs = [args for op, args in instructions if op == "RUN"]
    builds = [run for run in runs if "colcon build" in run]
    assert builds and not any("--symlink-install" in run for run in builds)  # the nodes read the installed share
    entrypoint = next(run for run in runs if "/entrypoint.sh" in run)
    # DDS on the container's loopback under the profile name Jazzy's Fast DDS 2 reads, and Fast DDS 3's
    for words in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTRTPS_DEFAULT_PROFILES_FILE", "FASTDDS_DEFAULT_PROFILES_FILE",
                  "/ws/install/airplay/share/airplay/config/fastdds_localhost.xml"):
        assert words in entrypoint, words
    assert any("apt-get install" in run and "python3-pip" in run and "python3-numpy" in run for run in runs)
    pip_runs = [run for run in runs if "pip install" in run]
    assert pip_runs and all("--break-system-packages" in run and "constraints" in run for run in pip_runs)
    assert not any(re.search(r"\btorch\b", run.split("pip install", 1)[1]) for run in pip_runs)
    cmd = [args for op, args in instructions if op == "CMD"]
    assert len(cmd) == 1 and json.loads(cmd[0]) == ["ros2", "launch", "airplay", "sim_eval.launch.py"]
    copied = " ".join(args for op, args in instructions if op == "COPY")
    assert "/ws/src/airplay" in copied and "src " in copied + " "
    readme = (REPO / "docker" / "README.md").read_text()
    assert "docker build -f docker/Dockerfile" in readme and "docker run" in readme
