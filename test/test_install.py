"""airplay installed as a user installs it, used from another folder: a plain ``colcon build`` (no
``--symlink-install``) and a wheel installed by pip find their config (config/*.yaml, the loopback
Fast DDS profile) and launch files in the install, and run an episode through the ROS graph."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.installs import PYTHON_DIR, REPO, colcon_install, isolated, loopback_dds, wheel_install

pytestmark = [pytest.mark.ros, pytest.mark.usefixtures("own_ros_domain")]  # test/conftest.py

CONFIG_FILES = ("protocol.yaml", "vehicle.yaml", "vln.yaml", "fastdds_localhost.xml")
LAUNCH_FILES = ("sim_eval.launch.py", "collect.launch.py", "fly.launch.py")


def installed_files_are_there(share: Path) -> None:
    for name in CONFIG_FILES:
        assert (share / "config" / name).is_file(), name
    for name in LAUNCH_FILES:
        assert (share / "launch" / name).is_file(), name


def run(cmd: list[str], env: dict, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def one_episode_through_the_graph(env: dict, cwd: Path) -> Path:
    """``airplay scene make`` then ``airplay eval --runtime ros --episodes 1`` with the installed
    ``airplay`` command, relative paths from ``cwd``; the results folder."""
    made = run(["airplay", "scene", "make", "scenes/indoor_1", "--category", "indoor", "--seed", "1", "--density", "4",
                "--name", "indoor_1", "--no-check"], env, cwd, timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    # A hang guard, not a speed check: a fresh install compiles its numba kernels in the first run.
    res = run(isolated(["airplay", "eval", "--runtime", "ros", "--scenes", "scenes/indoor_1", "--episodes", "1",
                        "--no-images", "--out", "out"]), env, cwd, timeout=900)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log
    assert "Traceback" not in log and "config folder" not in log, log
    out = cwd / "out"
    lines = (out / "episodes.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["scene"] == "indoor_1"
    assert json.loads((out / "summary.json").read_text())
    return out


@pytest.fixture(scope="module")
def colcon(tmp_path_factory):
    return colcon_install(tmp_path_factory)


def test_colcon_install_finds_its_share_with_and_without_the_ament_index(colcon, tmp_path):
    installed_files_are_there(colcon.share)
    for ament in (True, False):  # sourced install/setup.bash, or only its python path
        where = colcon.check_imported_from(colcon.environment(ament=ament), tmp_path)
        assert Path(where["module"]).parent == colcon.site / "airplay", where
        assert Path(where["share"]) == colcon.share, (ament, where)


@pytest.mark.slow
def test_colcon_install_runs_an_episode_from_another_folder(colcon, tmp_path):
    env = colcon.environment(ament=True)
    assert shutil.which("airplay", path=env["PATH"]) == str(colcon.scripts / "airplay")
    one_episode_through_the_graph(env, tmp_path)


@pytest.mark.slow
def test_wheel_install_runs_an_episode_from_another_folder(tmp_path_factory, tmp_path):
    wheel = wheel_install(tmp_path_factory)
    installed_files_are_there(wheel.share)
    env = wheel.environment(ament=False)
    where = wheel.check_imported_from(env, tmp_path)
    assert Path(where["module"]).parent == wheel.site / "airplay" and Path(where["share"]) == wheel.share, where
    assert shutil.which("airplay", path=env["PATH"]) == str(wheel.scripts / "airplay")
    one_episode_through_the_graph(env, tmp_path)


def test_a_module_without_its_data_says_where_it_looked(tmp_path):
    """airplay's modules copied into a prefix without share/airplay: the error names each place
    looked at and how to install."""
    site = tmp_path / "prefix" / "lib" / PYTHON_DIR / "site-packages"
    shutil.copytree(REPO / "src" / "airplay", site / "airplay", ignore=shutil.ignore_patterns("__pycache__"))
    env = loopback_dds({k: v for k, v in os.environ.items() if k != "AMENT_PREFIX_PATH"})
    env["PYTHONPATH"] = str(site)
    res = run([sys.executable, "-c", "from airplay.config import config_dir; config_dir()"], env, tmp_path, timeout=60)
    assert res.returncode == 1
    message = res.stderr.strip().splitlines()[-1]
    assert message.startswith("airplay.config.ShareNotFound: airplay's config folder was not found"), message
    for words in ("AMENT_PREFIX_PATH is not set", "the installed airplay distribution's files (",
                  str(site.parents[2] / "share" / "airplay"),
                  "(the source tree)", "pip install .", "colcon build"):
        assert words in message, words
