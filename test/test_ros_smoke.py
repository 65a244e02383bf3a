"""The workspace's ROS 2 install works over real DDS on loopback, across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

rclpy = pytest.importorskip("rclpy", reason="ROS 2 (rclpy) is not installed; run `make test` to set it up")

PUBLISHER = textwrap.dedent(
    """
    import sys, time, rclpy
    from std_msgs.msg import String
    rclpy.init()
    node = rclpy.create_node("airplay_smoke_pub")
    pub = node.create_publisher(String, "airplay_smoke", 10)
    deadline = time.monotonic() + 30.0
    i = 0
    while time.monotonic() < deadline:
        pub.publish(String(data=f"hello {i}"))
        i += 1
        rclpy.spin_once(node, timeout_sec=0.05)
    """
)


@pytest.mark.ros
def test_string_crosses_processes_on_loopback():
    assert os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert os.environ["FASTDDS_DEFAULT_PROFILES_FILE"].endswith("config/fastdds_localhost.xml")
    from std_msgs.msg import String

    proc = subprocess.Popen([sys.executable, "-c", PUBLISHER])
    received: list[str] = []
    try:
        rclpy.init()
        node = rclpy.create_node("airplay_smoke_sub")
        node.create_subscription(String, "airplay_smoke", lambda m: received.append(m.data), 10)
        deadline = time.monotonic() + 25.0
        while len(received) < 3 and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
        node.destroy_node()
    finally:
        if rclpy.ok():
            rclpy.shutdown()
        proc.terminate()
        proc.wait(timeout=10)
    assert len(received) >= 3, "no messages crossed between processes over DDS"
    assert all(m.startswith("hello ") for m in received)
