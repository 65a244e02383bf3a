"""Start a node process so that a stop signal during its imports ends it at once, quietly.

Importing a node module loads rclpy, numpy, the scene and render code (and torch for a learned
policy): a second or more on a busy machine, before :func:`airplay.nodes.common.run_node`
installs its stop-signal handling (:mod:`airplay.nodes.shutdown`). A launcher that stops the
graph in that window (another node failed at start) would otherwise meet Python's default
SIGINT handler: a ``KeyboardInterrupt`` traceback from the middle of an import. Here SIGINT and
SIGTERM are handled from the first line: a signal before the node's ``main`` takes over ends the
process by that same signal, with its default action (nothing has been built, nothing needs
cleaning up), so a launcher reports "exited with signal SIGINT" and no traceback.

Both launchers start nodes through this module: ``ros2 launch`` / ``ros2 run`` through the
console scripts below (setup.py), ``airplay launch`` with ``python -m airplay.nodes.start
MODULE --ros-args ...`` (:func:`airplay.launcher.node_command`). Standard library only.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _end_by_signal(signum, _frame) -> None:
    """The process ends by ``signum`` with the signal's default action (its exit status says so)."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def run(module: str, args: list[str] | None = None) -> int:
    """Import the node module ``module`` with stop signals ending the process, then return its ``main(args)``.

    ``main`` (:func:`airplay.nodes.common.run_node`) installs its own handlers before rclpy starts.
    """
    for signum in STOP_SIGNALS:
        signal.signal(signum, _end_by_signal)
    node_module = importlib.import_module(module)
    return node_module.main(args)


def main(argv: list[str] | None = None) -> int:
    """``python -m airplay.nodes.start MODULE [--ros-args ...]``: run the node of MODULE."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        print("usage: python -m airplay.nodes.start MODULE [--ros-args ...]", file=sys.stderr)
        return 2
    module, rest = argv[0], argv[1:]
    sys.argv = [module] + rest  # what the node's own argument handling (rclpy's included) reads
    return run(module)


# The console scripts of setup.py (the node executables of airplay.graph's NodeSpec).
def sim_node() -> int:
    return run("airplay.nodes.sim_node")


def renderer_node() -> int:
    return run("airplay.nodes.renderer_node")


def policy_node() -> int:
    return run("airplay.nodes.policy_node")


def evaluator_node() -> int:
    return run("airplay.nodes.evaluator_node")


def mavlink_bridge_node() -> int:
    return run("airplay.nodes.mavlink_bridge_node")


def recorder_node() -> int:
    return run("airplay.nodes.recorder_node")


def viewer_node() -> int:
    return run("airplay.nodes.viewer_node")


if __name__ == "__main__":
    raise SystemExit(main())
