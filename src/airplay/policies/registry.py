"""The policies by name: one table that ``make_policy``, the CLI's ``--policy``, the graph's
``policy:=`` and the nodes' ``policy`` parameter look names up in.

Each :class:`PolicyEntry` builds its policy from what a caller has (the world to plan in, a
checkpoint folder, a torch device, VLN options) and says how the rest of airplay treats it:
learned policies are loaded from a checkpoint folder; a VLN policy reads the ``vln`` options
and flies the ``vln`` setting by default. A name not in the table may be ``module:factory``, a
policy of the user's own (``factory(world)`` returns it, :data:`PLUGIN_NAME`).

Entries that live outside this package are named by ``module:factory`` and loaded by name, as
plugins are: ``airvln_r1`` is :func:`airplay.vln.navigator.make_airvln_policy`, and vln builds
on the policy contract of this package, not the reverse (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Callable

from airplay.node_schemas import POLICY_BACKENDS
from airplay.policies.checkpoint import LEARNED_POLICY_CLASSES, load_policy, read_config

PLUGIN_NAME = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
"""A policy of the user's own, ``module:factory``: ``factory(world)`` returns a policy (the
contract of :mod:`airplay.policies.base`: ``reset(task)``, ``select_action(obs)``)."""


def plugin_factory(name: str):
    """The callable a ``module:factory`` name names; ValueError says what could not be found."""
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


@dataclass(frozen=True)
class PolicyEntry:
    """One named policy.

    build: ``build(name, world, checkpoint, device, vln)`` returns the policy (``world`` a
    :class:`~airplay.world.World` or None, ``checkpoint`` a folder or None, ``device`` a torch
    device string, ``vln`` a dict of VLN options or None); ValueError names what is missing.
    learned: loaded from a checkpoint folder (``airplay train --out``), whose config.json
    ``type`` is the name; policy_class: its ``module:class`` (a learned policy's only).
    vln: reads the VLN options and flies the ``vln`` setting (an instruction per episode).
    chunked: serves controls from predicted chunks, so an execution horizon applies.
    from_demonstrations: a learned policy that ``airplay train`` trains on demonstrations (False:
    trained elsewhere, e.g. ``ppo_depth`` by examples/ppo_pointgoal.py).
    """

    name: str
    build: Callable
    learned: bool = False
    policy_class: str | None = None
    vln: bool = False
    chunked: bool = True
    from_demonstrations: bool = True

    @property
    def default_setting(self) -> str:
        """The task setting flown when none is asked for."""
        return "vln" if self.vln else "pointgoal"


def _expert(name, world, checkpoint, device, vln):
    from airplay.policies.expert import ExpertNavigator

    if world is None:
        raise ValueError("the expert needs the world to plan in")
    return ExpertNavigator(world)


def _field_expert(name, world, checkpoint, device, vln):
    from airplay.policies.expert import FieldExpertNavigator

    if world is None:
        raise ValueError("the field expert needs the world to plan in")
    return FieldExpertNavigator(world)


def _random(name, world, checkpoint, device, vln):
    from airplay.policies.random_policy import RandomPolicy

    return RandomPolicy(world.vehicle if world is not None else None)


def _goal_direct(name, world, checkpoint, device, vln):
    from airplay.policies.goal_direct import GoalDirectPolicy

    return GoalDirectPolicy(world.vehicle if world is not None else None)


def _learned(name, world, checkpoint, device, vln):
    if not checkpoint:
        how = f"airplay train --policy {name} --out DIR" if REGISTRY[name].from_demonstrations else \
            "examples/ppo_pointgoal.py --out DIR"
        raise ValueError(f"policy {name!r} needs a checkpoint folder ({how})")
    cls, _ = read_config(checkpoint)
    if cls.name != name:
        raise ValueError(f"checkpoint {checkpoint} holds a {cls.name!r} policy, not {name!r}")
    return load_policy(checkpoint, device=device)


AIRVLN_FACTORY = "airplay.vln.navigator:make_airvln_policy"
"""Where AirVLN-R1's policy is built (keyword arguments: the VLN options, ``world``, ``device``)."""


def _airvln(name, world, checkpoint, device, vln):
    return plugin_factory(AIRVLN_FACTORY)(world=world, device=device, **(vln or {}))


REGISTRY: dict[str, PolicyEntry] = {e.name: e for e in (
    PolicyEntry("expert", _expert),
    PolicyEntry("field_expert", _field_expert),
    PolicyEntry("random", _random),
    PolicyEntry("goal_direct", _goal_direct),
    PolicyEntry("act", _learned, learned=True, policy_class=LEARNED_POLICY_CLASSES["act"]),
    PolicyEntry("dp", _learned, learned=True, policy_class=LEARNED_POLICY_CLASSES["dp"]),
    PolicyEntry("cnn_bc", _learned, learned=True, policy_class=LEARNED_POLICY_CLASSES["cnn_bc"]),
    PolicyEntry("ppo_depth", _learned, learned=True, policy_class=LEARNED_POLICY_CLASSES["ppo_depth"],
                from_demonstrations=False),
    PolicyEntry("airvln_r1", _airvln, vln=True, chunked=False),
)}
"""Every built-in policy by name: ``expert`` (the privileged A* expert), ``field_expert`` (the
privileged state-only expert, a DAgger labeller), ``random`` (uniform commands within the vehicle
limits), ``goal_direct`` (straight at the goal from the goal vector alone), the learned ``act``, ``dp`` and ``cnn_bc`` (trained on demonstrations), ``ppo_depth``
(trained by PPO, examples/ppo_pointgoal.py) and ``airvln_r1`` (AirNav's navigator)."""

POLICY_NAMES = tuple(REGISTRY)
"""The built-in names; :mod:`airplay.policy_names` lists the same, in this order, for the node schemas
and the CLI's help, which must not import the registry's layer (test_policies_contract.py checks)."""
LEARNED_POLICIES = tuple(name for name, e in REGISTRY.items() if e.learned)
DEMONSTRATION_POLICIES = tuple(name for name, e in REGISTRY.items() if e.learned and e.from_demonstrations)
"""The learned policies ``airplay train`` trains on demonstrations."""


def policy_entry(name: str) -> PolicyEntry | None:
    """The built-in entry called ``name``, or None (a plugin name or an unknown one)."""
    return REGISTRY.get(name)


def is_policy_name(name: str) -> bool:
    """A built-in name (:data:`REGISTRY`), or a ``module:factory`` plugin name (:data:`PLUGIN_NAME`)."""
    return name in REGISTRY or PLUGIN_NAME.fullmatch(str(name)) is not None


def default_setting(name: str) -> str:
    """The task setting the policy ``name`` flies when none is asked for (plugins: pointgoal)."""
    entry = REGISTRY.get(name)
    return entry.default_setting if entry is not None else "pointgoal"


def reads_vln_options(name: str) -> bool:
    """True for a VLN policy (built from the VLN options, flown in the vln setting)."""
    entry = REGISTRY.get(name)
    return entry is not None and entry.vln


def make_policy(name: str, world=None, checkpoint: str | None = None, execution_horizon: int | None = None,
                device: str = "cpu", vln: dict | None = None, backend: str = "torch"):
    """The policy called ``name`` (:data:`REGISTRY`, or ``module:factory``): the experts plan in
    ``world`` (a :class:`~airplay.world.World`); a learned one is loaded from the ``checkpoint``
    folder; ``vln`` holds a VLN policy's options. ``execution_horizon`` (H, controls executed per
    predicted chunk) overrides a chunked policy's own. ``backend`` (:data:`~airplay.node_schemas.POLICY_BACKENDS`):
    ``onnxruntime`` runs a learned cnn_bc, act or dp from the ONNX export of ``checkpoint``
    (:mod:`airplay.policies.onnx_runtime`). ValueError names what is wrong."""
    if backend not in POLICY_BACKENDS:
        raise ValueError(f"policy backend must be one of {', '.join(POLICY_BACKENDS)}, got {backend!r}")
    entry = REGISTRY.get(name)
    if backend != "torch":
        return _onnx_policy(name, checkpoint, execution_horizon)
    if entry is not None:
        policy = entry.build(name, world, checkpoint, device, vln)
        if not entry.chunked:
            return policy
    elif PLUGIN_NAME.fullmatch(name):
        policy = plugin_factory(name)(world)
    else:
        raise ValueError(f"unknown policy {name!r}; available: {', '.join(POLICY_NAMES)}, or module:factory")
    if execution_horizon:
        policy.set_execution(execution_horizon=execution_horizon)
    return policy


def _onnx_policy(name: str, checkpoint: str | None, execution_horizon: int | None):
    """``name``'s ONNX export run by onnxruntime (:func:`make_policy`, backend onnxruntime)."""
    from airplay.policies.onnx_format import EXPORTABLE

    if name not in EXPORTABLE:
        raise ValueError(f"policy {name!r} has no onnxruntime backend (learned policies exported with airplay "
                         f"export --onnx: {', '.join(EXPORTABLE)})")
    if not checkpoint:
        raise ValueError(f"policy {name!r} with the onnxruntime backend needs its ONNX export: the export folder "
                         "or a checkpoint folder exported into CHECKPOINT/onnx (airplay export --onnx CHECKPOINT)")
    from airplay.policies.onnx_runtime import load_onnx_policy

    changes = {"execution_horizon": int(execution_horizon)} if execution_horizon else {}
    return load_onnx_policy(checkpoint, name, **changes)
