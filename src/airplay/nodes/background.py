"""A node with its own rclpy context, spun on a daemon thread: for listening from tests,
benchmarks and tools without taking over the caller's main thread or its rclpy context."""

from __future__ import annotations

import logging
import threading

import rclpy
from rclpy.executors import SingleThreadedExecutor

LOG = logging.getLogger(__name__)


class BackgroundNode:
    """``node`` (created in a private context) spins until :meth:`close`; ``lock`` guards
    whatever the subscription callbacks of a subclass collect."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(name, context=self.context)
        self.lock = threading.Lock()
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)

    def start(self) -> None:
        """Start spinning; call after the subclass has made its subscriptions."""
        self.thread.start()

    def _spin(self) -> None:
        try:
            while self.context.ok():
                self.executor.spin_once(timeout_sec=0.05)
        except Exception as exc:
            if self.context.ok():  # not close(): the node stops hearing anything from here on
                LOG.exception("%s: the spin thread stopped on an error", self._name)
            else:  # close() shut the context down under spin_once: the expected end
                LOG.debug("%s: the spin thread stopped at shutdown (%s: %s)", self._name, type(exc).__name__, exc)

    def close(self) -> None:
        self.context.try_shutdown()
        self.thread.join(timeout=5)
        self.executor.shutdown(timeout_sec=1)
        self.node.destroy_node()
