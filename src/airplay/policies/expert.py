"""The experts behind the policy contract, both privileged (they read the task):

- :class:`ExpertNavigator` (``expert``) flies the A* expert pilot
  (:class:`airplay.tasks.expert.ExpertPilot`), which plans at reset;
- :class:`FieldExpertNavigator` (``field_expert``) flies the state-only field expert
  (:class:`airplay.tasks.field_expert.FieldExpert`, a DAgger labeller), which builds the goal's
  cost-to-go field at reset.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from airplay.policies.base import Policy, PolicyConfig
from airplay.tasks.expert import ExpertPilot
from airplay.tasks.field_expert import FieldExpert


@dataclasses.dataclass
class ExpertConfig(PolicyConfig):
    """The expert predicts one command per observation, executed directly (hold, H = 1)."""

    type: ClassVar[str] = "expert"
    chunk_size: int = 1
    execution_horizon: int = 1
    adapter: str = "hold"


class ExpertNavigator(Policy):
    """Plans on the world's grid at ``reset`` and tracks the plan from the observed state."""

    name = "expert"
    privileged = True

    def __init__(self, world, config: ExpertConfig | None = None) -> None:
        super().__init__(config or ExpertConfig())
        self.world = world
        self.expert = self.make_expert(world)

    def make_expert(self, world):
        """The pilot behind the contract: ``reset(task)``, ``act_on_state(state) -> (1, 4)``."""
        return ExpertPilot(world.grid, world.sdf, world.vehicle)

    def warm_up(self) -> None:
        """What the first flight would otherwise compute: the planner's wall-penalty grid."""
        self.expert.penalty()

    def reset(self, task=None) -> None:
        if task is None:
            raise ValueError(f"the {self.name} policy is privileged: reset(task) needs the task")
        super().reset(task)
        self.expert.reset(task)

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        """(1, 4) float32 heading-frame command from ``obs["state"]`` (see AirPlayEnv): the
        expert's command for the state's position and the yaw of its quaternion
        (:func:`airplay.frames.yaw_from_quat`), in one compiled call."""
        return self.expert.act_on_state(obs["state"])


class FieldExpertNavigator(ExpertNavigator):
    """Flies the goal's cost-to-go field; the command is a function of the state's position and
    quaternion and the task's goal only (``.expert``: the :class:`FieldExpert`). One command
    per observation, executed directly (hold, H = 1), as the A* expert's."""

    name = "field_expert"

    def make_expert(self, world):
        return FieldExpert(world.grid, world.sdf, world.vehicle)

    def warm_up(self) -> None:
        """Nothing to precompute: a field is built per goal at ``reset``."""
