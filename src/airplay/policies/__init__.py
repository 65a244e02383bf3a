"""Policies behind one contract (:mod:`airplay.policies.base`): ``reset(task)`` then
``select_action(obs) -> (4,) command``, served from predicted chunks by an adapter.

``module:factory`` names a policy of the user's own (``factory(world)`` returns it);
``expert`` is the privileged A* expert; ``field_expert`` the privileged state-only expert
(:mod:`airplay.tasks.field_expert`, a DAgger labeller); ``random`` draws uniform commands within the vehicle
limits (the experiments' lower bound); ``act``, ``dp`` and ``cnn_bc`` are learned and
loaded from a checkpoint folder (:mod:`airplay.policies.checkpoint`); ``airvln_r1`` is the
AirNav navigator (:mod:`airplay.vln.navigator`), built from ``vln`` options (backend, model,
endpoint, ...; see :func:`airplay.vln.navigator.make_airvln_policy`).
"""

from __future__ import annotations

import importlib
import re

LEARNED_POLICIES = ("act", "dp", "cnn_bc")
POLICY_NAMES = ("expert", "field_expert", "random", *LEARNED_POLICIES, "airvln_r1")
PLUGIN_NAME = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
"""A policy of the user's own, ``module:factory``: ``factory(world)`` returns a policy (the
contract of :mod:`airplay.policies.base`: ``reset(task)``, ``select_action(obs)``)."""


def is_policy_name(name: str) -> bool:
    """One of :data:`POLICY_NAMES`, or a ``module:factory`` plugin name (:data:`PLUGIN_NAME`)."""
    return name in POLICY_NAMES or PLUGIN_NAME.fullmatch(str(name)) is not None


def plugin_factory(name: str):
    """The callable a ``module:factory`` policy name names; ValueError says what could not be found."""
    module_name, _, attr = name.partition(":")
    try:
        obj = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"policy {name!r}: cannot import module {module_name!r}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"policy {name!r}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"policy {name!r}: {attr!r} is not callable")
    return obj


def make_policy(name: str, world=None, checkpoint: str | None = None, execution_horizon: int | None = None,
                device: str = "cpu", vln: dict | None = None):
    """The policy called ``name``: the expert plans in ``world`` (a :class:`~airplay.world.World`);
    a learned one is loaded from the ``checkpoint`` folder. ``execution_horizon`` (H, controls
    executed per predicted chunk) overrides the policy's own."""
    if name == "expert":
        from airplay.policies.expert import ExpertNavigator

        if world is None:
            raise ValueError("the expert needs the world to plan in")
        policy = ExpertNavigator(world)
    elif name == "field_expert":
        from airplay.policies.field_expert import FieldExpertNavigator

        if world is None:
            raise ValueError("the field expert needs the world to plan in")
        policy = FieldExpertNavigator(world)
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
    elif PLUGIN_NAME.fullmatch(name):
        policy = plugin_factory(name)(world)
    else:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(POLICY_NAMES)}, or module:factory")
    if execution_horizon:
        policy.set_execution(execution_horizon=execution_horizon)
    return policy
