"""The repository root is a ROS 2 ament_python package: colcon builds and installs it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
    assert (REPO / "resource" / "airplay").is_file()


def test_colcon_build_installs_the_ros_layout(tmp_path):
    colcon = shutil.which("colcon", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if colcon is None:
        pytest.skip("colcon is not installed (pip install -e '.[dev]' brings it)")
    ws = tmp_path / "ws"
    src = ws / "src" / "airplay"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".git", "scenes", "out", "build", "install",
                                                              "log", "__pycache__", "*.egg-info", "bags"))
    res = subprocess.run([colcon, "build", "--event-handlers", "console_direct-"], cwd=ws,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    install = ws / "install" / "airplay"
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / "airplay").is_file()
    assert (install / "share" / "airplay" / "package.xml").is_file()
    assert (install / "share" / "airplay" / "config" / "fastdds_localhost.xml").is_file()
    # `ros2 run airplay airplay` looks in lib/<package>.
    assert (install / "lib" / "airplay" / "airplay").is_file()
    site = next((install / "lib").glob("python3*/site-packages"))
    assert (site / "airplay" / "scene" / "ply_io.py").is_file()
