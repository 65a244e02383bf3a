"""The policy contract shared by the expert and every learned policy (lerobot-style).

* :class:`PolicyConfig` - a dataclass per policy; every field documented in the subclass,
  checked in ``__post_init__`` with :class:`ConfigError` naming the field.
* :class:`Policy` - ``reset(task=None)``, ``select_action(obs) -> (4,) float32`` served from
  an action queue through an adapter (:mod:`airplay.policies.adapters`),
  ``predict_action_chunk(obs) -> (K, 4) float32`` and, for learned policies,
  ``forward(batch) -> (loss, info)``.

Commands are ``[vx, vy, vz, yaw_rate]``: heading-frame velocity (m/s) and yaw rate (rad/s),
one per 50 Hz control period. ``obs`` is the observation dict of
:class:`airplay.world.env.AirPlayEnv` (the policy node builds the same dict).

No torch here: the expert and the contract import without it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

import numpy as np


class ConfigError(ValueError):
    """A policy configuration field with a bad value; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"config field '{field}': {message}")
        self.field = field


def check(condition: bool, field: str, message: str) -> None:
    """Raise :class:`ConfigError` for ``field`` unless ``condition``."""
    if not condition:
        raise ConfigError(field, message)


@dataclasses.dataclass
class PolicyConfig:
    """Fields every policy has.

    chunk_size: controls predicted per call of ``predict_action_chunk`` (K).
    execution_horizon: controls executed from each chunk before predicting again (H, 1..K; any
        H >= 1 with the ``hold`` adapter, which holds the first control H periods).
    adapter: how a chunk becomes 50 Hz commands: "prefix", "hold", "ensemble" (temporal
        ensembling, ACT) or "tracker" (waypoints; see :mod:`airplay.policies.adapters`).
    """

    type: ClassVar[str] = "base"
    chunk_size: int = 1
    execution_horizon: int = 1
    adapter: str = "prefix"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        from airplay.policies.adapters import ADAPTERS

        check(isinstance(self.chunk_size, int) and self.chunk_size >= 1, "chunk_size",
              f"must be an integer >= 1, got {self.chunk_size!r}")
        longest = None if self.adapter == "hold" else self.chunk_size  # hold: any H (holds the first control)
        check(isinstance(self.execution_horizon, int) and not isinstance(self.execution_horizon, bool)
              and 1 <= self.execution_horizon <= (longest or self.execution_horizon),
              "execution_horizon", f"must be an integer in 1..chunk_size ({self.chunk_size}), "
                                   f"got {self.execution_horizon!r}" if longest else
                                   f"must be an integer >= 1, got {self.execution_horizon!r}")
        check(self.adapter in ADAPTERS, "adapter", f"must be one of {', '.join(ADAPTERS)}, got {self.adapter!r}")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "PolicyConfig":
        """The config from a dict (e.g. config.json); unknown keys are an error naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError(unknown[0], f"unknown field for {cls.__name__}; known: {', '.join(sorted(names))}")
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        return cls(**kwargs)

    def replace(self, **changes: Any) -> "PolicyConfig":
        """A copy with ``changes`` applied and validated."""
        return dataclasses.replace(self, **changes)


class Policy:
    """Base of every policy: an adapter serves ``select_action`` from predicted chunks.

    Subclasses implement :meth:`predict_action_chunk`; learned ones also ``forward``.
    ``observe(obs)`` is called on every control step before the adapter (policies with an
    observation history, e.g. Diffusion Policy, keep it there).
    """

    name: ClassVar[str] = "base"
    privileged: ClassVar[bool] = False
    """True when ``reset`` needs the task (the expert plans from it)."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self.adapter = None
        self.set_execution(config.adapter, config.execution_horizon)

    def set_execution(self, adapter: str | None = None, execution_horizon: int | None = None) -> None:
        """Change how chunks are executed (adapter kind, H) without touching the model."""
        from airplay.policies.adapters import make_adapter

        changes = {}
        if adapter is not None:
            changes["adapter"] = adapter
        if execution_horizon is not None:
            changes["execution_horizon"] = int(execution_horizon)
        if changes:
            self.config = self.config.replace(**changes)
        self.adapter = make_adapter(self.config.adapter, self.config.execution_horizon, self.config.chunk_size)

    def reset(self, task=None) -> None:
        """Start an episode: empty the action queue (and any observation history)."""
        self.adapter.reset()

    def observe(self, obs: dict) -> None:
        """Called with every observation before acting (default: nothing to keep)."""

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        """(K, 4) float32 commands for this observation and the K-1 control periods after it."""
        raise NotImplementedError

    def select_action(self, obs: dict) -> np.ndarray:
        """(4,) float32 command for this observation, from the queue or a new chunk."""
        self.observe(obs)
        return self.adapter.step(obs, self.predict_action_chunk)

    def forward(self, batch: dict):
        """(loss, info) on a training batch; only learned policies have one."""
        raise NotImplementedError(f"policy {self.name!r} is not trained")


PredictFn = Callable[[dict], np.ndarray]
