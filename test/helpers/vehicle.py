"""The rehearsal vehicle and the MAVLink bridge driven from a test: the processes (spawned with
the graph's environment, stopped with SIGINT then killed), their logs, the vehicle's command line,
and :class:`Operator`, the test's ROS side of the bridge (test_mavlink_node,
test_policy_closed_loop)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest


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


def expect_landed_exit(bridge: subprocess.Popen, folder: Path, timeout_s: float = 20.0) -> None:
    """The bridge (asked to land or stop) lands and exits 0 within ``timeout_s``."""
    try:
        code = bridge.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pytest.fail("the bridge did not land and exit\n" + logs(folder))
    assert code == 0, logs(folder)


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
        self.interventions, self.episodes, self.reports, self.results, self.ties = [], [], [], [], []
        self.timeline = []  # (monotonic s, "odom" | "phase", value): what came when
        keep = self._keep
        node.create_subscription(Odometry, "odom", keep(self.odom, self._odom), RELIABLE)
        node.create_subscription(Bool, "vehicle/armed", keep(self.armed, lambda m: m.data), RELIABLE)
        node.create_subscription(String, "vehicle/mode", keep(self.modes, lambda m: m.data), RELIABLE)
        node.create_subscription(String, "vehicle/phase", keep(self.phases, lambda m: m.data), RELIABLE)
        node.create_subscription(BatteryState, "vehicle/battery", keep(self.battery, lambda m: m.voltage), RELIABLE)
        node.create_subscription(String, "supervisor/interventions",
                                 keep(self.interventions, lambda m: json.loads(m.data)), RELIABLE)
        node.create_subscription(String, "episode/status", keep(self.episodes, lambda m: json.loads(m.data)), RELIABLE)
        node.create_subscription(String, "episode/policy", keep(self.reports, lambda m: json.loads(m.data)), RELIABLE)
        from airplay.nodes.common import EPISODE_STATUS

        node.create_subscription(String, "mission/result", keep(self.results, lambda m: json.loads(m.data)),
                                 EPISODE_STATUS)
        node.create_subscription(String, "vehicle/map_tie", keep(self.ties, lambda m: json.loads(m.data)),
                                 EPISODE_STATUS)
        self.instruction_pub = node.create_publisher(String, "instruction", RELIABLE)
        self._string = String
        self.cmd_pub = node.create_publisher(TwistStamped, "cmd_vel", RELIABLE)
        self.estop_pub = node.create_publisher(Empty, "estop", RELIABLE)
        self.land_pub = node.create_publisher(Empty, "land", RELIABLE)
        self._empty = Empty
        from lifecycle_msgs.srv import ChangeState, GetState
        from std_srvs.srv import Trigger

        self.change_state_client = node.create_client(ChangeState, "/mavlink_bridge/change_state")
        self.get_state_client = node.create_client(GetState, "/mavlink_bridge/get_state")
        self.arm_client = node.create_client(Trigger, "/mavlink_bridge/arm")
        self.bg.start()

    def call(self, client, request, timeout_s: float = 10.0):
        """Call a service of the bridge (the executor spins in the background); the response."""
        assert client.wait_for_service(timeout_sec=timeout_s), f"service {client.srv_name} not offered"
        future = client.call_async(request)
        deadline = time.monotonic() + timeout_s
        while not future.done():
            assert time.monotonic() < deadline, f"no answer from {client.srv_name}"
            time.sleep(0.02)
        return future.result()

    def lifecycle_state(self) -> str:
        from lifecycle_msgs.srv import GetState

        return self.call(self.get_state_client, GetState.Request()).current_state.label

    def transition(self, label: str) -> bool:
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition.label = label
        return self.call(self.change_state_client, request).success

    @staticmethod
    def _odom(msg) -> np.ndarray:
        from airplay.nodes.common import state_from_odometry

        return state_from_odometry(msg)

    def _keep(self, into: list, convert):
        kind = "odom" if into is self.odom else "phase" if into is self.phases else None

        def callback(msg):
            with self.bg.lock:
                into.append(convert(msg))
                if kind is not None:
                    self.timeline.append((time.monotonic(), kind, into[-1]))
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
