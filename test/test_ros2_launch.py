"""The launch files under a real ``ros2 launch`` (../shared/tools/ros2-jazzy-launch: launch 3.4.3,
launch_ros 0.26.6 and ros2cli on the pip ROS 2 wheels), with airplay built by a plain
``colcon build`` and both sourced as a ROS user does (test/helpers/installs.py):

* ``--show-args`` prints each graph's arguments with the descriptions of airplay.graph;
* ``sim_eval.launch.py`` for 2 episodes writes an episodes.jsonl byte-identical to the
  in-process runtime's, and the graph then stops by itself with nothing left to SIGTERM;
* an unknown argument, or one the graph cannot use, fails before any node starts; a node that
  rejects a parameter (``episodes:=0``) makes ``ros2 launch`` exit non-zero;
* included from another launch file, the parent's own arguments are not refused;
* Ctrl-C (SIGINT to the process group, as a terminal sends it) ends the graph with no traceback,
  no node outliving its 5 s before SIGTERM, and no process left.

Everything runs with DDS on loopback and a ROS domain of its own (test/conftest.py), each
``ros2 launch`` in a network namespace of its own where the test may make one (installs.isolated)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import alive, descendants, stop_process_trees
from helpers.installs import colcon_install, isolated, ros2_launch_environment

from airplay.graph import COLLECT_ARGUMENTS, FLY_ARGUMENTS, SIM_EVAL_ARGUMENTS

pytestmark = [pytest.mark.ros, pytest.mark.usefixtures("own_ros_domain")]

GRAPH_ARGUMENTS = {"sim_eval": SIM_EVAL_ARGUMENTS, "collect": COLLECT_ARGUMENTS, "fly": FLY_ARGUMENTS}
ESCALATION = "failed to terminate"
"""What launch logs when a process outlives sigterm_timeout (5 s) after SIGINT, before SIGTERM."""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return colcon_install(tmp_path_factory)


@pytest.fixture
def launch_env(workspace) -> dict[str, str]:
    """The sourced overlay + workspace, with this test's ROS domain (own_ros_domain runs first)."""
    env = ros2_launch_environment(workspace)
    env["ROS_DOMAIN_ID"] = os.environ["ROS_DOMAIN_ID"]
    return env


def ros2_launch(env: dict, args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    """``ros2 launch ARGS`` in its own session (a terminal's process group), output to ``log``."""
    with open(log, "w") as out:
        return subprocess.Popen(isolated(["ros2", "launch", *args]), env=env, cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def run_ros2_launch(env: dict, args: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
    """Run ``ros2 launch ARGS`` to its end (a hang guard of ``timeout`` s); (exit code, output)."""
    log = cwd / "launch.log"
    proc = ros2_launch(env, args, cwd, log)
    nodes: set[int] = set()
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_process_trees([proc], nodes, signal.SIGINT, wait_s=15)
        pytest.fail(f"ros2 launch {' '.join(args)} did not end within {timeout} s\n" + log.read_text())
    return code, log.read_text()


def wait_for(log: Path, words: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while words not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"no {words!r} in the output (exit code {proc.poll()})\n" + log.read_text())
        time.sleep(0.2)


@pytest.mark.parametrize("graph", sorted(GRAPH_ARGUMENTS))
def test_show_args_prints_the_graph_descriptions(launch_env, tmp_path, graph):
    res = subprocess.run(["ros2", "launch", "airplay", f"{graph}.launch.py", "--show-args"], env=launch_env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    for key, argument in GRAPH_ARGUMENTS[graph].items():
        assert f"'{key}': {' '.join(argument.description.split())} (default: '{argument.default}')" in text, key
    assert f"{graph} argument" not in text  # the old placeholders


@pytest.mark.slow
def test_sim_eval_equals_inprocess(launch_env, indoor_1, tmp_path):
    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    episodes = 2
    out = tmp_path / "out"
    # A hang guard, not a speed check: the first run of a fresh install compiles its numba kernels.
    code, log = run_ros2_launch(launch_env, ["airplay", "sim_eval.launch.py", f"scenes:={indoor_1}",
                                             f"episodes:={episodes}", "render_images:=false", f"out:={out}"],
                                tmp_path, timeout=900)
    assert code == 0, log
    assert "required node evaluator exited (code 0); stopping the graph" in log
    assert "Traceback" not in log and ESCALATION not in log, log
    assert log.count("process has finished cleanly") == 4, log
    inproc = tmp_path / "inproc"
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], episodes=episodes, render_images=False), inproc, progress=False)
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()


@pytest.mark.parametrize("graph", sorted(GRAPH_ARGUMENTS))
def test_an_unknown_argument_is_refused_before_any_node_starts(launch_env, tmp_path, graph):
    code, log = run_ros2_launch(launch_env, ["airplay", f"{graph}.launch.py", "episode:=2", "scene:=x"], tmp_path,
                                timeout=120)
    assert code != 0, log
    assert f"unknown launch argument 'episode'; accepted: {', '.join(sorted(GRAPH_ARGUMENTS[graph]))}" in log
    assert "process started" not in log


def test_an_argument_the_graph_cannot_use_is_refused_before_any_node_starts(launch_env, tmp_path):
    code, log = run_ros2_launch(launch_env, ["airplay", "sim_eval.launch.py", "episodes:=ten"], tmp_path, timeout=120)
    assert code != 0 and "launch argument episodes:=ten must be an integer" in log, log
    assert "process started" not in log


@pytest.mark.slow
def test_a_node_that_rejects_a_parameter_fails_the_launch(launch_env, indoor_1, tmp_path):
    code, log = run_ros2_launch(launch_env, ["airplay", "sim_eval.launch.py", f"scenes:={indoor_1}", "episodes:=0",
                                             "render_images:=false", f"out:={tmp_path / 'out'}"], tmp_path,
                                timeout=300)
    assert code != 0, log
    assert "error: parameter 'episodes' must be an integer >= 1, got 0" in log
    assert "exited with code 2; stopping the graph" in log
    assert "Traceback" not in log


PARENT = '''
import os
from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration


def generate_launch_description():
    child = os.path.join(get_package_share_directory("airplay"), "launch", "sim_eval.launch.py")
    return LaunchDescription([
        DeclareLaunchArgument("world", description="the parent's own argument"),
        DeclareLaunchArgument("count", default_value="1", description="passed on as episodes"),
        IncludeLaunchDescription(PythonLaunchDescriptionSource(child),
                                 launch_arguments={"episodes": LaunchConfiguration("count")}.items()),
    ])
'''


def test_included_from_another_launch_file_the_parents_arguments_are_not_refused(launch_env, tmp_path):
    """The parent's own arguments reach sim_eval.launch.py's check through the command line: they
    pass (the graph then refuses count:=ten as episodes:=ten), and a key that no launch file of
    the run declares is warned about, not refused."""
    parent = tmp_path / "parent.launch.py"
    parent.write_text(PARENT)
    code, log = run_ros2_launch(launch_env, [str(parent), "world:=w", "count:=ten", "wrold:=w"], tmp_path,
                                timeout=120)
    assert code != 0, log
    assert "launch argument episodes:=ten must be an integer" in log
    assert "unknown launch argument" not in log
    assert "launch arguments wrold are declared by no launch file of this run" in log


LAUNCH_SERVICE = '''
import importlib.util, sys
import launch
spec = importlib.util.spec_from_file_location("sim_eval_launch", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
service = launch.LaunchService(argv=sys.argv[2:])
service.include_launch_description(module.generate_launch_description())
sys.exit(service.run())
'''


def test_launch_service_with_the_description_as_its_root_refuses_unknown_arguments(launch_env, workspace, tmp_path):
    """launch used from Python (LaunchService given the description itself, as launch_testing does)."""
    script = tmp_path / "run.py"
    script.write_text(LAUNCH_SERVICE)
    res = subprocess.run(isolated([sys.executable, str(script), str(workspace.share / "launch" / "sim_eval.launch.py"),
                                   "episode:=2"]), env=launch_env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "unknown launch argument 'episode'" in res.stdout + res.stderr


def ctrl_c(proc: subprocess.Popen, nodes: set[int], timeout_s: float) -> tuple[int, float, list[int]]:
    """A terminal's Ctrl-C (SIGINT to the process group: ros2 launch and every node); the launch's
    exit code, the seconds it took, and the ids of ``nodes`` still alive after it."""
    t0 = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    code = proc.wait(timeout=timeout_s)
    return code, time.monotonic() - t0, [pid for pid in nodes if alive(pid)]


@pytest.mark.slow
def test_ctrl_c_ends_the_graph_without_traceback_or_leftovers(launch_env, indoor_1, tmp_path):
    log = tmp_path / "launch.log"
    proc = ros2_launch(launch_env, ["airplay", "sim_eval.launch.py", f"scenes:={indoor_1}", "episodes:=50",
                                    "render_images:=false", f"out:={tmp_path / 'out'}"], tmp_path, log)
    nodes: set[int] = set()
    try:
        wait_for(log, "episode 1/50 ", proc, timeout=600)  # mid-run (hang guard: a cold install compiles first)
        nodes.update(descendants(proc.pid))
        assert len(nodes) >= 4, nodes
        code, elapsed, left = ctrl_c(proc, nodes, timeout_s=30)
    finally:
        stop_process_trees([proc], {pid for pid in nodes if alive(pid)}, signal.SIGINT, wait_s=15)
    text = log.read_text()
    assert code == 0, text
    # launch acknowledges the Ctrl-C itself, or, when the nodes' own SIGINT ended the evaluator
    # first (a busy machine can delay launch's signal handler), the required node's exit stops it
    assert ("user interrupted with ctrl-c (SIGINT)" in text
            or "required node evaluator exited (code 0); stopping the graph" in text), text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert ESCALATION not in text and "SIGKILL" not in text, text  # every node ended within 5 s of its SIGINT
    assert left == [], text


@pytest.mark.slow
def test_fly_ctrl_c_while_airborne_lands_before_the_bridge_exits(launch_env, indoor_1, tmp_path):
    """``ros2 launch airplay fly.launch.py ... arm:=true`` against ``airplay vehicle`` (its own
    session, so the terminal's Ctrl-C does not reach it): Ctrl-C in the air makes the bridge land
    the vehicle and wait for the touchdown (launch gives it shutdown_timeout_s + 5 s before
    SIGTERM), and the graph ends with nothing left."""
    log, vehicle_log, pid_file = tmp_path / "launch.log", tmp_path / "vehicle.log", tmp_path / "vehicle.pid"
    port = 14600 + int(os.environ["ROS_DOMAIN_ID"]) % 200
    vehicle = (f"setsid {sys.executable} -m airplay.cli vehicle --mavlink udp:127.0.0.1:{port} --scene {indoor_1} "
               f"--task 0 --status-every 1 > {vehicle_log} 2>&1 & echo $! > {pid_file}; ")
    launch = (f"exec ros2 launch airplay fly.launch.py scene:={indoor_1} index:=0 render_images:=false arm:=true "
              f"connection:=udpin:127.0.0.1:{port} takeoff_height_m:=1.0")
    with open(log, "w") as out:
        proc = subprocess.Popen(isolated(["bash", "-c", vehicle + launch]), env=launch_env, cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    nodes: set[int] = set()
    try:
        wait_for(log, "phase positioning -> flying", proc, timeout=600)  # a cold install compiles first
        time.sleep(1.0)
        nodes.update(descendants(proc.pid))
        nodes.discard(int(pid_file.read_text()))  # the vehicle: not part of the graph
        code, elapsed, left = ctrl_c(proc, nodes, timeout_s=60)
    finally:
        stop_process_trees([proc], {pid for pid in nodes if alive(pid)}, signal.SIGINT, wait_s=15)
        vehicle_pid = int(pid_file.read_text()) if pid_file.exists() else None
        if vehicle_pid is not None:  # SIGTERM: bash starts background commands with SIGINT ignored
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(vehicle_pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + 5.0
                while alive(vehicle_pid) and time.monotonic() < deadline:
                    time.sleep(0.1)
    text = log.read_text()
    flown = vehicle_log.read_text()
    assert vehicle_pid is not None and not alive(vehicle_pid), "the rehearsal vehicle outlived the test"
    assert "shutdown while airborne" in text and "landed and disarmed" in text, text
    assert "disarmed" in flown.split("taking off")[-1], flown
    assert code == 0 and "Traceback" not in text, text
    assert ESCALATION not in text and "SIGKILL" not in text, text  # the bridge ended in its grace
    assert left == [], text
