"""airplay.nodes.executor.LeanExecutor runs what rclpy's SingleThreadedExecutor runs.

Over real DDS on loopback: messages between two processes (in order, none lost), a timer,
a parameter service of the other process called through a client and a future, coroutine
callbacks, guard conditions, entities made and destroyed while spinning, shutdown from
another thread; and a node started with an unknown AIRPLAY_EXECUTOR exits 2 naming it.
"""

from __future__ import annotations

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
    time.sleep(0.2)
    executor.shutdown()
    spinner.join(timeout=5.0)
    assert not spinner.is_alive(), "spin() did not end on shutdown()"


def test_environment_chooses_the_executor(monkeypatch, context):
    from rclpy.executors import SingleThreadedExecutor

    from airplay.nodes.executor import ExecutorChoiceError

    monkeypatch.delenv("AIRPLAY_EXECUTOR", raising=False)
    assert isinstance(executor_from_environment(context), LeanExecutor)
    monkeypatch.setenv("AIRPLAY_EXECUTOR", "rclpy")
    assert isinstance(executor_from_environment(context), SingleThreadedExecutor)
    monkeypatch.setenv("AIRPLAY_EXECUTOR", "fast")
    with pytest.raises(ExecutorChoiceError, match="AIRPLAY_EXECUTOR"):
        executor_from_environment(context)


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
