"""Policies behind one contract (:mod:`airplay.policies.base`): ``reset(task)`` then
``select_action(obs) -> (4,) command``, served from predicted chunks by an adapter.

``expert`` is the privileged A* expert; ``random`` draws uniform commands within the vehicle
limits (the experiments' lower bound); ``act``, ``dp`` and ``cnn_bc`` are learned and
loaded from a checkpoint folder (:mod:`airplay.policies.checkpoint`); ``airvln_r1`` is the
AirNav navigator (:mod:`airplay.vln.navigator`), built from ``vln`` options (backend, model,
endpoint, ...; see :func:`airplay.vln.navigator.make_airvln_policy`).
"""

from __future__ import annotations

LEARNED_POLICIES = ("act", "dp", "cnn_bc")
POLICY_NAMES = ("expert", "random", *LEARNED_POLICIES, "airvln_r1")


def make_policy(name: str, world=None, checkpoint: str | None = None, execution_horizon: int | None = None,
                device: str = "cpu", vln: dict | None = None):
    """The policy called ``name``: the expert plans in ``world`` (a :class:`~airplay.sim.world.World`);
    a learned one is loaded from the ``checkpoint`` folder. ``execution_horizon`` (H, controls
    executed per predicted chunk) overrides the policy's own."""
    if name == "expert":
        from airplay.policies.expert import ExpertNavigator

        if world is None:
            raise ValueError("the expert needs the world to plan in")
        policy = ExpertNavigator(world)
    elif name == "random":
        from airplay.policies.random_policy import RandomPolicy

        policy = RandomPolicy(world.vehicle if world is not None else None)
    elif name in LEARNED_POLICIES:
        from airplay.policies.checkpoint import load_policy, read_config

        if not checkpoint:
            raise ValueError(f"policy {name!r} needs a checkpoint folder (airplay train --policy {name} --out DIR)")
        cls, _ = read_config(checkpoint)
        if cls.name != name:
            raise ValueError(f"checkpoint {checkpoint} holds a {cls.name!r} policy, not {name!r}")
        policy = load_policy(checkpoint, device=device)
    elif name == "airvln_r1":
        from airplay.vln.navigator import make_airvln_policy

        return make_airvln_policy(world=world, device=device, **(vln or {}))
    else:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(POLICY_NAMES)}")
    if execution_horizon:
        policy.set_execution(execution_horizon=execution_horizon)
    return policy
