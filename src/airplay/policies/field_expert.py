"""The field expert behind the policy contract: a state-only labeller (DAgger). Privileged: it
reads the task's goal to build its cost-to-go field (:mod:`airplay.tasks.field_expert`)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from airplay.policies.base import Policy, PolicyConfig
from airplay.tasks.field_expert import FieldExpert


@dataclasses.dataclass
class FieldExpertConfig(PolicyConfig):
    """One command per observation, executed directly (hold, H = 1)."""

    type: ClassVar[str] = "field_expert"
    chunk_size: int = 1
    execution_horizon: int = 1
    adapter: str = "hold"


class FieldExpertNavigator(Policy):
    """Flies the goal's cost-to-go field; the command is a function of the state's position and
    quaternion and the task's goal only (``.expert``: the :class:`FieldExpert`)."""

    name = "field_expert"
    privileged = True

    def __init__(self, world, config: FieldExpertConfig | None = None) -> None:
        super().__init__(config or FieldExpertConfig())
        self.world = world
        self.expert = FieldExpert(world.grid, world.sdf, world.vehicle)

    def reset(self, task=None) -> None:
        if task is None:
            raise ValueError("the field expert is privileged: reset(task) needs the task's goal")
        super().reset(task)
        self.expert.reset(task)

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        """(1, 4) float32 heading-frame command from ``obs["state"]`` (see AirPlayEnv)."""
        return self.expert.act_on_state(obs["state"])
