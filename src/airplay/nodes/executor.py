"""A single-threaded rclpy executor with less Python per wake-up than rclpy's own.

rclpy's :class:`~rclpy.executors.SingleThreadedExecutor` rebuilds its wait set from
scratch on every ``spin_once`` (lists of every node entity, an ``ExitStack`` entering each
handle, a new ``rcl`` wait set) and wraps every callback in a coroutine, a ``Task`` and a
generator. In airplay's lockstep graph a control step is a chain of about ten callbacks
across four processes, so that bookkeeping, not DDS, is most of the graph's cost per step.

:class:`LeanExecutor` runs the same callbacks with the same semantics for what airplay's
nodes use (subscriptions, timers on any clock, guard conditions, services, clients,
waitables such as the QoS event handlers, coroutine callbacks) but:

* keeps one ``rcl`` wait set and the entity lists, remade only after a node added or
  removed an entity (rclpy then wakes the executor through its guard condition);
* waits on rclpy's own services of each node (parameters, type description) and the QoS
  event handlers at least every :data:`SLOW_POLL_S` (0.1 s) rather than on every wake-up
  (a node's own services, such as the bridge's ``estop``, at every wake-up);
* takes and calls ready subscriptions and timers directly, without a ``Task``;
* runs everything in the spinning thread, one ready entity after another in the order
  rclpy uses (timers, subscriptions, guard conditions, clients, services, waitables per node).

Callback groups are not consulted: with one thread every callback runs to completion
before the next starts, which is what a mutually exclusive group guarantees. A coroutine
callback becomes a task of this executor, as with rclpy's executors.

The rclpy internals it needs (the ``rcl`` wait set, the entity handles, the executor's fields)
are all reached through :mod:`airplay.nodes.rclpy_private`, which checks them and the rclpy
version. Select it with ``AIRPLAY_EXECUTOR``: ``auto`` (the default: this executor where that
check passes, rclpy's otherwise), ``lean`` or ``rclpy`` (rclpy's SingleThreadedExecutor), e.g.
to compare them: ``bench/graph.py --compare-executor``.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
from typing import Callable

from rclpy.event_handler import EventHandler
from rclpy.exceptions import InvalidHandle
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.subscription import Subscription

from airplay.nodes import rclpy_private as private

EXECUTORS = ("auto", "lean", "rclpy")
"""Values of ``AIRPLAY_EXECUTOR``: ``auto`` (the default) is ``lean`` where the installed rclpy
is the release line :mod:`airplay.nodes.rclpy_private` was written against and has every private
name it uses, ``rclpy`` otherwise (with a warning on stderr)."""


class ExecutorChoiceError(ValueError):
    """``AIRPLAY_EXECUTOR`` names no executor."""


def executor_from_environment(context=None) -> Executor:
    """The executor ``AIRPLAY_EXECUTOR`` names (default ``auto``, see :data:`EXECUTORS`);
    ExecutorChoiceError for another name."""
    name = os.environ.get("AIRPLAY_EXECUTOR", "auto") or "auto"
    if name not in EXECUTORS:
        raise ExecutorChoiceError(
            f"environment variable AIRPLAY_EXECUTOR must be one of {', '.join(EXECUTORS)}, got {name!r}")
    if name == "rclpy":
        return SingleThreadedExecutor(context=context)
    if name == "lean":
        return LeanExecutor(context=context)
    problem = private.version_problem()
    executor = None
    if problem is None:
        executor = LeanExecutor(context=context)
        problems = private.api_problems(executor)
        if problems:
            problem = "; ".join(problems)
            executor.shutdown()
            executor = None
    if executor is None:
        print(f"airplay: {problem}; using rclpy's SingleThreadedExecutor (AIRPLAY_EXECUTOR=lean forces "
              "airplay's)", file=sys.stderr, flush=True)
        return SingleThreadedExecutor(context=context)
    return executor


SLOW_POLL_S = 0.1
"""rclpy's own services of every node (parameters, type descriptions) and the QoS event
handlers are waited on at least this often (seconds of wall time), not on every wake-up:
none of them is on a control loop's path (parameter requests, incompatible QoS, lost
messages), and each one in the wait set costs every wake-up Python and rmw time. Services
a node makes itself (the bridge's ``estop``) are waited on at every wake-up."""

BUILTIN_SERVICES = ("describe_parameters", "get_parameters", "get_parameter_types", "list_parameters",
                    "set_parameters", "set_parameters_atomically", "get_type_description")
"""Last name component of the services rclpy gives every node."""


def _builtin_service(service) -> bool:
    return service.srv_name.rsplit("/", 1)[-1] in BUILTIN_SERVICES


class _Entities:
    """The entities of the executor's nodes, split into those waited on at every wake-up and the
    slow ones (services, QoS event handlers), with one ``rcl`` wait set sized for all of them."""

    def __init__(self, executor: "LeanExecutor", nodes: list) -> None:
        self.nodes = tuple(nodes)
        self.timers, self.subscriptions, self.guards, self.clients, self.services = [], [], [], [], []
        self.waitables, self.events, self.builtin_services = [], [], []
        for node in nodes:
            self.timers.extend(node.timers)
            self.subscriptions.extend(node.subscriptions)
            self.guards.extend(node.guards)
            self.clients.extend(node.clients)
            for s in node.services:
                (self.builtin_services if _builtin_service(s) else self.services).append(s)
            for w in node.waitables:
                (self.events if isinstance(w, EventHandler) else self.waitables).append(w)
        counts = [w.get_num_entities() for w in self.waitables + self.events]
        self.wait_set = private.new_wait_set(
            len(self.subscriptions) + sum(c.num_subscriptions for c in counts),
            len(self.guards) + 2 + sum(c.num_guard_conditions for c in counts),  # + the executor's two
            len(self.timers) + sum(c.num_timers for c in counts),
            len(self.clients) + sum(c.num_clients for c in counts),
            len(self.services) + len(self.builtin_services) + sum(c.num_services for c in counts),
            sum(c.num_events for c in counts),
            executor)
        self.fast_handles = private.handles(self.subscriptions + self.guards + self.timers + self.clients
                                            + self.services) + list(self.waitables)
        self.slow_handles = private.handles(self.builtin_services) + list(self.events)
        self.sub_by_ptr = {private.pointer(x): x for x in self.subscriptions}
        self.timer_by_ptr = {private.pointer(x): x for x in self.timers}
        self.client_by_ptr = {private.pointer(x): x for x in self.clients}
        self.service_by_ptr = {private.pointer(x): x for x in self.services + self.builtin_services}
        self.guard_by_ptr = {private.pointer(x): x for x in self.guards}


class LeanExecutor(Executor):
    """Single-threaded executor: rclpy's callbacks, one persistent wait set (module docstring)."""

    def __init__(self, *, context=None) -> None:
        super().__init__(context=context)
        self._entities: _Entities | None = None
        self._next_slow = 0.0  # time.monotonic() when services and events are due

    def _current(self) -> _Entities:
        """The entity lists, remade when stale: rclpy wakes the executor (its guard condition)
        whenever a node creates or destroys an entity, and after that wake-up they are remade."""
        nodes = self.get_nodes()
        e = self._entities
        if e is None or len(e.nodes) != len(nodes) or any(a is not b for a, b in zip(e.nodes, nodes)):
            self._entities = e = _Entities(self, nodes)
        return e

    # -- the executor interface ------------------------------------------------------------
    def spin_once(self, timeout_sec: float | None = None) -> None:
        self._spin_once(timeout_sec)

    def spin_once_until_future_complete(self, future, timeout_sec: float | None = None) -> None:
        future.add_done_callback(lambda _: self.wake())
        self._spin_once(timeout_sec, future.done)

    # -- one wake-up -----------------------------------------------------------------------
    def _spin_once(self, timeout_sec: float | None, condition: Callable[[], bool] = lambda: False) -> None:
        if private.is_shut_down(self) or condition():
            return
        self._run_tasks()
        e = self._current()
        timeout_sec = getattr(timeout_sec, "timeout", timeout_sec)  # rclpy passes a TimeoutObject
        now = time.monotonic()
        slow = now >= self._next_slow
        if slow:
            self._next_slow = now + SLOW_POLL_S
        elif e.slow_handles:  # wake up in time to look at them
            left = self._next_slow - now
            timeout_sec = left if timeout_sec is None or timeout_sec < 0 else min(timeout_sec, left)
        timeout_ns = -1 if timeout_sec is None or timeout_sec < 0 else int(timeout_sec * 1e9)
        own = private.wake_guards(self)
        if own is None:  # shut down meanwhile
            return
        ready = private.wait(e.wait_set, e, slow, own, self, timeout_ns)
        if ready is None:  # an entity was destroyed since the lists were made
            self._entities = None
            return
        timers, subs, guards, clients, services, woken = ready
        if woken:  # entities may have changed: remake the lists
            self._entities = None
        if private.is_shut_down(self):
            return
        if not private.context_ok(self):
            raise ExternalShutdownException()
        ready_waitables = [w for w in (e.waitables + e.events if slow else e.waitables) if w.is_ready(e.wait_set)]
        for ready, by_ptr, run in ((timers, e.timer_by_ptr, self._run_timer),
                                   (subs, e.sub_by_ptr, self._run_subscription),
                                   (guards, e.guard_by_ptr, self._run_guard),
                                   (clients, e.client_by_ptr, self._run_client),
                                   (services, e.service_by_ptr, self._run_service)):
            for ptr in ready:
                entity = by_ptr.get(ptr)  # None: the executor's own guards, or gone meanwhile
                if entity is not None:
                    run(entity)
        for w in ready_waitables:
            data = w.take_data()
            for future in private.waitable_futures(w):
                private.bind_future(future, self)
            self._drive(w.execute(data))

    # -- running callbacks -----------------------------------------------------------------
    def _call(self, fn, *args):
        result = fn(*args)
        if inspect.iscoroutine(result):
            return self._drive(result)
        return result

    def _drive(self, coro):
        """Run a coroutine; if it suspends, it continues as a task of this executor."""
        try:
            coro.send(None)
        except StopIteration as done:
            return done.value
        self.create_task(coro)  # a Task resumes a started coroutine with send(None)
        return None

    def _run_tasks(self) -> bool:
        """Step each pending task once (coroutine callbacks that awaited), as rclpy's executors
        do before each wait; True if any ran."""
        tasks = private.pending_tasks(self)
        ran = False
        for task in tasks:
            task()
            ran = True
            if task.exception() is not None:
                raise task.exception()
        if ran:
            private.drop_done_tasks(self)
        return ran

    def _run_timer(self, t) -> None:
        try:
            if not private.call_timer(t):  # rclpy's workaround for cancelled timers
                return
        except InvalidHandle:
            return
        self._call(t.callback)

    def _run_subscription(self, s: Subscription) -> None:
        try:
            msg_info = private.take_message(s)
        except InvalidHandle:
            return
        if msg_info is None:
            return
        if private.message_only(s):
            self._call(s.callback, msg_info[0])
        else:
            self._call(s.callback, *msg_info)

    def _run_guard(self, g) -> None:
        if g.callback is not None:
            self._call(g.callback)

    def _run_client(self, c) -> None:
        try:
            header, response = private.take_response(c)
        except InvalidHandle:
            return
        if header is None:
            return
        try:
            future = c.get_pending_request(header.request_id.sequence_number)
        except KeyError:  # the request was cancelled
            return
        private.bind_future(future, self)
        future.set_result(response)

    def _run_service(self, s) -> None:
        try:
            request, header = private.take_request(s)
        except InvalidHandle:
            return
        if header is None:
            return
        response = self._call(s.callback, request, s.srv_type.Response())
        s.send_response(response, header)

