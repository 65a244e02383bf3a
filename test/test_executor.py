"""airplay.nodes.executor.LeanExecutor runs what rclpy's SingleThreadedExecutor runs.

Over real DDS on loopback: messages between two processes (in order, none lost), a timer,
a parameter service of the other process called through a client and a future, coroutine
callbacks, guard conditions, entities made and destroyed while spinning, shutdown from
another thread; a node started with an unknown AIRPLAY_EXECUTOR exits 2 naming it. The rclpy
internals it uses (airplay.nodes.rclpy_private) are all there with the kinds expected on the
installed rclpy, and the lockstep graph gives the same episodes under it and under rclpy's
SingleThreadedExecutor.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.node import Node  # noqa: E402
from std_msgs.msg import Int64  # noqa: E402

from airplay.nodes import rclpy_private  # noqa: E402
from airplay.nodes.common import RELIABLE  # noqa: E402
from airplay.nodes.executor import LeanExecutor, executor_from_environment  # noqa: E402

pytestmark = pytest.mark.usefixtures("own_ros_domain")  # test/conftest.py

ECHO = textwrap.dedent("""
    import rclpy
    from rclpy.clock import Clock, ClockType
    from rclpy.node import Node
    from std_msgs.msg import Int64
    from airplay.nodes.common import RELIABLE
    from airplay.nodes.executor import LeanExecutor

    rclpy.init()
    node = Node("echo")
    node.declare_parameter("answer", 42)
    from rcl_interfaces.srv import ListParameters
    def listing(request, response):  # a node's own service: waited on at every wake-up
        response.result.names = ["own"]
        return response
    node.create_service(ListParameters, "listing", listing)
    pong = node.create_publisher(Int64, "pong", RELIABLE)
    ticks = node.create_publisher(Int64, "ticks", RELIABLE)
    node.create_subscription(Int64, "ping", lambda m: pong.publish(Int64(data=m.data * 10)), RELIABLE)
    count = [0]
    def tick():
        count[0] += 1
        ticks.publish(Int64(data=count[0]))
    node.create_timer(0.02, tick, clock=Clock(clock_type=ClockType.STEADY_TIME))
    try:
        rclpy.spin(node, LeanExecutor())
    except BaseException:
        pass
""")


@pytest.fixture
def context():
    ctx = rclpy.context.Context()
    rclpy.init(context=ctx)
    yield ctx
    ctx.try_shutdown()


def spin_until(executor, done, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.1)
    assert done(), "timed out"


def test_two_processes_messages_timer_and_a_service_call(context):
    from rcl_interfaces.srv import GetParameters, ListParameters

    echo = subprocess.Popen([sys.executable, "-c", ECHO], env=os.environ.copy())
    try:
        node = Node("tester", context=context)
        executor = LeanExecutor(context=context)
        executor.add_node(node)
        got, ticks = [], []
        ping = node.create_publisher(Int64, "ping", RELIABLE)
        node.create_subscription(Int64, "pong", lambda m: got.append(m.data), RELIABLE)
        node.create_subscription(Int64, "ticks", lambda m: ticks.append(m.data), RELIABLE)
        spin_until(executor, lambda: ping.get_subscription_count() >= 1 and node.count_publishers("pong") >= 1
                   and len(ticks) >= 1, 60.0)

        # The client side of a service (take_response, the future) here; its service side there.
        client = node.create_client(GetParameters, "/echo/get_parameters")
        assert client.wait_for_service(timeout_sec=20.0)
        future = client.call_async(GetParameters.Request(names=["answer"]))
        executor.spin_until_future_complete(future, timeout_sec=20.0)
        assert future.done() and future.result().values[0].integer_value == 42
        own = node.create_client(ListParameters, "/listing")
        assert own.wait_for_service(timeout_sec=20.0)
        future = own.call_async(ListParameters.Request())
        executor.spin_until_future_complete(future, timeout_sec=20.0)
        assert future.done() and list(future.result().result.names) == ["own"]

        # Lockstep-style ping-pong: each ping waits for its pong, in order, none lost.
        for k in range(200):
            ping.publish(Int64(data=k))
            spin_until(executor, lambda: len(got) == k + 1)
        assert got == [10 * k for k in range(200)]
        n = len(ticks)
        spin_until(executor, lambda: len(ticks) >= n + 3)  # the other process's 50 Hz timer goes on
        assert ticks == sorted(ticks) and ticks[-1] - ticks[0] == len(ticks) - 1
    finally:
        echo.terminate()
        echo.wait(timeout=10)


def test_coroutines_guards_runtime_entities_and_shutdown(context):
    node = Node("local", context=context)
    executor = LeanExecutor(context=context)
    executor.add_node(node)
    pub = node.create_publisher(Int64, "numbers", RELIABLE)
    seen_late, seen_async, guard_calls = [], [], []
    gate = rclpy.task.Future()

    async def on_number(msg):  # suspends on a future that a later message completes
        if msg.data == 1:
            await gate
            seen_async.append("after gate")
        elif msg.data == 2:
            gate.set_result(True)

    node.create_subscription(Int64, "numbers", on_number, RELIABLE)
    late = {}

    def make_late(msg):  # an entity created while spinning
        if "sub" not in late:
            late["sub"] = node.create_subscription(Int64, "numbers", lambda m: seen_late.append(m.data), RELIABLE)

    node.create_subscription(Int64, "numbers", make_late, RELIABLE)
    guard = node.create_guard_condition(lambda: guard_calls.append(1))
    spin_until(executor, lambda: pub.get_subscription_count() >= 2)

    pub.publish(Int64(data=1))
    spin_until(executor, lambda: "sub" in late)
    spin_until(executor, lambda: pub.get_subscription_count() >= 3)
    pub.publish(Int64(data=2))
    spin_until(executor, lambda: seen_async == ["after gate"] and seen_late == [2])

    guard.trigger()
    spin_until(executor, lambda: guard_calls == [1])

    node.destroy_subscription(late["sub"])  # a destroyed entity is dropped from the wait set
    pub.publish(Int64(data=3))
    for _ in range(5):
        executor.spin_once(timeout_sec=0.05)
    assert seen_late == [2]

    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    guard.trigger()  # handled by the spinner: spin() is running when shutdown() comes
    deadline = time.monotonic() + 20
    while guard_calls != [1, 1] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert guard_calls == [1, 1], "spin() in a thread did not run the guard condition"
    executor.shutdown()
    spinner.join(timeout=5.0)
    assert not spinner.is_alive(), "spin() did not end on shutdown()"


def test_environment_chooses_the_executor(monkeypatch, context, capfd):
    from rclpy.executors import SingleThreadedExecutor

    from airplay.nodes.executor import ExecutorChoiceError

    monkeypatch.delenv("AIRPLAY_EXECUTOR", raising=False)
    assert isinstance(executor_from_environment(context), LeanExecutor)  # auto, on the rclpy it was written for
    monkeypatch.setenv("AIRPLAY_EXECUTOR", "rclpy")
    assert isinstance(executor_from_environment(context), SingleThreadedExecutor)
    monkeypatch.setenv("AIRPLAY_EXECUTOR", "lean")
    assert isinstance(executor_from_environment(context), LeanExecutor)
    monkeypatch.setenv("AIRPLAY_EXECUTOR", "fast")
    with pytest.raises(ExecutorChoiceError, match="AIRPLAY_EXECUTOR"):
        executor_from_environment(context)

    # Another rclpy release: auto falls back to rclpy's executor and says why; lean still forces it.
    monkeypatch.setattr(rclpy_private, "rclpy_version", lambda: "99.0.0")
    monkeypatch.setenv("AIRPLAY_EXECUTOR", "auto")
    capfd.readouterr()
    chosen = executor_from_environment(context)
    assert type(chosen) is SingleThreadedExecutor
    assert "rclpy 99.0.0" in capfd.readouterr().err
    monkeypatch.setenv("AIRPLAY_EXECUTOR", "lean")
    assert isinstance(executor_from_environment(context), LeanExecutor)


def test_the_private_rclpy_api_is_the_one_it_was_written_against(context):
    """Fails, naming each, when an rclpy upgrade removes or changes a private name the lean
    executor uses; update airplay/nodes/rclpy_private.py (and WRITTEN_AGAINST) after checking them."""
    assert rclpy_private.version_problem() is None, rclpy_private.version_problem()
    executor = LeanExecutor(context=context)
    assert rclpy_private.api_problems(executor) == []
    assert rclpy_private.version_problem("7.1.9") is None
    assert "8.0.0" in rclpy_private.version_problem("8.0.0")
    assert rclpy_private.version_problem("7.10.0") is not None


def test_the_private_api_check_names_what_is_missing(monkeypatch, context):
    from rclpy.impl.implementation_singleton import rclpy_implementation
    from rclpy.task import Future

    executor = LeanExecutor(context=context)
    monkeypatch.delattr(Future, "_set_executor")
    monkeypatch.setattr(rclpy_implementation, "WaitSet", type("WaitSet", (), {"wait": None}))
    monkeypatch.setattr(executor, "_tasks", None)
    problems = rclpy_private.api_problems(executor)
    assert "rclpy.task.Future._set_executor is missing" in problems
    assert "rclpy_implementation.WaitSet.get_ready_entities is missing" in problems
    assert "rclpy_implementation.WaitSet.wait is missing" not in problems
    assert any(p.startswith("Executor._tasks is not a list") for p in problems)


def _graph_episodes(scene_dir, out, executor: str, log_dir) -> str:
    """episodes.jsonl of a lockstep sim_eval graph whose four nodes spin ``executor``."""
    from conftest import stop_process_trees

    from airplay.graph import SIM_EVAL_ARGUMENTS, parse_launch_arguments, sim_eval_graph
    from airplay.launcher import graph_environment, node_command

    env = {**graph_environment(), "AIRPLAY_EXECUTOR": executor}
    arguments = [f"scenes:={scene_dir}", f"episodes:={GRAPH_EPISODES}", "seed:=0", "policy:=expert",
                 "setting:=pointgoal", "lockstep:=true", f"out:={out}", "render_images:=false"]
    procs = {}
    try:
        for spec in sim_eval_graph(parse_launch_arguments(arguments, SIM_EVAL_ARGUMENTS)):
            log = open(log_dir / f"{executor}-{spec.name}.log", "w")
            procs[spec.name] = subprocess.Popen(node_command(spec), stdout=log, stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)
        try:
            code = procs["evaluator"].wait(timeout=240)  # a hang guard, not a speed check
        except subprocess.TimeoutExpired:
            code = None
        logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(log_dir.glob(f"{executor}-*.log")))
        assert code == 0, f"the graph under AIRPLAY_EXECUTOR={executor} ended with {code}\n{logs}"
    finally:
        stop_process_trees(list(procs.values()), set())
    return (out / "episodes.jsonl").read_text()


GRAPH_EPISODES = 3


@pytest.mark.slow
@pytest.mark.slow
def test_the_lockstep_graph_gives_the_same_episodes_under_both_executors(indoor_1, tmp_path):
    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    scene_dir = indoor_1
    lean = _graph_episodes(scene_dir, tmp_path / "lean", "lean", tmp_path)
    plain = _graph_episodes(scene_dir, tmp_path / "rclpy", "rclpy", tmp_path)
    evaluate_inprocess(EvalConfig(scenes=[scene_dir], episodes=GRAPH_EPISODES, render_images=False),
                       tmp_path / "inproc", progress=False)
    assert len([json.loads(line) for line in lean.splitlines()]) == GRAPH_EPISODES
    assert lean == plain == (tmp_path / "inproc" / "episodes.jsonl").read_text()


def test_a_node_with_an_unknown_executor_exits_2_naming_it(tmp_path):
    env = {**os.environ, "AIRPLAY_EXECUTOR": "bogus"}
    proc = subprocess.run([sys.executable, "-m", "airplay.nodes.sim_node", "--ros-args", "-p",
                           f"scenes:={tmp_path}"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "AIRPLAY_EXECUTOR" in proc.stderr and "bogus" in proc.stderr


def test_own_services_are_waited_on_at_every_wake_up_rclpys_at_10_hz(context):
    from rcl_interfaces.srv import ListParameters

    from airplay.nodes.executor import _Entities

    node = Node("services", context=context)
    node.create_service(ListParameters, "estop", lambda request, response: response)
    executor = LeanExecutor(context=context)
    executor.add_node(node)
    e = _Entities(executor, executor.get_nodes())
    assert [s.srv_name.lstrip("/") for s in e.services] == ["estop"]
    assert sorted(s.srv_name.rsplit("/", 1)[-1] for s in e.builtin_services) == sorted(
        ("describe_parameters", "get_parameters", "get_parameter_types", "list_parameters", "set_parameters",
         "set_parameters_atomically", "get_type_description"))


class _Records(logging.Handler):
    """Keeps the records of the logger it is added to (whatever the suite did to its propagation)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_the_background_nodes_spin_thread_logs_what_stops_it(monkeypatch):
    """airplay.nodes.background: an error that ends the spin thread is logged with its traceback
    (the node hears nothing after it); close()'s own shutdown under spin_once only at debug level.
    The records are taken on the module's logger itself: earlier tests of the suite may have set
    the ``airplay`` loggers not to propagate to the root, where pytest's caplog listens."""
    from airplay.nodes.background import BackgroundNode

    logger = logging.getLogger("airplay.nodes.background")
    records, level = _Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        bg = BackgroundNode("spin_error")

        def fail(timeout_sec=None):
            raise RuntimeError("a callback raised")

        monkeypatch.setattr(bg.executor, "spin_once", fail)
        bg.start()
        bg.thread.join(timeout=5)
        assert not bg.thread.is_alive()
        bg.close()
        errors = [r for r in records.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "spin_error" in errors[0].getMessage()
        assert errors[0].exc_info is not None and "a callback raised" in str(errors[0].exc_info[1])

        records.records.clear()
        bg = BackgroundNode("spin_shutdown")

        def shut_down(timeout_sec=None):
            bg.context.try_shutdown()
            raise RuntimeError("context is not valid")

        monkeypatch.setattr(bg.executor, "spin_once", shut_down)
        bg.start()
        bg.thread.join(timeout=5)
        bg.close()
        assert [r.levelno for r in records.records] == [logging.DEBUG]
        message = records.records[0].getMessage()
        assert "spin_shutdown" in message and "context is not valid" in message
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)


def test_rclpy_private_names_rclpys_rcl_error():
    """The nodes catch rclpy's C-extension exception through airplay.nodes.rclpy_private only."""
    from rclpy.impl.implementation_singleton import rclpy_implementation

    assert rclpy_private.RCLError is rclpy_implementation.RCLError and issubclass(rclpy_private.RCLError, RuntimeError)
