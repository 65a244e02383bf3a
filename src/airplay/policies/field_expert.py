"""The field expert behind the policy contract: a state-only labeller (DAgger). Privileged: it
reads the task's goal to build its cost-to-go field (:mod:`airplay.tasks.field_expert`)."""

from __future__ import annotations

from airplay.policies.expert import ExpertNavigator
from airplay.tasks.field_expert import FieldExpert


class FieldExpertNavigator(ExpertNavigator):
    """Flies the goal's cost-to-go field; the command is a function of the state's position and
    quaternion and the task's goal only (``.expert``: the :class:`FieldExpert`). One command
    per observation, executed directly (hold, H = 1), as the A* expert's."""

    name = "field_expert"

    def make_expert(self, world):
        return FieldExpert(world.grid, world.sdf, world.vehicle)

    def warm_up(self) -> None:
        """Nothing to precompute: a field is built per goal at ``reset``."""
