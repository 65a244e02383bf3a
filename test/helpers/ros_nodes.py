"""The sim_eval graph's nodes started one by one as processes (``python -m airplay.nodes.<node>``
with ``--ros-args`` parameters, output to ``<name>.log``), stopped with SIGINT then killed, and
their logs for a failure message (test_ros_graph, test_policies_cli)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

NODES = {
    "sim": "airplay.nodes.sim_node",
    "renderer": "airplay.nodes.renderer_node",
    "policy": "airplay.nodes.policy_node",
    "evaluator": "airplay.nodes.evaluator_node",
}


def _ros_value(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def start_node(name: str, params: dict, log_dir: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", NODES[name], "--ros-args", "-r", f"__node:={name}"]
    for key, value in params.items():
        cmd += ["-p", f"{key}:={_ros_value(value)}"]
    log = open(log_dir / f"{name}.log", "w")
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_all(procs: dict) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 5.0
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def logs(log_dir: Path) -> str:
    """The last 3,000 characters of every ``*.log`` in ``log_dir``, each under its name."""
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(log_dir.glob("*.log")))
