"""The A* expert behind the policy contract. Privileged: it reads the task to plan."""

from __future__ import annotations

import math

import numpy as np

from airplay.tasks.expert import ExpertPolicy


def yaw_from_quat_xyzw(q: np.ndarray) -> float:
    """Heading (rad, CCW from east) of a base_link-in-map quaternion (x, y, z, w)."""
    x, y, z, w = (float(v) for v in q)
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


class ExpertNavigator:
    """Plans on the world's grid at ``reset`` and tracks the plan from the observed state."""

    name = "expert"

    def __init__(self, world) -> None:
        self.world = world
        self.expert = ExpertPolicy(world.grid, world.sdf, world.vehicle)

    def reset(self, task=None) -> None:
        if task is None:
            raise ValueError("the expert is privileged: reset(task) needs the task to plan")
        self.expert.reset(task)

    def select_action(self, obs: dict) -> np.ndarray:
        """(4,) float32 heading-frame command from ``obs["state"]`` (see AirPlayEnv)."""
        state = obs["state"]
        return np.asarray(self.expert.act(state[0:3], state[7:10], yaw_from_quat_xyzw(state[3:7])), np.float32)
