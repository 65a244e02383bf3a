"""Checkpoints: ``model.safetensors`` (weights and normalization statistics) plus
``config.json`` (``{"type": "act", "config": {...}, "airplay_version": ...}``); never pickle.

Training adds ``training_state.safetensors`` (optimizer tensors, RNG state) and
``training_state.json`` (step, optimizer hyper-parameters) to resume.
Files are written under a temporary name and renamed, so a checkpoint folder never holds a
half-written file.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from pathlib import Path


LEARNED_POLICY_CLASSES: dict[str, str] = {
    "act": "airplay.policies.act:ACTPolicy",
    "dp": "airplay.policies.diffusion:DiffusionPolicy",
    "cnn_bc": "airplay.policies.cnn_bc:CNNBCPolicy",
    "ppo_depth": "airplay.policies.ppo_depth:PPODepthPolicy",
}
"""A checkpoint's config.json ``type`` -> its policy class as ``module:class`` (the registry's
learned entries name these, :data:`airplay.policy_names.LEARNED_POLICY_NAMES` in this order)."""

MODEL_FILE, CONFIG_FILE = "model.safetensors", "config.json"
STATE_FILE, STATE_JSON = "training_state.safetensors", "training_state.json"


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be loaded; the message names the file."""


GENERIC_FOLDER_NAMES = frozenset({"checkpoint", "checkpoints", "final", "best", "last", "latest", "model"})
"""Checkpoint folder names that say nothing of the run: :func:`checkpoint_label` adds the parent."""


def checkpoint_label(folder: str | Path) -> str:
    """A short name for a checkpoint folder in tables and plots: its name, or ``parent/name``
    when the name is generic (``iter_02/checkpoint`` rather than ``checkpoint``)."""
    path = Path(str(folder))
    if path.name.lower() in GENERIC_FOLDER_NAMES and path.parent.name:
        return f"{path.parent.name}/{path.name}"
    return path.name or str(path)


def policy_class(kind: str):
    """The policy class of a learned policy type (config.json "type"; :data:`LEARNED_POLICY_CLASSES`)."""
    path = LEARNED_POLICY_CLASSES.get(kind)
    if path is None:
        raise CheckpointError(f"unknown policy type {kind!r}; learned policies: {', '.join(LEARNED_POLICY_CLASSES)}")
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


def _atomic(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.partial")
    write(tmp)
    os.replace(tmp, path)


def save_json(path: Path, data: dict) -> None:
    _atomic(Path(path), lambda p: p.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n"))


def save_tensors(path: Path, tensors: dict, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file

    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    _atomic(Path(path), lambda p: save_file(tensors, str(p), metadata=metadata))


def save_policy(policy, folder: str | Path) -> Path:
    """Write ``policy`` (a LearnedPolicy) into ``folder`` (made if missing)."""
    import airplay

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_tensors(folder / MODEL_FILE, policy.state_dict())
    save_json(folder / CONFIG_FILE, {"type": policy.name, "config": policy.config.to_dict(),
                                     "airplay_version": airplay.__version__})
    return folder


def read_config(folder: str | Path):
    """(policy class, config) of the checkpoint in ``folder``."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file; a checkpoint folder holds {CONFIG_FILE} and {MODEL_FILE}")
    try:
        data = json.loads(path.read_text())
        kind, fields = data["type"], data["config"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise CheckpointError(f"{path}: not a policy config ({err})") from None
    cls = policy_class(kind)
    names = {f.name for f in dataclasses.fields(cls.config_class)}
    if isinstance(fields, dict):  # written before these fields existed: what they were trained with
        if "state_features" in names and "state_features" not in fields:
            fields = {**fields, "state_features": "full"}
        if "image_pool" in names and "image_pool" not in fields:
            fields = {**fields, "image_pool": "avg"}
    try:
        return cls, cls.config_class.from_dict(fields)
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None


def load_policy(folder: str | Path, device: str = "cpu", **config_changes):
    """The policy saved in ``folder``, on ``device``, in eval mode; ``config_changes``
    override execution fields (``execution_horizon``, ``adapter``) at load time."""
    from safetensors.torch import load_file

    cls, config = read_config(folder)
    if config_changes:
        config = config.replace(**config_changes)
    policy = cls(config)
    weights = Path(folder) / MODEL_FILE
    if not weights.is_file():
        raise CheckpointError(f"{weights}: no such file")
    try:
        policy.load_state_dict(load_file(str(weights)), strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{weights}: weights do not fit the config in {CONFIG_FILE}: {err}") from None
    return policy.to(device).eval()
