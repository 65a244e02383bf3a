"""airplay installed as users install it, for the tests: a plain ``colcon build`` workspace (no
``--symlink-install``) and a wheel installed by pip into a prefix, each made once per test session
from a copy of this working tree, and the environments that use them from outside the repository.

The copies run on this virtual environment's interpreter and dependencies (rclpy, numpy, ...),
as a colcon build does with the Python it was run by; ``PYTHONPATH`` holds the install's
site-packages only, so ``import airplay`` is the installed copy (the editable install's path
entry comes after it; :func:`Install.check_imported_from` says so).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
PYTHON_DIR = f"python{sys.version_info.major}.{sys.version_info.minor}"
COPY_IGNORE = shutil.ignore_patterns(".venv", ".git", "scenes", "out", "build", "install", "log", "__pycache__",
                                     "*.egg-info", "bags", ".pytest_cache", "dist")
ROS2_LAUNCH_TOOLS = REPO.parent / "shared" / "tools" / "ros2-jazzy-launch"
"""``ros2`` and ``ros2 launch`` built for the pip ROS 2 wheels (its README.md)."""


@dataclass(frozen=True)
class Install:
    """One installation of airplay: ``prefix`` (install/airplay, or pip's ``--prefix``), its
    ``site`` (lib/pythonX.Y/site-packages), ``scripts`` (the ``airplay`` command and the node
    executables: lib/airplay for colcon, bin for pip) and ``share`` (share/airplay)."""

    kind: str
    prefix: Path
    site: Path
    scripts: Path
    share: Path

    def environment(self, ament: bool) -> dict[str, str]:
        """This process's environment set up for the install, as colcon's setup files would
        (``ament``: AMENT_PREFIX_PATH holds the prefix) or as a pip user has it (no ament index)."""
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)
        env.pop("AMENT_PREFIX_PATH", None)
        env["PYTHONPATH"] = str(self.site)
        env["PATH"] = os.pathsep.join([str(self.scripts), str(VENV_BIN), env.get("PATH", "")])
        if ament:
            env["AMENT_PREFIX_PATH"] = str(self.prefix)
        return loopback_dds(env)

    def check_imported_from(self, env: dict[str, str], cwd: Path) -> dict:
        """Where ``airplay`` and its share folder come from under ``env`` (run in ``cwd``)."""
        code = ("import json, airplay, airplay.config as c; "
                "print(json.dumps({'module': airplay.__file__, 'share': str(c.share_dir())}))")
        res = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                             timeout=60)
        assert res.returncode == 0, res.stderr
        import json

        return json.loads(res.stdout.strip().splitlines()[-1])


def copy_repo(dest: Path) -> Path:
    """The working tree's files (no .venv, .git, build outputs, scenes or caches) at ``dest``."""
    shutil.copytree(REPO, dest, ignore=COPY_IGNORE)
    return dest


def colcon_command() -> str:
    """The ``colcon`` of this environment, or skip."""
    colcon = shutil.which("colcon", path=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if colcon is None:
        pytest.skip("colcon is not installed (pip install -e '.[dev]' brings it)")
    return colcon


_MADE: dict[str, Install] = {}


def colcon_install(tmp_path_factory) -> Install:
    """``colcon build`` (plain, no --symlink-install) of a copy of the working tree in a fresh
    workspace ``ws/src/airplay``; built once per session."""
    if "colcon" not in _MADE:
        colcon = colcon_command()
        ws = tmp_path_factory.mktemp("colcon-ws")
        copy_repo(ws / "src" / "airplay")
        res = subprocess.run([colcon, "build", "--event-handlers", "console_direct-"], cwd=ws, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        prefix = ws / "install" / "airplay"
        _MADE["colcon"] = Install("colcon", prefix, prefix / "lib" / PYTHON_DIR / "site-packages",
                                  prefix / "lib" / "airplay", prefix / "share" / "airplay")
    return _MADE["colcon"]


def wheel_install(tmp_path_factory) -> Install:
    """A wheel of a copy of the working tree (``pip wheel --no-deps --no-build-isolation``),
    installed with ``pip install --no-deps --no-index --ignore-installed --prefix`` (the
    dependencies are this environment's; nothing is downloaded, nothing of this environment is
    touched); made once per session."""
    if "wheel" not in _MADE:
        root = tmp_path_factory.mktemp("wheel")
        source = copy_repo(root / "source")
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        res = subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
                              str(root / "dist"), str(source)], capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        wheels = sorted((root / "dist").glob("airplay-*.whl"))
        assert len(wheels) == 1, wheels
        prefix = root / "prefix"
        # --ignore-installed: pip would otherwise first uninstall this environment's airplay (the
        # editable install the test suite runs from) before installing into the prefix.
        res = subprocess.run([*pip, "install", "--no-deps", "--no-index", "--ignore-installed",
                              "--no-warn-script-location", "--prefix", str(prefix), str(wheels[0])],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "Uninstalling" not in res.stdout, res.stdout
        _MADE["wheel"] = Install("wheel", prefix, prefix / "lib" / PYTHON_DIR / "site-packages", prefix / "bin",
                                 prefix / "share" / "airplay")
    return _MADE["wheel"]


def ros2_launch_environment(install: Install) -> dict[str, str]:
    """The environment of a shell that sourced the ros2-jazzy-launch overlay (its setup.bash,
    after this virtual environment) and then the colcon workspace's install/setup.bash; skip
    where the overlay is absent."""
    if not (ROS2_LAUNCH_TOOLS / "setup.bash").is_file():
        pytest.skip(f"the ros2 launch tools are not at {ROS2_LAUNCH_TOOLS} (see its README.md)")
    env = dict(os.environ)
    for key in ("PYTHONPATH", "AMENT_PREFIX_PATH", "COLCON_PREFIX_PATH"):
        env.pop(key, None)
    env["PATH"] = os.pathsep.join([str(VENV_BIN), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(VENV_BIN.parent)
    setup = install.prefix.parent / "setup.bash"
    script = f'source "{ROS2_LAUNCH_TOOLS / "setup.bash"}" && source "{setup}" && env -0'
    res = subprocess.run(["bash", "-c", script], env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    sourced = dict(item.split("=", 1) for item in res.stdout.decode().split("\0") if "=" in item)
    return loopback_dds({k: v for k, v in sourced.items()
                         if not k.startswith("BASH_FUNC_") and k not in ("SHLVL", "_", "PWD", "OLDPWD")})


_NAMESPACES: list[bool] = []


def isolated(cmd: list[str]) -> list[str]:
    """``cmd`` in a network namespace of its own (loopback only) with a private /dev/shm (Fast
    DDS's shared-memory transport), where this process may make them (root, ``unshare``): its DDS
    traffic then meets no other graph on this machine, whatever ROS domain that one picked.
    Elsewhere ``cmd`` as it is: the loopback settings and a ROS domain of the test's own keep
    graphs apart. The command keeps its process id (``exec``), so signals reach it."""
    if not _NAMESPACES:
        probe = shutil.which("unshare") and subprocess.run(
            ["unshare", "-n", "-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm && ip link set lo up"],
            capture_output=True, timeout=30).returncode == 0
        _NAMESPACES.append(bool(probe))
    if not _NAMESPACES[0]:
        return cmd
    return ["unshare", "-n", "-m", "sh", "-c", 'mount -t tmpfs tmpfs /dev/shm && ip link set lo up && exec "$@"',
            "isolated", *cmd]


def loopback_dds(env: dict[str, str]) -> dict[str, str]:
    """``env`` with DDS kept on loopback (test/conftest.py's settings) under both names of Fast
    DDS's profile variable (FASTRTPS_DEFAULT_PROFILES_FILE is the one Fast DDS 2, ROS 2 Jazzy's, reads)."""
    profile = str(REPO / "config" / "fastdds_localhost.xml")
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", profile)
    env.setdefault("FASTRTPS_DEFAULT_PROFILES_FILE", env["FASTDDS_DEFAULT_PROFILES_FILE"])
    return env


def import_launch_ros() -> None:
    """Make ``launch`` and ``launch_ros`` importable in this process: installed (a ROS 2
    distribution sourced), or else from the ros2-jazzy-launch overlay; skip where neither is."""
    try:
        import launch_ros  # noqa: F401
    except ImportError:
        site = ROS2_LAUNCH_TOOLS / "lib" / PYTHON_DIR / "site-packages"
        if not (site / "launch_ros").is_dir():
            pytest.skip(f"launch_ros is not installed and the ros2 launch tools are not at {ROS2_LAUNCH_TOOLS}")
        sys.path.append(str(site))
        import launch_ros  # noqa: F401
