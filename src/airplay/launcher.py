"""Start a ROS graph as separate processes where only the pip ROS 2 wheels exist (``airplay launch``).

What ``ros2 launch`` does for ``launch/sim_eval.launch.py``, for the same graph description
(:mod:`airplay.graph`): one process per node, ``python -m <module> --ros-args -r __node:=<name>
-p key:=value ... -r from:=to``, each node's stdout/stderr forwarded line by line behind
``[name]``, and the whole graph stopped (SIGINT, then SIGTERM, then SIGKILL, to each node's
process group) when the required node exits, when any node exits with a non-zero code, or on
Ctrl-C / SIGTERM to the launcher. No rclpy here: the nodes import it, the launcher does not.

DDS stays on this machine unless the caller's environment says otherwise:
``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` and ``FASTDDS_DEFAULT_PROFILES_FILE`` (Fast DDS 3) /
``FASTRTPS_DEFAULT_PROFILES_FILE`` (Fast DDS 2, ROS 2 Jazzy) ``=<config>/fastdds_localhost.xml`` are
set where absent.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from airplay.graph import NodeSpec

LAUNCH_TAG = "[launch]"
POLL_S = 0.05

# Bare strings that rcl's YAML value parser still reads as something else than a string.
_NOT_STRING_WORDS = {"true", "false", "yes", "no", "on", "off", "y", "n"}
_PLAIN_STRING = re.compile(r"[A-Za-z_/][A-Za-z0-9_./-]*")


def format_parameter(value: bool | int | float | str) -> str:
    """A parameter value as rcl parses it back with the same type from ``-p name:=VALUE``.

    rcl reads the value as a YAML scalar: ``true``/``yes``/``on`` are bools, ``3`` an int,
    ``3.0``/``1e-05``/``nan``/``inf`` doubles, and everything else a string. So bools are
    ``true``/``false``, floats always carry a decimal point (``.inf``/``-.inf``/``.nan``
    for the specials), and a string is single-quoted (YAML style, ``'`` doubled) unless it is
    a plain word or path that cannot be read as anything else (``scenes``, ``out/x``).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        text = repr(value)
        if "." not in text:  # 1e+20 -> 1.0e+20
            mantissa, _, exponent = text.partition("e")
            text = f"{mantissa}.0" + (f"e{exponent}" if exponent else "")
        return text
    if isinstance(value, str):
        if _PLAIN_STRING.fullmatch(value) and value.lower() not in _NOT_STRING_WORDS and not _is_number(value):
            return value
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"parameter value {value!r} must be a bool, int, float or str, not {type(value).__name__}")


def _is_number(text: str) -> bool:
    try:
        float(text)  # also nan, inf, infinity in any case
    except ValueError:
        try:
            int(text, 0)
        except ValueError:
            return False
    return True


def node_command(spec: NodeSpec, python: str = sys.executable) -> list[str]:
    """The command line that runs one node: ``python -m airplay.nodes.start module --ros-args ...``
    (:mod:`airplay.nodes.start`: a stop signal during the node's imports ends it quietly)."""
    cmd = [python, "-m", "airplay.nodes.start", spec.module, "--ros-args", "-r", f"__node:={spec.name}"]
    for key, value in spec.parameters.items():
        cmd += ["-p", f"{key}:={format_parameter(value)}"]
    for source, target in spec.remappings:
        cmd += ["-r", f"{source}:={target}"]
    return cmd


def graph_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with the DDS loopback variables set
    where absent, and unbuffered Python output so that lines are forwarded as they come."""
    result = dict(os.environ if env is None else env)
    result.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    profile = result.get("FASTDDS_DEFAULT_PROFILES_FILE") or result.get("FASTRTPS_DEFAULT_PROFILES_FILE")
    if not profile:
        from airplay.config import config_dir

        profile = str(config_dir() / "fastdds_localhost.xml")
    # Fast DDS 2.x (ROS 2 Jazzy) reads FASTRTPS_DEFAULT_PROFILES_FILE, 3.x FASTDDS_DEFAULT_PROFILES_FILE.
    result.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", profile)
    result.setdefault("FASTRTPS_DEFAULT_PROFILES_FILE", profile)
    result.setdefault("PYTHONUNBUFFERED", "1")
    return result


@dataclass
class _Running:
    spec: NodeSpec
    proc: subprocess.Popen
    readers: list[threading.Thread] = field(default_factory=list)
    code: int | None = None


def _exit_status(code: int) -> int:
    """A Popen return code as a shell exit status (killed by signal N -> 128 + N)."""
    return 128 - code if code < 0 else code


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"code {code}"


class _Output:
    """Line-by-line forwarding of the nodes' pipes, one lock so lines never interleave."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def write(self, stream_name: str, text: str) -> None:
        with self.lock:
            stream = getattr(sys, stream_name)
            stream.write(text if text.endswith("\n") else text + "\n")
            stream.flush()

    def forward(self, name: str, pipe, stream_name: str) -> None:
        try:
            for raw in iter(pipe.readline, b""):
                self.write(stream_name, f"[{name}] {raw.decode('utf-8', errors='replace').rstrip()}")
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    def launch_message(self, text: str) -> None:
        self.write("stderr", f"{LAUNCH_TAG} {text}")


def launch_graph(nodes: list[NodeSpec], env: dict[str, str] | None = None, python: str = sys.executable,
                 grace_s: float = 5.0) -> int:
    """Run ``nodes`` as separate processes until the graph ends; return its exit status.

    The graph ends when the required node exits (its code is returned), when any node exits
    with a non-zero code (reported by name; that code is returned), when every node has
    exited, or on SIGINT/SIGTERM to this process (130/143). Then each remaining node's process
    group gets SIGINT, SIGTERM after ``grace_s`` seconds (a node's own ``stop_grace_s`` where
    it has one: the bridge lands first), and SIGKILL after another as long. Further
    SIGINT/SIGTERM while the graph stops are ignored (reported once), as
    ``ros2 launch`` does: each node gets one SIGINT, which airplay's nodes answer with a clean
    shutdown (:func:`airplay.nodes.common.run_node`). Nothing the nodes started outlives this call.
    """
    if not nodes:
        raise ValueError("a graph needs at least one node")
    names = [spec.name for spec in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"node names must be unique: {names}")
    full_env = graph_environment(env)
    out = _Output()
    running: list[_Running] = []
    signals_received: list[int] = []

    def on_signal(signum, _frame):
        signals_received.append(signum)

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {}
    if in_main_thread:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, on_signal)

    status: int | None = None
    try:
        for spec in nodes:
            if signals_received:
                break
            proc = subprocess.Popen(node_command(spec, python), env=full_env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            node = _Running(spec, proc)
            for pipe, stream_name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
                thread = threading.Thread(target=out.forward, args=(spec.name, pipe, stream_name),
                                          name=f"launch-{spec.name}-{stream_name}", daemon=True)
                thread.start()
                node.readers.append(thread)
            running.append(node)
            out.launch_message(f"started {spec.name} (pid {proc.pid}): {spec.module}")
        status = _supervise(running, signals_received, out)
    finally:
        _stop(running, grace_s, signals_received, out)
        if in_main_thread:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    if status is None:  # interrupted while starting
        status = 128 + signals_received[0] if signals_received else 1
    return status


def _supervise(running: list[_Running], signals_received: list[int], out: _Output) -> int:
    """Wait until the graph should end; return the status to report."""
    while True:
        if signals_received:
            signum = signals_received[0]
            out.launch_message(f"{signal.Signals(signum).name} received; stopping the graph")
            return 128 + signum
        for node in running:
            if node.code is not None:
                continue
            code = node.proc.poll()
            if code is None:
                continue
            node.code = code
            if node.spec.required:
                level = "exited" if code == 0 else "failed"
                out.launch_message(f"required node {node.spec.name} {level} ({_describe(code)}); "
                                   "stopping the graph")
                return _exit_status(code)
            if code != 0:
                out.launch_message(f"node {node.spec.name} crashed ({_describe(code)}); stopping the graph")
                return _exit_status(code)
            out.launch_message(f"node {node.spec.name} exited ({_describe(code)})")
        if all(node.code is not None for node in running):
            out.launch_message("all nodes exited")
            return 0
        time.sleep(POLL_S)


def _killpg(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)  # start_new_session: the node's pid is its process group id
    except (ProcessLookupError, PermissionError):
        pass


def _stop(running: list[_Running], grace_s: float, signals_received: list[int], out: _Output) -> None:
    """SIGINT, SIGTERM, SIGKILL to each node's process group until all have exited; signals to
    the launcher meanwhile are ignored (reported once)."""
    signals_before = len(signals_received)
    reported = False
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        alive = [node for node in running if node.proc.poll() is None]
        if not alive:
            break
        if signum != signal.SIGINT:
            out.launch_message(f"sending {signum.name} to {', '.join(n.spec.name for n in alive)}")
        for node in alive:
            _killpg(node.proc.pid, signum)
        wait_s = max(grace_s if n.spec.stop_grace_s is None else n.spec.stop_grace_s for n in alive)
        deadline = time.monotonic() + (wait_s if signum != signal.SIGKILL else 10.0)
        while time.monotonic() < deadline and any(node.proc.poll() is None for node in alive):
            if len(signals_received) > signals_before and not reported:
                name = signal.Signals(signals_received[-1]).name
                out.launch_message(f"{name} again: ignored, the graph is stopping (SIGTERM {grace_s:g} s after "
                                   "SIGINT, then SIGKILL)")
                reported = True
            time.sleep(POLL_S)
    for node in running:
        # Leftovers the node started in its own group (pools, helpers): never orphans.
        _killpg(node.proc.pid, signal.SIGKILL)
        try:
            node.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            out.launch_message(f"{node.spec.name} (pid {node.proc.pid}) did not exit after SIGKILL")
        for thread in node.readers:
            thread.join(timeout=2.0)
