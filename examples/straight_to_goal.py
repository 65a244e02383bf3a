"""A PointGoal baseline that flies straight at the goal and sees nothing else: a user policy for
``airplay eval --policy straight_to_goal:make`` (with this folder on ``PYTHONPATH``).

Every control period it commands ``speed`` m/s horizontally along the goal's direction in the
heading frame (slowing inside 1 m of it), the goal's height difference as climb rate (clipped to
``climb`` m/s) and a yaw rate that turns to face the goal (clipped to ``yaw_rate`` rad/s). It reads
only the ``goal`` observation, so no image is rendered for it (``--no-images``).

It measures how much of a scene's PointGoal tasks needs going around obstacles: on the PPO
example's held-out tasks (docs/gym.md) it reaches none.

    PYTHONPATH=examples airplay eval --policy straight_to_goal:make --scenes scenes/indoor_0 \\
        --episodes 20 --seed 10000 --no-images
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from airplay.policies.base import Policy, PolicyConfig, check


@dataclasses.dataclass
class StraightToGoalConfig(PolicyConfig):
    """speed: horizontal speed (m/s); climb: climb-rate limit (m/s); yaw_rate: yaw-rate limit (rad/s)."""

    type: ClassVar[str] = "straight_to_goal"
    chunk_size: int = 1
    execution_horizon: int = 1
    adapter: str = "hold"
    speed: float = 2.0
    climb: float = 1.0
    yaw_rate: float = 1.0

    def validate(self) -> None:
        super().validate()
        for name in ("speed", "climb", "yaw_rate"):
            value = getattr(self, name)
            check(isinstance(value, (int, float)) and value > 0, name, f"must be a number > 0, got {value!r}")


class StraightToGoal(Policy):
    """Straight at the goal, facing it (see the module docstring)."""

    name = "straight_to_goal"

    def __init__(self, config: StraightToGoalConfig | None = None) -> None:
        super().__init__(config or StraightToGoalConfig())

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        """(1, 4) float32 ``[vx, vy, vz, yaw_rate]`` from ``obs["goal"]`` (m, heading frame)."""
        if "goal" not in obs:
            raise ValueError("straight_to_goal reads the observation's 'goal' (PointGoal tasks only)")
        c = self.config
        goal = np.asarray(obs["goal"], np.float64).reshape(3)
        distance = float(np.hypot(goal[0], goal[1]))
        v = np.zeros(2) if distance < 1e-9 else goal[:2] / distance * c.speed * min(1.0, distance)
        vz = float(np.clip(goal[2], -c.climb, c.climb))
        yaw = float(np.clip(np.arctan2(goal[1], goal[0]), -c.yaw_rate, c.yaw_rate)) if distance > 1e-9 else 0.0
        return np.array([[v[0], v[1], vz, yaw]], np.float32)


def make(world) -> StraightToGoal:
    """The factory ``airplay eval --policy straight_to_goal:make`` calls (the scene's world unused)."""
    return StraightToGoal()
