"""Typed parameter schemas: each node's parameters described once.

A :class:`Param` says a parameter's name, type (that of its default), default, unit, range
(``min``/``max`` inclusive, ``above`` exclusive, or ``choices``), one-line description, and
whether the node takes a change at run time (``dynamic``; otherwise read-only). A
:class:`NodeSchema` is a node's ordered table of them. From a schema come the node's ROS
parameter declarations (descriptors with type, range, read-only and an on-set check:
``airplay.nodes.params``), the graphs' launch arguments and their descriptions
(:mod:`airplay.graph`), and the checks of both: :meth:`Param.check` is the one check of a
value, and every error is a :class:`ParamError` naming the parameter. No rclpy here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator

Value = bool | int | float | str
"""A parameter value: bool, int, float or str (ROS 2's scalar parameter types)."""


class ParamError(ValueError):
    """A parameter value that the node cannot use; the message names the parameter."""


@dataclass(frozen=True)
class Param:
    """One parameter.

    name: ROS parameter (and launch argument) name. default: its value when unset; its type is
    the parameter's type (an int is accepted for a float). doc: one line, with the unit. unit:
    e.g. ``s``, ``m``, ``Hz`` ("" for none). min, max: inclusive bounds of a number; above: an
    exclusive lower bound. choices: the accepted values of a string. finite: a float must be
    finite (nan and inf refused). nonempty: a string must not be blank. dynamic: the node
    applies a change at run time (``ros2 param set``); otherwise the parameter is read-only.
    """

    name: str
    default: Value
    doc: str
    unit: str = ""
    min: float | None = None
    max: float | None = None
    above: float | None = None
    choices: tuple[str, ...] = ()
    finite: bool = False
    nonempty: bool = False
    dynamic: bool = False

    @property
    def type(self) -> type:
        """bool, int, float or str: the type of the default."""
        return type(self.default)

    def type_name(self) -> str:
        return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[self.type]

    def coerce(self, value) -> Value:
        """``value`` as this parameter's type: strings (launch arguments: ``true``, ``3``, ``0.5``)
        are parsed for the other types, ints accepted for floats; ParamError otherwise."""
        kind = self.type
        if isinstance(value, str) and kind is not str:
            text = value.strip().lower()
            if kind is bool:
                if text not in ("true", "false", "1", "0"):
                    raise ParamError(f"parameter '{self.name}' must be true or false, got {value!r}")
                return text in ("true", "1")
            try:
                return kind(text)
            except ValueError:
                raise ParamError(f"parameter '{self.name}' must be {self.type_name()}, got {value!r}") from None
        return self.typed(value)

    def typed(self, value) -> Value:
        """``value`` if it has this parameter's type (an int for a float is taken as a float;
        anything for a str as its text); ParamError otherwise. No parsing of strings."""
        kind = self.type
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if kind is str and not isinstance(value, str):
            return str(value)
        if type(value) is not kind:
            raise ParamError(f"parameter '{self.name}' must be {self.type_name()}, got {value!r}")
        return value

    def check(self, value, parse: bool = False) -> Value:
        """``value`` typed (``parse``: strings parsed, as from a launch argument) and within the
        range or choices; ParamError naming the parameter otherwise."""
        value = self.coerce(value) if parse else self.typed(value)
        if self.choices and value not in self.choices:
            raise ParamError(f"parameter '{self.name}' must be one of {', '.join(self.choices)}, got {value!r}")
        if self.nonempty and not value.strip():
            raise ParamError(f"parameter '{self.name}' must be a non-empty string, got {value!r}")
        if self.type in (int, float):
            if self.finite and not math.isfinite(value):
                raise ParamError(f"parameter '{self.name}' must be a finite number, got {value!r}")
            low = self.min is not None and not value >= self.min
            high = self.max is not None and not value <= self.max
            above = self.above is not None and not value > self.above
            if low or high or above:
                raise ParamError(f"parameter '{self.name}' must be {self.range_text()}, got {value!r}")
        return value

    def range_text(self) -> str:
        """The accepted values in words, e.g. ``a number >= 0``, ``an integer 1..255``."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        parts = []
        if self.min is not None and self.max is not None:
            parts.append(f"{_num(self.min)}..{_num(self.max)}")
        elif self.min is not None:
            parts.append(f">= {_num(self.min)}")
        elif self.max is not None:
            parts.append(f"<= {_num(self.max)}")
        if self.above is not None:
            parts.append(f"> {_num(self.above)}")
        return " ".join([self.type_name()] + [" and ".join(parts)] if parts else [self.type_name()])

    def description(self) -> str:
        """The one-line description that the descriptor, ``--show-args`` and ``--help`` print."""
        return self.doc

    def launch_default(self) -> str:
        """The default as a launch argument's text (``true``/``false`` for bools)."""
        return launch_text(self.default)


def launch_text(value: Value) -> str:
    """A value as ``key:=value`` text (``true``/``false`` for bools)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class NodeSchema:
    """A node's parameters, in order. ``extra_check``: checks across parameters (``{name:
    value}`` of all of them; raises ParamError), e.g. the bridge's flight settings."""

    node: str
    params: tuple[Param, ...]
    extra_check: Callable[[dict], None] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"schema {self.node}: a parameter is listed twice")

    def __getitem__(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(f"node {self.node} has no parameter {name!r}")

    def __contains__(self, name: str) -> bool:
        return any(p.name == name for p in self.params)

    def __iter__(self) -> Iterator[Param]:
        return iter(self.params)

    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def defaults(self) -> dict[str, Value]:
        return {p.name: p.default for p in self.params}

    def check(self, values: dict, parse: bool = False) -> dict[str, Value]:
        """Every parameter's value checked (missing ones take their defaults; ``parse``: strings
        parsed as launch arguments); ParamError naming the first wrong or unknown one."""
        unknown = sorted(set(values) - set(self.names()))
        if unknown:
            raise ParamError(f"unknown parameter(s) of node {self.node}: {', '.join(unknown)}")
        checked = {p.name: p.check(values.get(p.name, p.default), parse=parse) for p in self.params}
        if self.extra_check is not None:
            self.extra_check(checked)
        return checked

    def with_params(self, node: str, *params: Param, drop: tuple[str, ...] = ()) -> "NodeSchema":
        """This schema's parameters (less ``drop``) and ``params`` after them, for node ``node``."""
        return NodeSchema(node, tuple(p for p in self.params if p.name not in drop) + params)
