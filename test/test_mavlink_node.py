"""The ``mavlink_bridge`` node and the ``fly`` graph over real DDS and real MAVLink/UDP on loopback.

Every node and the vehicle (`airplay vehicle`) run as separate processes; the test listens and
commands through a BackgroundNode in its own ROS domain. Every process is stopped in a
``finally`` (SIGINT, then SIGKILL).
"""

from __future__ import annotations

import json
import math
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("pymavlink")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def own_ros_domain(monkeypatch):
    """A ROS domain of our own: other graphs may run on this machine's loopback at the same time."""
    monkeypatch.setenv("ROS_DOMAIN_ID", str(random.SystemRandom().randint(101, 200)))


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(cmd: list[str], log_path: Path) -> subprocess.Popen:
    from airplay.launcher import graph_environment

    return subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True,
                            env=graph_environment())


def stop_all(procs) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 5.0
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(folder.glob("*.log")))


def vehicle_command(port: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "airplay.cli", "vehicle", "--mavlink", f"udp:127.0.0.1:{port}", "--status-every",
            "1", *extra]


class Operator:
    """The test's ROS side: records the bridge's topics, publishes cmd_vel / estop / land."""

    def __init__(self) -> None:
        from geometry_msgs.msg import TwistStamped
        from nav_msgs.msg import Odometry
        from sensor_msgs.msg import BatteryState
        from std_msgs.msg import Bool, Empty, String

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import RELIABLE

        self.bg = BackgroundNode("operator")
        node = self.bg.node
        self.odom, self.armed, self.modes, self.phases, self.battery = [], [], [], [], []
        self.interventions, self.episodes = [], []
        keep = self._keep
        node.create_subscription(Odometry, "odom", keep(self.odom, self._odom), RELIABLE)
        node.create_subscription(Bool, "vehicle/armed", keep(self.armed, lambda m: m.data), RELIABLE)
        node.create_subscription(String, "vehicle/mode", keep(self.modes, lambda m: m.data), RELIABLE)
        node.create_subscription(String, "vehicle/phase", keep(self.phases, lambda m: m.data), RELIABLE)
        node.create_subscription(BatteryState, "vehicle/battery", keep(self.battery, lambda m: m.voltage), RELIABLE)
        node.create_subscription(String, "supervisor/interventions",
                                 keep(self.interventions, lambda m: json.loads(m.data)), RELIABLE)
        node.create_subscription(String, "episode/status", keep(self.episodes, lambda m: json.loads(m.data)), RELIABLE)
        self.cmd_pub = node.create_publisher(TwistStamped, "cmd_vel", RELIABLE)
        self.estop_pub = node.create_publisher(Empty, "estop", RELIABLE)
        self.land_pub = node.create_publisher(Empty, "land", RELIABLE)
        self._empty = Empty
        self.bg.start()

    @staticmethod
    def _odom(msg) -> np.ndarray:
        from airplay.nodes.common import state_from_odometry

        return state_from_odometry(msg)

    def _keep(self, into: list, convert):
        def callback(msg):
            with self.bg.lock:
                into.append(convert(msg))
        return callback

    def latest(self, what: list):
        with self.bg.lock:
            return what[-1] if what else None

    def wait(self, predicate, timeout_s: float, what: str, folder: Path) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n" + logs(folder))
            time.sleep(0.02)

    def send(self, cmd) -> None:
        from airplay.nodes.common import twist_from_command

        self.cmd_pub.publish(twist_from_command(np.asarray(cmd, np.float64), time.time_ns()))

    def close(self) -> None:
        self.bg.close()


def bridge_spec(port: int, **params):
    from airplay.graph import NodeSpec

    base = {"connection": f"udpin:127.0.0.1:{port}", "takeoff_height_m": 0.6, "command_timeout_s": 0.3}
    base.update(params)
    return NodeSpec("mavlink_bridge", "airplay.nodes.mavlink_bridge_node", "mavlink_bridge_node", base)


def test_bridge_node_flies_reports_and_lands_on_estop(tmp_path):
    from airplay.launcher import node_command

    port = free_udp_port()
    operator = Operator()
    procs = []
    try:
        procs.append(spawn(node_command(bridge_spec(port)), tmp_path / "bridge.log"))
        procs.append(spawn(vehicle_command(port, "--start", "2,3,0,90"), tmp_path / "vehicle.log"))
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 40, "the bridge flying", tmp_path)
        assert operator.latest(operator.armed) is True and operator.latest(operator.modes) == "OFFBOARD"
        start = operator.latest(operator.odom)
        assert start[0:3] == pytest.approx([2.0, 3.0, 0.6], abs=0.15)   # map ENU, as the vehicle was placed
        # forward at yaw 90 deg (north): +y in map
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.5:
            operator.send([1.0, 0.0, 0.0, 0.0])
            time.sleep(0.02)
        moved = operator.latest(operator.odom)[0:3] - start[0:3]
        assert moved[1] > 0.8 and abs(moved[0]) < 0.1, moved
        # NaN: refused, published with its reason; then silence: hover
        operator.send([math.nan, 0.0, 0.0, 0.0])
        operator.wait(lambda: any(i["kind"] == "stale_command_hold" for i in operator.interventions[1:]), 5,
                      "stale_command_hold", tmp_path)
        kinds = [i["kind"] for i in operator.interventions]
        assert "refused_non_finite" in kinds
        refusal = next(i for i in operator.interventions if i["kind"] == "refused_non_finite")
        assert "non-finite" in refusal["reason"] and refusal["command_out"] == [1.0, 0.0, 0.0, 0.0]
        time.sleep(0.8)
        assert np.linalg.norm(operator.latest(operator.odom)[7:10]) < 0.1        # hovering
        # operator stop -> land -> disarmed; the bridge exits 0 after touchdown
        operator.estop_pub.publish(operator._empty())
        try:
            code = procs[0].wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("the bridge did not land and exit\n" + logs(tmp_path))
        assert code == 0, logs(tmp_path)
        time.sleep(0.2)
        assert "operator_stop_land" in [i["kind"] for i in operator.interventions]
        assert operator.latest(operator.armed) is False and operator.latest(operator.phases) == "landed"
        assert operator.latest(operator.odom)[2] == pytest.approx(0.0, abs=0.05)
        assert operator.battery and 14.0 < operator.battery[-1] < 16.9
    finally:
        stop_all(procs)
        operator.close()


def test_bridge_node_bad_parameters_named(tmp_path):
    from airplay.launcher import node_command

    for params, name in (({"connection": "pigeon:1"}, "connection"), ({"fence_box": "1,2,3"}, "fence_box")):
        res = subprocess.run(node_command(bridge_spec(free_udp_port(), **params)), capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 2 and name in res.stderr, res.stderr


def test_fly_launch_file_reads_the_shared_graph(tmp_path):
    import ast
    import py_compile

    path = REPO / "launch" / "fly.launch.py"
    py_compile.compile(str(path), cfile=str(tmp_path / "fly.pyc"), doraise=True)
    imported = {(n.module, a.name) for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ImportFrom)
                for a in n.names}
    assert {("airplay.graph", "fly_graph"), ("airplay.graph", "FLY_ARGUMENTS")} <= imported
    from airplay.graph import GRAPHS, GraphArgumentError, fly_graph

    assert GRAPHS["fly"][0] is fly_graph
    nodes = fly_graph({"scene": "scenes/indoor_0"})
    assert [n.name for n in nodes] == ["renderer", "policy", "mavlink_bridge"] and nodes[-1].required
    assert nodes[1].parameters["lockstep"] is False
    real = fly_graph({"camera_topic": "/cam/color", "depth_topic": "/cam/depth", "policy": "expert", "scene": "s"})
    assert [n.name for n in real] == ["policy", "mavlink_bridge"]
    assert real[0].remappings == (("camera/image_raw", "/cam/color"), ("camera/depth/image_raw", "/cam/depth"))
    with pytest.raises(GraphArgumentError, match="scene"):
        fly_graph({})


@pytest.fixture(scope="module")
def fly_scene(tmp_path_factory) -> Path:
    from airplay.scene.synthetic import make_scene
    from airplay.sim.world import World

    path = tmp_path_factory.mktemp("fly") / "indoor_1"
    make_scene("indoor", 1, path, gaussians_per_m2=4, name="indoor_1")
    World.load(path)  # the disk-cached SDF, once, before three processes want it
    return path


def test_rehearsal_vehicle_and_fly_graph_fly_the_expert_to_the_goal(fly_scene, tmp_path):
    """`airplay vehicle --scene --task` + the fly graph (renderer as camera, expert policy, bridge)."""
    from airplay.graph import FLY_ARGUMENTS, fly_graph, parse_launch_arguments
    from airplay.launcher import node_command
    from airplay.sim.world import World
    from airplay.tasks.sampler import sample_tasks

    world = World.load(fly_scene)
    tasks = sample_tasks(world.scene, world.grid, 10, 0, "pointgoal", world.protocol)
    index = min(range(len(tasks)), key=lambda k: tasks[k].astar_length_m)   # the shortest: a quick flight
    task = tasks[index]
    port = free_udp_port()
    operator = Operator()
    procs = []
    try:
        procs.append(spawn(vehicle_command(port, "--scene", str(fly_scene), "--task", str(index), "--episodes", "10"),
                           tmp_path / "vehicle.log"))
        arguments = [f"scene:={fly_scene}", f"index:={index}", "episodes:=10", "seed:=0", "render_images:=false",
                     f"connection:=udpin:127.0.0.1:{port}", f"takeoff_height_m:={task.start_position[2]:.3f}"]
        for spec in fly_graph(parse_launch_arguments(arguments, FLY_ARGUMENTS)):
            procs.append(spawn(node_command(spec), tmp_path / f"{spec.name}.log"))
        bridge = procs[-1]
        operator.wait(lambda: operator.latest(operator.phases) == "flying", 40, "the bridge flying", tmp_path)
        operator.wait(lambda: operator.episodes, 5, "episode/status started", tmp_path)
        assert operator.episodes[0]["scene_dir"] == str(fly_scene) and operator.episodes[0]["index"] == index

        def near_goal() -> bool:
            s = operator.latest(operator.odom)
            return s is not None and np.linalg.norm(s[0:3] - task.goal_position) < world.protocol.success_radius_m

        operator.wait(near_goal, 2.0 * task.astar_length_m + 10.0, "the vehicle at the goal", tmp_path)
        path = np.array([s[0:3] for s in list(operator.odom)])
        assert np.linalg.norm(path[-1] - task.goal_position) < world.protocol.success_radius_m
        # it flew the expert's way: away from the start, never outside the scene's navigable region much
        assert np.linalg.norm(path[0, :2] - task.start_position[:2]) < 0.3
        assert not [i for i in operator.interventions if i["kind"] in ("geofence_hold", "heartbeat_lost")]
        operator.land_pub.publish(operator._empty())
        try:
            code = bridge.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("the bridge did not land and exit\n" + logs(tmp_path))
        assert code == 0, logs(tmp_path)
        assert operator.latest(operator.armed) is False
    finally:
        stop_all(procs)
        operator.close()
