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


WATCHER = textwrap.dedent(
    """
    import sys, time, rclpy
    rclpy.init()
    node = rclpy.create_node("airplay_lease_watcher")
    seen = False
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
        present = "airplay_lease_victim" in node.get_node_names()
        if present and not seen:
            seen = True
            print("seen", flush=True)
        elif seen and not present:
            print(f"gone {time.monotonic()}", flush=True)
            break
    """
)
VICTIM = textwrap.dedent(
    """
    import rclpy
    rclpy.init()
    node = rclpy.create_node("airplay_lease_victim")
    while True:
        rclpy.spin_once(node, timeout_sec=0.1)
    """
)


@pytest.mark.ros
@pytest.mark.slow
def test_the_loopback_profile_is_what_fast_dds_runs_with(monkeypatch):
    """Fast DDS reads config/fastdds_localhost.xml (loopback UDP and shared memory only): Fast DDS
    2.x, ROS 2 Jazzy's, reads it from FASTRTPS_DEFAULT_PROFILES_FILE and ignores the name Fast
    DDS 3 reads. Seen by the profile's participant lease: a SIGKILLed node leaves the graph
    after about 10 s, where Fast DDS's own default is 20 s."""
    from conftest import random_ros_domain

    assert os.environ["FASTRTPS_DEFAULT_PROFILES_FILE"] == os.environ["FASTDDS_DEFAULT_PROFILES_FILE"]
    monkeypatch.setenv("ROS_DOMAIN_ID", random_ros_domain())
    watcher = subprocess.Popen([sys.executable, "-c", WATCHER], stdout=subprocess.PIPE, text=True)
    victim = subprocess.Popen([sys.executable, "-c", VICTIM])
    try:
        assert watcher.stdout.readline().strip() == "seen"
        killed = time.monotonic()
        victim.kill()
        line = watcher.stdout.readline().split()
        assert line and line[0] == "gone", "the watcher never saw the killed node leave"
        waited = float(line[1]) - killed
    finally:
        for proc in (victim, watcher):
            proc.kill()
            proc.wait(timeout=10)
    assert 8.0 < waited < 15.0, f"a killed node left the graph after {waited:.1f} s (profile lease: 10 s)"


def test_random_ros_domains_leave_the_sitl_ports_free():
    """Fast DDS binds its domain's ports: with ROS_DOMAIN_ID 48 a node holds 19410, where the PX4
    SITL tests listen for SIH's true state (seen: all 13 PX4 scenarios failed at boot). A real
    node in a private network namespace, for domain 48 and for the domains the tests draw."""
    from conftest import SITL_UDP_PORTS, random_ros_domain, unshare_permitted

    if not unshare_permitted():
        pytest.skip("unshare -n (a private network namespace) is not permitted here")
    probe = textwrap.dedent(f"""
        import socket, rclpy
        rclpy.init()
        node = rclpy.create_node("port_probe")
        held = []
        for port in {SITL_UDP_PORTS!r}:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                held.append(port)
            s.close()
        print(held)
        node.destroy_node()
        rclpy.shutdown()
    """)

    def held(domain: str) -> str:
        env = {**os.environ, "ROS_DOMAIN_ID": domain}
        inner = f"ip link set lo up && exec {sys.executable} -c '{probe}'"
        out = subprocess.run(["unshare", "-n", "bash", "-c", inner], env=env, capture_output=True, text=True,
                             timeout=60, check=True)
        return out.stdout.strip().splitlines()[-1]

    assert held("48") == "[19410]"
    drawn = {random_ros_domain() for _ in range(500)}
    assert not drawn & {"28", "48"} and len(drawn) > 80
    assert held(sorted(drawn)[0]) == "[]" and held("101") == "[]"
