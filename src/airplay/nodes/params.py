"""A node's ROS parameters from its schema (:mod:`airplay.node_params`): declarations and checks.

:func:`declare_schema` declares every parameter of a :class:`~airplay.node_params.NodeSchema`
with a ParameterDescriptor that carries its description, type, range (FloatingPointRange /
IntegerRange; choices in ``additional_constraints``) and ``read_only`` (all but the schema's
``dynamic`` ones), checks the start-up values with the schema, and registers an on-set
callback that runs the same check on every later set (``ros2 param set``, the SetParameters
service): a refused value gets a reason naming the parameter (except a wrong type for a
dynamic parameter, which rclpy refuses first with its own reason: "Wrong parameter type").
A dynamic parameter's accepted value goes to the node's setter for it.

A float parameter given as an integer (``-p command_timeout_s:=10``, ``ros2 param set ... 10``)
is taken as that float.
"""

from __future__ import annotations

import math
from typing import Callable

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.parameter import Parameter

from airplay.node_params import NodeSchema, Param, ParamError
from airplay.nodes.common import ParameterError

INT64_MAX = 2 ** 63 - 1


def descriptor(param: Param) -> ParameterDescriptor:
    """The ParameterDescriptor of ``param``: type, description, range, read-only."""
    d = ParameterDescriptor(name=param.name, type=Parameter.Type.from_parameter_value(param.default).value,
                            description=param.description(), read_only=not param.dynamic)
    low = param.above if param.min is None else param.min
    if param.type is float and (low is not None or param.max is not None):
        d.floating_point_range = [FloatingPointRange(from_value=-math.inf if low is None else float(low),
                                                     to_value=math.inf if param.max is None else float(param.max),
                                                     step=0.0)]
    elif param.type is int and (low is not None or param.max is not None):
        d.integer_range = [IntegerRange(from_value=-INT64_MAX - 1 if low is None else int(math.ceil(low)),
                                        to_value=INT64_MAX if param.max is None else int(param.max), step=0)]
    if param.choices or param.above is not None or param.finite or param.nonempty:
        d.additional_constraints = param.range_text() + (", not empty" if param.nonempty else "")
    return d


def declare_schema(node, schema: NodeSchema, setters: dict[str, Callable] | None = None) -> dict:
    """Declare ``schema``'s parameters on ``node`` and return their checked values {name: value}.

    ``setters``: name -> function taking the new value, one for each dynamic parameter (the node
    applies the change). A wrong start-up value is a ParameterError naming the parameter.
    """
    setters = dict(setters or {})
    dynamic = {p.name for p in schema if p.dynamic}
    if set(setters) != dynamic:
        raise ValueError(f"node {schema.node}: setters {sorted(setters)} must be for the dynamic parameters "
                         f"{sorted(dynamic)}")
    values = {}
    for param in schema:
        # declared untyped first: the schema's check gives the error (naming the parameter) and
        # takes an integer for a float; the full descriptor then fixes type, range and read-only
        value = node.declare_parameter(param.name, param.default,
                                       ParameterDescriptor(description=param.description(), dynamic_typing=True)).value
        try:
            values[param.name] = param.check(value, parse=True)
        except ParamError as exc:
            raise ParameterError(str(exc)) from None
        alternative = Parameter(param.name, value=values[param.name]).get_parameter_value()
        node.set_descriptor(param.name, descriptor(param), alternative_value=alternative)
    try:
        schema.check(values)  # the checks across parameters
    except ParamError as exc:
        raise ParameterError(str(exc)) from None

    def on_set(parameters) -> SetParametersResult:
        for parameter in parameters:
            if parameter.name not in schema:
                continue
            param = schema[parameter.name]
            if not param.dynamic:
                return SetParametersResult(successful=False,
                                           reason=f"parameter '{param.name}' is read-only (set it when the node "
                                                  "starts)")
            try:
                param.check(parameter.value)
            except ParamError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def floats_from_ints(parameters) -> list:
        """An integer for a float parameter (``ros2 param set /sim republish_s 1``) as that float."""
        return [Parameter(p.name, value=float(p.value)) if p.name in schema and schema[p.name].type is float
                and p.type_ == Parameter.Type.INTEGER else p for p in parameters]

    def after_set(parameters) -> None:
        for parameter in parameters:
            if parameter.name in setters:
                setters[parameter.name](schema[parameter.name].typed(parameter.value))

    node.add_pre_set_parameters_callback(floats_from_ints)
    node.add_on_set_parameters_callback(on_set)
    node.add_post_set_parameters_callback(after_set)
    return values
