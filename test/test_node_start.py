"""airplay.nodes.start: the entry of every node process, under real signals."""

from __future__ import annotations

import ast
import inspect
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airplay.graph import GRAPHS
from airplay.launcher import node_command
from airplay.nodes import start

REPO = Path(__file__).resolve().parents[1]

SLOW_IMPORT = '''
import pathlib, sys, time
pathlib.Path(sys.argv[-1]).write_text("importing")
time.sleep(60)


def main(args=None):
    return 0
'''

ARGV_ECHO = '''
import sys


def main(args=None):
    print(repr(sys.argv))
    return 3
'''


def _node_env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{REPO / 'src'}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return env


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_during_the_imports_ends_the_node_by_that_signal_without_a_traceback(tmp_path, signum):
    (tmp_path / "slow_import_node.py").write_text(SLOW_IMPORT)
    marker = tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, "-m", "airplay.nodes.start", "slow_import_node", str(marker)],
                            env=_node_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == -signum, (proc.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert out == ""


def test_the_node_main_gets_the_command_line_without_the_module_argument(tmp_path):
    (tmp_path / "argv_echo_node.py").write_text(ARGV_ECHO)
    res = subprocess.run([sys.executable, "-m", "airplay.nodes.start", "argv_echo_node", "--ros-args", "-p", "a:=1"],
                         env=_node_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert res.returncode == 3, res.stderr
    assert ast.literal_eval(res.stdout.strip()) == ["argv_echo_node", "--ros-args", "-p", "a:=1"]


def test_without_a_module_it_prints_its_usage(tmp_path):
    res = subprocess.run([sys.executable, "-m", "airplay.nodes.start"], env=_node_env(tmp_path),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "usage: python -m airplay.nodes.start MODULE" in res.stderr


def test_both_launchers_start_every_node_of_every_graph_through_start():
    """``ros2 launch`` runs the console script (setup.py), ``airplay launch`` node_command."""
    setup_text = (REPO / "setup.py").read_text()
    seen = set()
    for name, (build, _arguments) in GRAPHS.items():
        for spec in build({"scene": "s"} if name == "fly" else {"viewer": "true"}):
            seen.add(spec.executable)
            assert f'"{spec.executable} = airplay.nodes.start:{spec.executable}"' in setup_text, spec.executable
            entry = getattr(start, spec.executable)
            assert [n.value for n in ast.walk(ast.parse(inspect.getsource(entry)))
                    if isinstance(n, ast.Constant)] == [spec.module], spec.executable
            assert node_command(spec, "python")[:4] == ["python", "-m", "airplay.nodes.start", spec.module]
    assert seen == {"sim_node", "renderer_node", "policy_node", "evaluator_node", "mavlink_bridge_node",
                    "recorder_node", "viewer_node"}
