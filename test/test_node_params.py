"""Node parameter schemas: the checks (no rclpy), and the declarations on a real rclpy node,
set through the SetParameters service as ``ros2 param set`` does."""

from __future__ import annotations

import math

import pytest

from airplay.bridge.parameters import BRIDGE_SCHEMA, BridgeParameterError, flight_settings
from airplay.node_params import NodeSchema, Param, ParamError
from airplay.node_schemas import SCHEMAS, SETTINGS, SIM


def test_check_types_ranges_and_choices_name_the_parameter():
    episodes = SIM["episodes"]
    assert episodes.check(3) == 3 and episodes.check("3", parse=True) == 3
    with pytest.raises(ParamError, match=r"parameter 'episodes' must be an integer >= 1, got 0"):
        episodes.check(0)
    with pytest.raises(ParamError, match=r"parameter 'episodes' must be an integer, got 'ten'"):
        episodes.check("ten", parse=True)
    with pytest.raises(ParamError, match=r"parameter 'episodes' must be an integer, got 2.5"):
        episodes.check(2.5)
    assert SIM["clock_rate_hz"].check(10) == 10.0 and isinstance(SIM["clock_rate_hz"].check(10), float)
    with pytest.raises(ParamError, match=r"parameter 'republish_s' must be a number > 0, got 0.0"):
        SIM["republish_s"].check(0.0)
    with pytest.raises(ParamError, match=r"parameter 'republish_s' must be a finite number"):
        SIM["republish_s"].check(math.inf)
    with pytest.raises(ParamError, match=r"parameter 'setting' must be one of pointgoal, imagegoal"):
        SIM["setting"].check("flying")
    with pytest.raises(ParamError, match=r"parameter 'lockstep' must be true or false, got 'maybe'"):
        SIM["lockstep"].check("maybe", parse=True)
    with pytest.raises(ParamError, match=r"parameter 'scenes' must be a non-empty string"):
        SIM["scenes"].check("  ")
    with pytest.raises(ParamError, match=r"unknown parameter\(s\) of node sim: episode"):
        SIM.check({"episode": 3})


def test_a_schema_refuses_a_parameter_listed_twice():
    with pytest.raises(ValueError, match="listed twice"):
        NodeSchema("x", (Param("a", 1, "one"), Param("a", 2, "two")))


def test_every_parameter_is_described_with_its_default_in_range():
    for schema in (*SCHEMAS.values(), BRIDGE_SCHEMA):
        for param in schema:
            assert param.doc.strip(), f"{schema.node}.{param.name} has no description"
            assert param.check(param.default) == param.default or math.isnan(param.default)


def test_the_settings_are_the_samplers_and_vln():
    from airplay.tasks.sampler import SETTINGS as SAMPLER_SETTINGS

    assert SETTINGS == (*SAMPLER_SETTINGS, "vln")


def test_bridge_settings_are_checked_by_the_schema():
    with pytest.raises(BridgeParameterError, match=r"parameter 'control_rate_hz' must be a number > 2, got 2.0"):
        flight_settings({"control_rate_hz": 2.0})
    with pytest.raises(BridgeParameterError, match=r"parameter 'system_id' must be an integer 1..255, got 0"):
        flight_settings({"system_id": 0})
    with pytest.raises(BridgeParameterError, match=r"parameter 'origin_x' must be a finite number"):
        flight_settings({"origin_x": "nan"})
    assert flight_settings({"command_timeout_s": "0.3"}).flight.supervisor.command_timeout_s == 0.3


# -- on a real node ------------------------------------------------------------------------------
@pytest.fixture
def ros_nodes(own_ros_domain):
    """(the node under test's factory, a client node, an executor spinning both)."""
    rclpy = pytest.importorskip("rclpy", reason="ROS 2 (rclpy) is not installed")
    from rclpy.executors import SingleThreadedExecutor

    context = rclpy.Context()
    rclpy.init(context=context)
    executor = SingleThreadedExecutor(context=context)
    made = []

    def make(name: str, overrides: dict | None = None):
        from rclpy.parameter import Parameter

        node = rclpy.create_node(name, context=context, namespace="/node_params_test",
                                 parameter_overrides=[Parameter(k, value=v) for k, v in (overrides or {}).items()])
        made.append(node)
        executor.add_node(node)
        return node

    client = make("client")
    yield make, client, executor
    for node in made:
        node.destroy_node()
    executor.shutdown()
    rclpy.shutdown(context=context)


def _set(client, executor, node_name: str, name: str, value):
    """SetParameters on ``node_name`` (what ``ros2 param set`` calls): (successful, reason)."""
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    service = client.create_client(SetParameters, f"/node_params_test/{node_name}/set_parameters")
    assert service.wait_for_service(timeout_sec=10.0)
    future = service.call_async(SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()]))
    executor.spin_until_future_complete(future, timeout_sec=10.0)
    assert future.done(), "no answer from the set_parameters service"
    result = future.result().results[0]
    client.destroy_client(service)
    return result.successful, result.reason


@pytest.mark.ros
def test_runtime_sets_are_checked_by_the_schema(ros_nodes):
    from airplay.nodes.params import declare_schema

    make, client, executor = ros_nodes
    node = make("sim", {"episodes": 3, "clock_rate_hz": 20})  # an int for a float: taken as 20.0
    applied = []
    values = declare_schema(node, SIM, {"republish_s": applied.append})
    assert values["episodes"] == 3 and values["clock_rate_hz"] == 20.0
    assert node.get_parameter("clock_rate_hz").value == 20.0

    described = node.describe_parameter("clock_rate_hz")
    assert described.read_only and described.description == SIM["clock_rate_hz"].doc
    assert described.floating_point_range[0].from_value == 0.0
    assert node.describe_parameter("episodes").integer_range[0].from_value == 1
    assert not node.describe_parameter("republish_s").read_only

    ok, reason = _set(client, executor, "sim", "republish_s", 0.25)  # dynamic, valid: accepted and applied
    assert ok, reason
    assert applied == [0.25] and node.get_parameter("republish_s").value == 0.25
    ok, reason = _set(client, executor, "sim", "republish_s", 0.0)  # out of range
    assert not ok and "republish_s" in reason
    ok, reason = _set(client, executor, "sim", "republish_s", -1.0)
    assert not ok and "republish_s" in reason
    ok, reason = _set(client, executor, "sim", "republish_s", "fast")  # wrong type (rclpy's own reason)
    assert not ok and "type" in reason
    ok, reason = _set(client, executor, "sim", "republish_s", 1)  # an int for a float: taken as 1.0
    assert ok, reason
    ok, reason = _set(client, executor, "sim", "clock_rate_hz", "fast")  # wrong type, read-only
    assert not ok and "clock_rate_hz" in reason
    ok, reason = _set(client, executor, "sim", "episodes", 5)  # read-only
    assert not ok and "episodes" in reason and "read-only" in reason
    assert applied == [0.25, 1.0] and node.get_parameter("republish_s").value == 1.0
    assert node.get_parameter("episodes").value == 3


@pytest.mark.ros
def test_a_wrong_start_up_value_names_the_parameter(ros_nodes):
    from airplay.nodes.common import ParameterError
    from airplay.nodes.params import declare_schema

    make, _, _ = ros_nodes
    with pytest.raises(ParameterError, match=r"parameter 'episodes' must be an integer >= 1, got 0"):
        declare_schema(make("sim", {"episodes": 0}), SIM, {"republish_s": print})
    with pytest.raises(ParameterError, match=r"parameter 'clock_rate_hz' must be a number, got 'fast'"):
        declare_schema(make("sim2", {"clock_rate_hz": "fast"}), SIM, {"republish_s": print})
    with pytest.raises(ValueError, match="setters"):
        declare_schema(make("sim3"), SIM)


@pytest.mark.ros
def test_bridge_parameters_are_typed_and_read_only(ros_nodes):
    from airplay.nodes.params import declare_schema

    make, client, executor = ros_nodes
    node = make("mavlink_bridge", {"command_timeout_s": 1})
    values = declare_schema(node, BRIDGE_SCHEMA)
    assert values["command_timeout_s"] == 1.0
    described = node.describe_parameter("system_id")
    assert described.read_only and not described.dynamic_typing
    assert (described.integer_range[0].from_value, described.integer_range[0].to_value) == (1, 255)
    ok, reason = _set(client, executor, "mavlink_bridge", "command_timeout_s", 0.2)
    assert not ok and "command_timeout_s" in reason and "read-only" in reason
