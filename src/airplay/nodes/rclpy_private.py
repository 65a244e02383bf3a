"""The rclpy internals that airplay reaches, in one place: most for
:class:`airplay.nodes.executor.LeanExecutor`, and :data:`RCLError` for the nodes.

rclpy's public API has no way to keep one ``rcl`` wait set across wake-ups or to take a ready
message without a ``Task``, so the lean executor uses what rclpy's own executors use:

* ``rclpy.impl.implementation_singleton.rclpy_implementation`` (the C extension): its
  ``WaitSet`` (``clear_entities``, ``add_subscription``, ``add_guard_condition``,
  ``add_timer``, ``add_client``, ``add_service``, ``wait``, ``get_ready_entities``) and the
  methods of the entity handles (``take_message``, ``is_timer_ready``, ``call_timer``,
  ``take_response``, ``service_take_request``, ``pointer``, ``__enter__``/``__exit__``);
* fields that :class:`rclpy.executors.Executor` sets in ``__init__``: ``_context``,
  ``_guard``, ``_sigint_gc``, ``_is_shutdown``, ``_tasks_lock``, ``_tasks`` (a list of
  ``(task, entity, node)``);
* ``Subscription._callback_type``, ``Waitable._futures``, ``Future._set_executor`` and
  ``Task.executing``;
* ``RCLError``, the C extension's exception for a failed ``rcl`` call (``rclpy._rclpy_pybind11``,
  not re-exported by rclpy): :mod:`airplay.nodes.mavlink_bridge_node` catches it where SIGTERM's
  shutdown races the executor's wait set.

Every use by the lean executor is a function of this module; :data:`PRIVATE_NAMES` lists them and
:func:`api_problems` checks that each still exists with the kind (and arity) expected.
:data:`WRITTEN_AGAINST` is the rclpy release line it was written and tested against (Jazzy's);
:func:`version_problem` says when the installed rclpy is another one, and
:func:`airplay.nodes.executor.executor_from_environment` then falls back to rclpy's own
``SingleThreadedExecutor`` (``AIRPLAY_EXECUTOR=auto``, the default).
"""

from __future__ import annotations

import inspect
import threading
from importlib import metadata

from rclpy.context import Context
from rclpy.exceptions import InvalidHandle
from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.subscription import Subscription
from rclpy.task import Future, Task
from rclpy.waitable import Waitable

RCLError: type[RuntimeError] = getattr(_rclpy, "RCLError", RuntimeError)
"""The C extension's exception for a failed ``rcl`` call (a ``RuntimeError``), e.g. a wait set
whose context was shut down under it; ``RuntimeError`` itself should a later rclpy drop the name."""

WRITTEN_AGAINST = "7.1"
"""The rclpy release line (major.minor) this module was written and tested against: ROS 2 Jazzy."""

PRIVATE_NAMES = {
    # C extension types: name -> the methods used on their instances
    "WaitSet": ("clear_entities", "add_subscription", "add_guard_condition", "add_timer", "add_client",
                "add_service", "wait", "get_ready_entities", "__enter__", "__exit__"),
    "Subscription": ("take_message", "pointer", "__enter__", "__exit__"),
    "Timer": ("is_timer_ready", "call_timer", "pointer", "__enter__", "__exit__"),
    "Client": ("take_response", "pointer", "__enter__", "__exit__"),
    "Service": ("service_take_request", "pointer", "__enter__", "__exit__"),
    "GuardCondition": ("pointer", "__enter__", "__exit__"),
    "Context": ("pointer", "__enter__", "__exit__"),
}
"""The C extension's types (``rclpy_implementation.<name>``) and the members used on them."""

WAIT_SET_ARGUMENTS = 7
"""``WaitSet(subscriptions, guard_conditions, timers, clients, services, events, context)``."""

EXECUTOR_FIELDS = {"_context": Context, "_guard": GuardCondition, "_sigint_gc": GuardCondition,
                   "_is_shutdown": bool, "_tasks": list}
"""Fields of an :class:`rclpy.executors.Executor` read here, with their types (``_tasks_lock``: a lock)."""

PYTHON_METHODS = {(Future, "_set_executor"): ("self", "executor"), (Task, "executing"): ("self",),
                  (Waitable, "is_ready"): ("self", "wait_set"), (Waitable, "take_data"): ("self",),
                  (Waitable, "get_num_entities"): ("self",), (Waitable, "add_to_wait_set"): ("self", "wait_set")}
"""rclpy's Python methods used, with their parameter names."""


def rclpy_version() -> str:
    """The installed rclpy's version ("unknown" when its distribution metadata is missing)."""
    try:
        return metadata.version("rclpy")
    except metadata.PackageNotFoundError:
        return "unknown"


def version_problem(version: str | None = None) -> str | None:
    """None when rclpy ``version`` (default: the installed one) is of :data:`WRITTEN_AGAINST`'s
    release line; otherwise why not, in words."""
    version = rclpy_version() if version is None else version
    if version == WRITTEN_AGAINST or version.startswith(WRITTEN_AGAINST + "."):
        return None
    return (f"rclpy {version} is installed; airplay.nodes.rclpy_private was written against rclpy "
            f"{WRITTEN_AGAINST}.x (ROS 2 Jazzy)")


def _arity(builtin) -> int | None:
    """Parameters of a pybind11 function, from the signature line of its docstring (with self)."""
    doc = (getattr(builtin, "__doc__", None) or "").strip().splitlines()
    if not doc or "(" not in doc[0]:
        return None
    inside = doc[0].split("(", 1)[1].rsplit(")", 1)[0].strip()
    return 0 if not inside else inside.count(":")


def api_problems(executor=None) -> list[str]:
    """Each private name this module uses that is missing or of another kind, in words (empty:
    all present). With ``executor`` (an :class:`rclpy.executors.Executor`), its fields too."""
    problems = []
    for type_name, members in PRIVATE_NAMES.items():
        cls = getattr(_rclpy, type_name, None)
        if cls is None:
            problems.append(f"rclpy_implementation.{type_name} is missing")
            continue
        problems += [f"rclpy_implementation.{type_name}.{m} is missing" for m in members if not hasattr(cls, m)]
    arity = _arity(getattr(getattr(_rclpy, "WaitSet", None), "__init__", None))
    if arity is not None and arity != WAIT_SET_ARGUMENTS + 1:
        problems.append(f"rclpy_implementation.WaitSet() takes {arity - 1} arguments, expected {WAIT_SET_ARGUMENTS}")
    for (cls, name), params in PYTHON_METHODS.items():
        fn = getattr(cls, name, None)
        if not callable(fn):
            problems.append(f"{cls.__module__}.{cls.__name__}.{name} is missing")
            continue
        got = tuple(inspect.signature(fn).parameters)
        if got != params:
            problems.append(f"{cls.__module__}.{cls.__name__}.{name} takes {got}, expected {params}")
    if not isinstance(getattr(Subscription, "CallbackType", None), type) or not hasattr(
            Subscription.CallbackType, "MessageOnly"):
        problems.append("rclpy.subscription.Subscription.CallbackType.MessageOnly is missing")
    if executor is not None:
        for name, kind in EXECUTOR_FIELDS.items():
            if not isinstance(getattr(executor, name, None), kind):
                problems.append(f"Executor.{name} is not a {kind.__name__}: {type(getattr(executor, name, None))}")
        lock = getattr(executor, "_tasks_lock", None)
        if not (hasattr(lock, "acquire") and hasattr(lock, "release")):
            problems.append("Executor._tasks_lock is not a lock")
        if isinstance(getattr(executor, "_tasks", None), list) and any(
                not (isinstance(t, tuple) and len(t) == 3) for t in executor._tasks):
            problems.append("Executor._tasks holds something other than (task, entity, node)")
    return problems


# -- the executor's fields ------------------------------------------------------------------
def context_handle(executor):
    """The executor's context's C handle."""
    return executor._context.handle


def context_ok(executor) -> bool:
    return executor._context.ok()


def is_shut_down(executor) -> bool:
    """True once ``executor.shutdown()`` ran."""
    return executor._is_shutdown


def wake_guards(executor):
    """The executor's own guard conditions (its wake-up, its SIGINT), or None once shut down."""
    wake, sigint = executor._guard, executor._sigint_gc
    if wake is None or sigint is None:
        return None
    return wake, sigint


def tasks_lock(executor) -> threading.Lock:
    return executor._tasks_lock


def pending_tasks(executor) -> list:
    """The executor's tasks that are neither done nor running, in the order they were made."""
    with executor._tasks_lock:
        return [t for t, _, _ in executor._tasks if not t.done() and not t.executing()]


def drop_done_tasks(executor) -> None:
    with executor._tasks_lock:
        executor._tasks = [entry for entry in executor._tasks if not entry[0].done()]


# -- entities --------------------------------------------------------------------------------
def new_wait_set(subscriptions: int, guards: int, timers: int, clients: int, services: int, events: int,
                 executor):
    """An ``rcl`` wait set with room for that many entities of each kind, in the executor's context."""
    return _rclpy.WaitSet(subscriptions, guards, timers, clients, services, events, context_handle(executor))


def pointer(entity) -> int:
    """The address of an entity's ``rcl`` handle: what the wait set reports ready entities by."""
    return entity.handle.pointer


def wait(ws, entities, slow: bool, guards, executor, timeout_ns: int):
    """Fill ``ws`` with ``entities`` (an :class:`airplay.nodes.executor` entity set; with
    ``slow``, its slow ones too) and the executor's two ``guards``, wait up to ``timeout_ns``
    (-1: forever) and return the ready ``(timers, subscriptions, guard conditions, clients,
    services)`` as handle pointers and whether the executor's wake-up guard was among them, or
    None when an entity was destroyed meanwhile.

    Every handle is held while it is in the wait set, as rclpy does, so that an entity destroyed
    from another thread (``shutdown()`` destroys the executor's guards right after triggering
    them) is destroyed only after the wait."""
    e = entities
    wake, sigint = guards
    held = []
    try:
        for handle in (e.fast_handles + e.slow_handles if slow else e.fast_handles):
            handle.__enter__()
            held.append(handle)
        with wake.handle, sigint.handle, context_handle(executor):
            ws.clear_entities()
            for x in e.subscriptions:
                ws.add_subscription(x.handle)
            for x in e.guards:
                ws.add_guard_condition(x.handle)
            ws.add_guard_condition(wake.handle)
            ws.add_guard_condition(sigint.handle)
            for x in e.timers:
                ws.add_timer(x.handle)
            for x in e.clients:
                ws.add_client(x.handle)
            for x in e.services:
                ws.add_service(x.handle)
            for x in e.waitables:
                x.add_to_wait_set(ws)
            if slow:
                for x in e.builtin_services:
                    ws.add_service(x.handle)
                for x in e.events:
                    x.add_to_wait_set(ws)
            ws.wait(timeout_ns)
            ready_guards = ws.get_ready_entities("guard_condition")
            return (ws.get_ready_entities("timer"), ws.get_ready_entities("subscription"), ready_guards,
                    ws.get_ready_entities("client"), ws.get_ready_entities("service"),
                    wake.handle.pointer in ready_guards)
    except InvalidHandle:
        return None
    finally:
        for handle in held:
            handle.__exit__(None, None, None)


def handles(entities) -> list:
    """The ``rcl`` handles of entities (subscriptions, timers, ...) to hold during a wait."""
    return [x.handle for x in entities]


def message_only(subscription: Subscription) -> bool:
    """True when the subscription's callback takes the message alone (not its info too)."""
    return subscription._callback_type is Subscription.CallbackType.MessageOnly


def bind_future(future, executor) -> None:
    """Make ``executor`` the one that runs ``future``'s done callbacks (as rclpy's executors do)."""
    future._set_executor(executor)


def waitable_futures(waitable) -> list:
    """The futures a waitable (e.g. an action client) completes."""
    return waitable._futures


def take_message(s: Subscription):
    """(message, info) taken from the subscription, or None when there was none."""
    return s.handle.take_message(s.msg_type, s.raw)


def call_timer(t) -> bool:
    """Mark the timer called; False when it was not ready after all (e.g. cancelled)."""
    if not t.handle.is_timer_ready():
        return False
    t.handle.call_timer()
    return True


def take_response(c):
    """(header, response) taken from the client, header None when there was none."""
    return c.handle.take_response(c.srv_type.Response)


def take_request(s):
    """(request, header) taken from the service, header None when there was none."""
    return s.handle.service_take_request(s.srv_type.Request)
