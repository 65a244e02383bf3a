"""AirVLN-R1's discrete actions and their magnitudes in a given scene.

Actions (AirNav): ``MOVE_FORWARD`` (5 m), ``TURN_LEFT`` / ``TURN_RIGHT`` (30 deg, counter-
clockwise / clockwise seen from above), ``STOP``. airplay options (``extra_actions`` in
``config/vln.yaml``): ``ASCEND`` / ``DESCEND`` (vertical, map z) and ``MOVE_LEFT`` /
``MOVE_RIGHT`` (sideways in the heading frame).

Scaling rule (docs/vln.md): AirNav's magnitudes are city-scale;
every *linear* magnitude (forward, sideways, vertical) is multiplied by a per-scene scale
``s`` (default 0.2, so 5 m becomes 1 m in our ~40 m scenes); angles, the episode step
budget (160) and the actions per call (8) are unchanged. ``s`` comes from
``scale_by_scene[name]``, else ``scale_by_category[category]``, else ``scale``.

Every magnitude is a motion relative to the pose where the action starts: translations in
that pose's heading frame (x forward, y left, z up; metres), turns about map z (radians).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airplay.config import config_dir
from airplay.yaml_config import ConfigError, load_yaml

BASE_ACTIONS: tuple[str, ...] = ("MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT", "STOP")
EXTRA_ACTIONS: tuple[str, ...] = ("ASCEND", "DESCEND", "MOVE_LEFT", "MOVE_RIGHT")
ALL_ACTIONS: tuple[str, ...] = BASE_ACTIONS + EXTRA_ACTIONS

ALIASES: dict[str, str] = {
    "FORWARD": "MOVE_FORWARD", "GO_FORWARD": "MOVE_FORWARD", "MOVE_AHEAD": "MOVE_FORWARD",
    "LEFT": "MOVE_LEFT", "RIGHT": "MOVE_RIGHT", "UP": "ASCEND", "GO_UP": "ASCEND", "MOVE_UP": "ASCEND",
    "DOWN": "DESCEND", "GO_DOWN": "DESCEND", "MOVE_DOWN": "DESCEND", "ROTATE_LEFT": "TURN_LEFT",
    "ROTATE_RIGHT": "TURN_RIGHT", "STOP_": "STOP", "HALT": "STOP",
}
"""Other spellings the parser accepts (after upper-casing, spaces and hyphens -> ``_``)."""


@dataclass(frozen=True)
class ExecutorSettings:
    """How :mod:`airplay.vln.action_executor` flies one action (SI units; see config/vln.yaml)."""

    cruise_speed_m_s: float = 1.0
    accel_fraction: float = 0.8
    yaw_rate_fraction: float = 0.8
    position_gain_1_s: float = 2.0
    yaw_gain_1_s: float = 3.0
    settle_timeout_s: float = 1.0
    position_tolerance_m: float = 0.05
    yaw_tolerance_deg: float = 2.0
    hold_s: float = 1.0


@dataclass(frozen=True)
class ActionSpace:
    """The actions of one scene and their magnitudes.

    forward_m: MOVE_FORWARD (and MOVE_LEFT/MOVE_RIGHT) distance (m); turn_rad: TURN_* angle
    (rad); vertical_m: ASCEND/DESCEND distance (m); scale: the ``s`` used; names: the
    enabled actions in prompt order; max_steps: actions per episode; max_actions_per_step:
    actions per model call.
    """

    forward_m: float = 1.0
    turn_rad: float = math.radians(30.0)
    vertical_m: float = 0.4
    scale: float = 0.2
    names: tuple[str, ...] = BASE_ACTIONS
    max_steps: int = 160
    max_actions_per_step: int = 8

    def __post_init__(self) -> None:
        for name in ("forward_m", "turn_rad", "vertical_m", "scale"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"ActionSpace.{name} must be a positive number, got {v!r}")
        unknown = [n for n in self.names if n not in ALL_ACTIONS]
        if unknown or "STOP" not in self.names:
            raise ValueError(f"ActionSpace.names must be among {ALL_ACTIONS} and include STOP, got {self.names}")
        if self.max_steps < 1 or self.max_actions_per_step < 1:
            raise ValueError("ActionSpace.max_steps and max_actions_per_step must be >= 1")

    def delta(self, action: str) -> tuple[float, float, float, float]:
        """Motion of ``action`` relative to its start pose: (dx forward, dy left, dz up) in m
        in the start heading frame and dyaw (rad, CCW). STOP is all zeros."""
        d = {
            "MOVE_FORWARD": (self.forward_m, 0.0, 0.0, 0.0),
            "MOVE_LEFT": (0.0, self.forward_m, 0.0, 0.0),
            "MOVE_RIGHT": (0.0, -self.forward_m, 0.0, 0.0),
            "ASCEND": (0.0, 0.0, self.vertical_m, 0.0),
            "DESCEND": (0.0, 0.0, -self.vertical_m, 0.0),
            "TURN_LEFT": (0.0, 0.0, 0.0, self.turn_rad),
            "TURN_RIGHT": (0.0, 0.0, 0.0, -self.turn_rad),
            "STOP": (0.0, 0.0, 0.0, 0.0),
        }
        if action not in self.names:
            raise ValueError(f"action {action!r} is not enabled here; enabled: {', '.join(self.names)}")
        return d[action]

    def describe(self) -> list[str]:
        """One line per enabled action, for the prompt (magnitudes in m and degrees)."""
        turn = f"{math.degrees(self.turn_rad):g} degrees"
        text = {
            "MOVE_FORWARD": f"MOVE_FORWARD: fly {self.forward_m:g} m forward",
            "TURN_LEFT": f"TURN_LEFT: turn {turn} to the left",
            "TURN_RIGHT": f"TURN_RIGHT: turn {turn} to the right",
            "ASCEND": f"ASCEND: climb {self.vertical_m:g} m",
            "DESCEND": f"DESCEND: descend {self.vertical_m:g} m",
            "MOVE_LEFT": f"MOVE_LEFT: fly {self.forward_m:g} m to the left without turning",
            "MOVE_RIGHT": f"MOVE_RIGHT: fly {self.forward_m:g} m to the right without turning",
            "STOP": "STOP: you have arrived; end the flight",
        }
        return [text[n] for n in self.names]


@dataclass(frozen=True)
class VLNConfig:
    """``config/vln.yaml`` parsed (see that file for every field)."""

    forward_m: float = 5.0
    turn_deg: float = 30.0
    vertical_m: float = 2.0
    max_steps: int = 160
    max_actions_per_step: int = 8
    scale: float = 0.2
    scale_by_category: dict = field(default_factory=dict)
    scale_by_scene: dict = field(default_factory=dict)
    success_radius_m: float | None = None
    extra_actions: tuple[str, ...] = ()
    executor: ExecutorSettings = ExecutorSettings()
    source: str = "<defaults>"

    def scale_for(self, scene_name: str = "", category: str = "") -> float:
        """The scale ``s`` of a scene: by name, else by category, else the default."""
        if scene_name in self.scale_by_scene:
            return float(self.scale_by_scene[scene_name])
        if category in self.scale_by_category:
            return float(self.scale_by_category[category])
        return float(self.scale)

    def action_space(self, scene_name: str = "", category: str = "", scale: float | None = None) -> ActionSpace:
        """The :class:`ActionSpace` of a scene (``scale`` overrides the configured one)."""
        s = float(scale) if scale is not None else self.scale_for(scene_name, category)
        names = tuple(n for n in ALL_ACTIONS if n in BASE_ACTIONS or n in self.extra_actions)
        # prompt order: movement first, STOP last
        names = tuple(n for n in names if n != "STOP") + ("STOP",)
        return ActionSpace(forward_m=self.forward_m * s, turn_rad=math.radians(self.turn_deg),
                           vertical_m=self.vertical_m * s, scale=s, names=names, max_steps=self.max_steps,
                           max_actions_per_step=self.max_actions_per_step)


def _positive(path: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(path, f"must be a positive number, got {value!r}", name)
    return float(value)


def load_vln_config(path: str | Path | None = None) -> VLNConfig:
    """Read ``config/vln.yaml`` (or ``path``); every error names the file and the field."""
    p = Path(path) if path is not None else config_dir() / "vln.yaml"
    data = load_yaml(p, what="VLN configuration", empty_ok=True)
    known = {"reference", "scale", "scale_by_category", "scale_by_scene", "success_radius_m", "extra_actions",
             "executor"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(p, f"unknown field; known: {', '.join(sorted(known))}", unknown[0])
    ref = data.get("reference") or {}
    if not isinstance(ref, dict):
        raise ConfigError(p, "must be a mapping", "reference")
    ref_known = {"forward_m", "turn_deg", "vertical_m", "max_steps", "max_actions_per_step"}
    bad = sorted(set(ref) - ref_known)
    if bad:
        raise ConfigError(p, f"unknown field; known: {', '.join(sorted(ref_known))}", f"reference.{bad[0]}")
    kwargs: dict[str, Any] = {}
    for name in ("forward_m", "turn_deg", "vertical_m"):
        if name in ref:
            kwargs[name] = _positive(str(p), f"reference.{name}", ref[name])
    for name in ("max_steps", "max_actions_per_step"):
        if name in ref:
            v = ref[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(p, f"must be an integer >= 1, got {v!r}", f"reference.{name}")
            kwargs[name] = v
    if "scale" in data:
        kwargs["scale"] = _positive(str(p), "scale", data["scale"])
    for name in ("scale_by_category", "scale_by_scene"):
        table = data.get(name) or {}
        if not isinstance(table, dict):
            raise ConfigError(p, "must be a mapping of name: scale", name)
        kwargs[name] = {str(k): _positive(str(p), f"{name}.{k}", v) for k, v in table.items()}
    if data.get("success_radius_m") is not None:
        kwargs["success_radius_m"] = _positive(str(p), "success_radius_m", data["success_radius_m"])
    extra = data.get("extra_actions") or []
    if not isinstance(extra, list) or any(a not in EXTRA_ACTIONS for a in extra):
        raise ConfigError(p, f"must be a list of {', '.join(EXTRA_ACTIONS)}, got {extra!r}", "extra_actions")
    kwargs["extra_actions"] = tuple(extra)
    ex = data.get("executor") or {}
    if not isinstance(ex, dict):
        raise ConfigError(p, "must be a mapping", "executor")
    ex_known = set(ExecutorSettings.__dataclass_fields__)
    bad = sorted(set(ex) - ex_known)
    if bad:
        raise ConfigError(p, f"unknown field; known: {', '.join(sorted(ex_known))}", f"executor.{bad[0]}")
    kwargs["executor"] = ExecutorSettings(**{k: _positive(str(p), f"executor.{k}", v) for k, v in ex.items()})
    return VLNConfig(source=str(p), **kwargs)


def apply_action(pose, action: str, space: ActionSpace) -> tuple[float, float, float, float]:
    """The pose (x, y, z m in map; yaw rad) after ``action`` done exactly (AirNav's simulator
    model: what the executor flies, without its small tracking errors)."""
    x, y, z, yaw = (float(v) for v in pose)
    dx, dy, dz, dyaw = space.delta(action)
    c, s = math.cos(yaw), math.sin(yaw)
    return x + c * dx - s * dy, y + s * dx + c * dy, z + dz, yaw + dyaw


def rollout(actions, space: ActionSpace, pose=(0.0, 0.0, 0.0, 0.0)) -> tuple[float, float, float, float]:
    """The pose after ``actions`` in order from ``pose`` (:func:`apply_action`)."""
    for a in actions:
        pose = apply_action(pose, a, space)
    return pose
