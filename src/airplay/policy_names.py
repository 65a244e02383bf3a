"""The built-in policies' names, for what lists them without building one: the node schemas'
descriptions (:mod:`airplay.node_schemas`) and the command line's help.

:data:`airplay.policies.registry.REGISTRY` has one entry per name here, in this order, and its
learned and VLN entries are the names here (``test/test_policies_contract.py`` checks both);
the registry is where a policy is built and described, this module only names them, so that
the base layer can list them (docs/architecture.md). Nothing of airplay imported.
"""

from __future__ import annotations

POLICY_NAMES: tuple[str, ...] = ("expert", "field_expert", "random", "goal_direct", "act", "dp", "cnn_bc",
                                 "ppo_depth", "airvln_r1")
"""Every built-in policy, in the registry's order."""

LEARNED_POLICY_NAMES: tuple[str, ...] = ("act", "dp", "cnn_bc", "ppo_depth")
"""The policies loaded from a checkpoint folder (``PolicyEntry.learned``)."""

VLN_POLICY_NAMES: tuple[str, ...] = ("airvln_r1",)
"""The policies that fly the ``vln`` setting (``PolicyEntry.vln``)."""

