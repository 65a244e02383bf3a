"""The repository root is a ROS 2 ament_python package: colcon builds and installs it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_package_xml_declares_ament_python():
    root = ET.parse(REPO / "package.xml").getroot()
    assert root.get("format") == "3"
    assert root.findtext("name") == "airplay"
    assert root.find("export/build_type").text == "ament_python"
    deps = {e.text for e in root.findall("exec_depend")}
    assert {"rclpy", "std_msgs", "sensor_msgs", "geometry_msgs", "nav_msgs", "rosgraph_msgs"} <= deps
    assert {"ament_index_python", "launch", "launch_ros", "ros2launch"} <= deps  # config.py, launch/*.launch.py
    assert (REPO / "resource" / "airplay").is_file()


@pytest.mark.slow
def test_colcon_build_installs_the_ros_layout(tmp_path_factory):
    """A plain ``colcon build`` (no --symlink-install) of a fresh workspace (test/helpers/installs.py,
    built once per session and shared with test_install.py and test_ros2_launch.py)."""
    from helpers.installs import colcon_install

    install = colcon_install(tmp_path_factory).prefix
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / "airplay").is_file()
    assert (install / "share" / "airplay" / "package.xml").is_file()
    assert (install / "share" / "airplay" / "config" / "fastdds_localhost.xml").is_file()
    for name in ("protocol.yaml", "vehicle.yaml", "vln.yaml"):
        assert (install / "share" / "airplay" / "config" / name).is_file(), name
    for name in ("sim_eval.launch.py", "collect.launch.py", "fly.launch.py"):
        assert (install / "share" / "airplay" / "launch" / name).is_file(), name
    # `ros2 run airplay airplay` looks in lib/<package>; so does ros2 launch for the node executables.
    assert (install / "lib" / "airplay" / "airplay").is_file()
    for node in ("sim_node", "renderer_node", "policy_node", "evaluator_node", "recorder_node", "mavlink_bridge_node",
                 "viewer_node"):
        assert (install / "lib" / "airplay" / node).is_file(), node
    site = next((install / "lib").glob("python3*/site-packages"))
    assert (site / "airplay" / "scene" / "ply_io.py").is_file()
    assert not (site / "airplay").is_symlink() and not (site / "airplay" / "config.py").is_symlink()  # a copy
