"""Shared pieces of the procedural textures: inputs, filtered line patterns, colour mixing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airplay.scene.synthetic.noise import cell_random, fbm, value_noise

__all__ = ["TexIn", "lines", "mix", "rgb", "tone", "cells", "fbm", "value_noise", "cell_random"]


@dataclass
class TexIn:
    """What a texture function sees for N surface samples."""

    p: np.ndarray       # (N, 3) map position, metres
    n: np.ndarray       # (N, 3) unit normal
    uv: np.ndarray      # (N, 2) map-anchored texture coordinates, metres (v = z on walls)
    st: np.ndarray      # (N, 2) position within the patch, metres
    extent: np.ndarray  # (N, 2) patch size, metres
    filt: np.ndarray    # (N,) filter width = sample spacing, metres (anti-aliasing)
    seed: int           # scene noise seed

    def __len__(self) -> int:
        return len(self.p)

    def noise(self, freq: float, salt: int, octaves: int = 3) -> np.ndarray:
        """fbm in [0, 1) of the 3D position."""
        return fbm(self.p, freq, self.seed + salt, octaves)

    def noise2(self, a: np.ndarray, b: np.ndarray, salt: int, octaves: int = 2) -> np.ndarray:
        """fbm in [0, 1) of two (already scaled) texture coordinates."""
        return fbm(np.column_stack([a, b, np.zeros_like(a)]), 1.0, self.seed + salt, octaves)


def rgb(color, n: int) -> np.ndarray:
    """(n, 3) copies of one colour."""
    return np.broadcast_to(np.asarray(color, dtype=np.float64), (n, 3)).copy()


def mix(a: np.ndarray, b, t: np.ndarray) -> np.ndarray:
    """Per-row linear blend a (N, 3) -> b (N, 3 or 3,) by t (N,)."""
    t = np.clip(t, 0.0, 1.0)[:, None]
    return a * (1.0 - t) + np.asarray(b) * t


def tone(color: np.ndarray, t: np.ndarray, amount: float) -> np.ndarray:
    """Scale brightness by 1 + amount * (2 t - 1) for t in [0, 1]."""
    return color * (1.0 + amount * (2.0 * t - 1.0))[:, None]


def lines(x: np.ndarray, period: float, width: float, filt: np.ndarray, offset: float = 0.0) -> np.ndarray:
    """Coverage in [0, 1] of lines ``width`` wide every ``period`` (at offset + k period),
    box-filtered over ``filt`` so thin lines stay visible as faint stripes, never as noise."""
    w = np.clip(filt, 1e-4, period * 0.5)
    y = x - offset
    d = np.abs(y - period * np.round(y / period))
    cover = np.minimum(d + w / 2, width / 2) - np.maximum(d - w / 2, -width / 2)
    return np.clip(cover / w, 0.0, 1.0)


def cells(x: np.ndarray, period: float) -> tuple[np.ndarray, np.ndarray]:
    """(cell index, position within the cell in [0, period)) along one coordinate."""
    i = np.floor(x / period)
    return i.astype(np.int64), x - i * period


def box_cover(x: np.ndarray, lo: float, hi: float, filt: np.ndarray) -> np.ndarray:
    """Filtered indicator of lo <= x <= hi."""
    w = np.maximum(filt, 1e-4)
    return np.clip((np.minimum(x + w / 2, hi) - np.maximum(x - w / 2, lo)) / w, 0.0, 1.0)
