"""Policies behind one contract (:mod:`airplay.policies.base`): ``reset(task)`` then
``select_action(obs) -> (4,) command``, served from predicted chunks by an adapter.

The policies by name are in :mod:`airplay.policies.registry` (re-exported here):
``expert`` is the privileged A* expert; ``field_expert`` the privileged state-only expert
(:mod:`airplay.tasks.field_expert`, a DAgger labeller); ``random`` draws uniform commands within the vehicle
limits (the experiments' lower bound); ``act``, ``dp``, ``cnn_bc`` and ``ppo_depth`` are learned and
loaded from a checkpoint folder (:mod:`airplay.policies.checkpoint`); ``airvln_r1`` is the
AirNav navigator (:mod:`airplay.vln.navigator`), built from ``vln`` options (backend, model,
endpoint, ...; see :func:`airplay.vln.navigator.make_airvln_policy`); ``module:factory`` names
a policy of the user's own (``factory(world)`` returns it).
"""

from airplay.policies.registry import (
    LEARNED_POLICIES,
    PLUGIN_NAME,
    POLICY_NAMES,
    REGISTRY,
    PolicyEntry,
    default_setting,
    is_policy_name,
    make_policy,
    plugin_factory,
    policy_entry,
    reads_vln_options,
)

__all__ = ["LEARNED_POLICIES", "PLUGIN_NAME", "POLICY_NAMES", "REGISTRY", "PolicyEntry", "default_setting",
           "is_policy_name", "make_policy", "plugin_factory", "policy_entry", "reads_vln_options"]
