"""Policies behind one contract: ``reset(task)`` then ``select_action(obs) -> (4,) command``.

Only the expert exists so far; learned policies (ACT, DP, CNN-BC) and AirVLN-R1 join it
through the same contract (issues 7 and 8).
"""

from __future__ import annotations

POLICY_NAMES = ("expert",)


def make_policy(name: str, world):
    """The policy called ``name`` for a :class:`~airplay.sim.world.World`."""
    if name == "expert":
        from airplay.policies.expert import ExpertNavigator

        return ExpertNavigator(world)
    raise ValueError(f"unknown policy {name!r}; available: {', '.join(POLICY_NAMES)}")
