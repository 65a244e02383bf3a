"""How a node process started by run_node stops (airplay.nodes.shutdown): the first SIGINT or SIGTERM
stops it cleanly, later ones are ignored, a busy callback is ended 2 s later, nothing publishes on
a dead context, no traceback, and the exit code is the node's. A real rclpy node over DDS."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airplay.nodes.shutdown import ABORT_AFTER_S

pytest.importorskip("rclpy")
pytestmark = [pytest.mark.ros, pytest.mark.usefixtures("own_ros_domain")]  # test/conftest.py

REPO = Path(__file__).resolve().parents[1]

PROBE = '''
import sys, time
from rclpy.node import Node
from std_msgs.msg import String
from airplay.nodes.common import run_node

MODE = sys.argv[1]


class Probe(Node):
    """Publishes at 1 kHz from a timer; 'busy': the first tick computes for 60 s; 'exit3': exit code 3."""

    def __init__(self):
        super().__init__("shutdown_probe")
        self.pub = self.create_publisher(String, "probe", 10)
        self.create_timer(0.001, self.tick)
        if MODE == "exit3":
            self.exit_code = 3
        self.ticks = 0

    def tick(self):
        self.pub.publish(String(data="x"))
        self.ticks += 1
        if self.ticks == 1:
            print("ready", flush=True)
        if MODE == "busy":
            t0 = time.monotonic()
            while time.monotonic() - t0 < 60.0:
                pass

    def destroy_node(self):
        print("destroying", flush=True)
        time.sleep(1.0)  # a slow cleanup, for a second signal to land in
        super().destroy_node()
        print("destroyed", flush=True)


sys.exit(run_node(Probe))
'''


@pytest.fixture
def probe(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    return script


def start(script: Path, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(script), mode], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    line = ""
    while "ready" not in line:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the probe node did not start: {line}{proc.stdout.read()}")
    return proc


def stop(proc: subprocess.Popen, signals: list[signal.Signals], gap_s: float = 0.3,
         during_destroy: bool = False) -> tuple[int, str, float]:
    """Send ``signals`` (``gap_s`` apart; with ``during_destroy``, the later ones once the node
    has printed "destroying"), wait; (exit code, output, seconds from the first signal)."""
    t0 = time.monotonic()
    seen = ""
    for i, signum in enumerate(signals):
        if i and during_destroy:
            while "destroying" not in seen:
                line = proc.stdout.readline()
                if not line:
                    break
                seen += line
        elif i:
            time.sleep(gap_s)
        if proc.poll() is None:
            proc.send_signal(signum)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the probe node did not stop\n{seen}{out}")
    return proc.returncode, seen + out, time.monotonic() - t0


@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM], [signal.SIGINT, signal.SIGINT],
                                     [signal.SIGINT, signal.SIGTERM, signal.SIGINT]])
def test_first_signal_stops_cleanly_and_later_ones_are_ignored(probe, signals):
    """The later signals land while destroy_node() runs (a terminal's Ctrl-C, then ros2 launch's)."""
    code, out, _ = stop(start(probe, "idle"), signals, during_destroy=True)
    assert code == 0, out
    assert "destroyed" in out and "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert "context is invalid" not in out, out  # no publish after the context went down


def test_a_busy_callback_is_ended_after_the_grace(probe):
    code, out, elapsed = stop(start(probe, "busy"), [signal.SIGINT, signal.SIGINT])
    assert code == 0, out
    assert "destroyed" in out and "Traceback" not in out, out
    assert ABORT_AFTER_S <= elapsed < 30.0, (elapsed, out)  # the grace, not the callback's 60 s


def test_the_exit_code_is_the_nodes(probe):
    code, out, _ = stop(start(probe, "exit3"), [signal.SIGINT])
    assert code == 3 and "Traceback" not in out, out
