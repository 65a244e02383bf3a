"""Normalization as pre/post steps around the model, its statistics saved with the checkpoint.

Per feature (``observation.state``, ``observation.goal``, ``action``) one mode:
``mean_std`` (x - mean) / std, or ``min_max`` to [-1, 1] (Diffusion Policy's actions).
The statistics are buffers of :class:`Normalizer`, so they travel in the policy's
safetensors state dict. Images are not normalized here (the encoders scale them).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

MODES = ("mean_std", "min_max")
MIN_SCALE = 1e-3
"""Smallest std or half-range: features that barely vary (e.g. roll/pitch quaternion terms)
are not blown up into noise."""


def compute_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """mean, std, min, max over the first axis of (N, D) ``values`` (float64 accumulation)."""
    v = np.asarray(values, np.float64).reshape(len(values), -1)
    if not len(v) or not np.isfinite(v).all():
        raise ValueError("statistics need a non-empty array of finite values")
    return {"mean": v.mean(0), "std": v.std(0), "min": v.min(0), "max": v.max(0)}


class _FeatureStats(nn.Module):
    def __init__(self, dim: int, mode: str) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"normalization mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.mode = mode
        self.register_buffer("center", torch.zeros(dim))
        self.register_buffer("scale", torch.ones(dim))

    def set(self, stats: dict) -> None:
        if self.mode == "mean_std":
            center, scale = np.asarray(stats["mean"]), np.asarray(stats["std"])
        else:
            lo, hi = np.asarray(stats["min"]), np.asarray(stats["max"])
            center, scale = 0.5 * (lo + hi), 0.5 * (hi - lo)
        self.center.copy_(torch.as_tensor(center, dtype=torch.float32).reshape(self.center.shape))
        self.scale.copy_(torch.as_tensor(np.maximum(scale, MIN_SCALE), dtype=torch.float32).reshape(self.scale.shape))


class Normalizer(nn.Module):
    """``features``: {key: (dim, mode)}. ``normalize(batch)`` maps the keys it knows;
    ``unnormalize(key, x)`` undoes it for one (the action, after the model)."""

    def __init__(self, features: dict[str, tuple[int, str]]) -> None:
        super().__init__()
        self.keys = tuple(features)
        self.stats = nn.ModuleDict({_name(k): _FeatureStats(d, m) for k, (d, m) in features.items()})

    def set_stats(self, stats: dict[str, dict]) -> None:
        """Statistics per key as :func:`compute_stats` gives them; every key must be present."""
        for key in self.keys:
            if key not in stats:
                raise KeyError(f"no statistics for feature {key!r}")
            self.stats[_name(key)].set(stats[key])

    def normalize(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        out = dict(batch)
        for key in self.keys:
            if key in out:
                s = self.stats[_name(key)]
                out[key] = (out[key] - s.center) / s.scale
        return out

    def unnormalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        s = self.stats[_name(key)]
        return x * s.scale + s.center


def _name(key: str) -> str:
    return key.replace(".", "__")  # module names cannot hold dots
