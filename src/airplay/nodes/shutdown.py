"""How an airplay node process stops on SIGINT and SIGTERM (used by :func:`airplay.nodes.common.run_node`).

rclpy's own handlers (``rclpy.init``'s default) shut the context down from a thread of theirs
the moment a signal comes: a callback that is running then publishes on a dead context
(``RCLError: publisher's context is invalid``), and once the context is down rclpy hands SIGINT
back to Python, so the second SIGINT of a terminal Ctrl-C under ``ros2 launch`` (the terminal
signals the whole process group, then launch signals each node) raises KeyboardInterrupt
wherever the node is, e.g. in ``destroy_node()``. A signal handled that way also cannot end a
callback that is busy (an import, a kernel compilation), so launch escalates to SIGTERM and
SIGKILL. ``run_node`` therefore inits rclpy without signal handlers and uses :class:`StopSignals`:

* the first SIGINT or SIGTERM asks the spin loop to stop: the running callback finishes, no
  other starts, then the node is destroyed and the context shut down, in that order;
* a callback, or the node's construction, still running :data:`ABORT_AFTER_S` later is ended by
  :class:`StopRequested` raised in it (a BaseException, like KeyboardInterrupt, so that a
  node's ``except Exception`` does not swallow it), well before launch's SIGTERM after 5 s;
* from the first signal on, and from the start of the cleanup in any case, SIGINT and SIGTERM
  are ignored until the process exits: nothing interrupts the cleanup, and a launcher's late
  signal finds nothing to interrupt.

Pure ``signal`` module code (no rclpy); only the main thread can install it.
"""

from __future__ import annotations

import contextlib
import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
ABORT_AFTER_S = 2.0
"""Seconds a callback or the node's construction may still run after the first stop signal."""


class StopRequested(BaseException):
    """Raised in the main thread when a stop signal's callback or construction outlasts :data:`ABORT_AFTER_S`."""


class StopSignals:
    """SIGINT/SIGTERM handling of one node process (module docstring). ``requested`` turns true
    on the first signal; the spin loop polls it."""

    def __init__(self, abort_after_s: float = ABORT_AFTER_S) -> None:
        self.abort_after_s = abort_after_s
        self.received: int | None = None
        self._abortable = False

    @property
    def requested(self) -> bool:
        return self.received is not None

    def install(self) -> None:
        """Handle SIGINT and SIGTERM (and SIGALRM for the abort) from now on."""
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_stop_signal)
        signal.signal(signal.SIGALRM, self._on_alarm)

    @contextlib.contextmanager
    def abortable(self):
        """Within this block a stop signal's abort may raise StopRequested (construction and spin)."""
        self._abortable = True
        try:
            yield self
        finally:
            self._abortable = False
            signal.setitimer(signal.ITIMER_REAL, 0.0)

    def ignore_from_now(self) -> None:
        """The cleanup starts: SIGINT and SIGTERM are ignored until the process exits, no abort."""
        self._abortable = False
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)

    def _on_stop_signal(self, signum, _frame) -> None:
        if self.received is not None:
            return
        self.received = signum
        for other in STOP_SIGNALS:  # every later one: ignored by the kernel, not even a Python call
            signal.signal(other, signal.SIG_IGN)
        if self._abortable:
            signal.setitimer(signal.ITIMER_REAL, self.abort_after_s)

    def _on_alarm(self, _signum, _frame) -> None:
        if self._abortable and self.received is not None:
            self._abortable = False
            raise StopRequested(f"{signal.Signals(self.received).name}: still busy {self.abort_after_s} s later")
