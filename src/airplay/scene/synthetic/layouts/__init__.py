"""Scene layouts per category: each returns a :class:`Layout` built from a seeded rng."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airplay.scene.synthetic.builder import SceneBuilder
from airplay.scene.synthetic.splat import Lighting


@dataclass
class Layout:
    """A filled builder plus the navigable region and the baked lighting."""

    builder: SceneBuilder
    polygon: np.ndarray  # (M, 2) map x/y, counter-clockwise
    z_min: float
    z_max: float
    lighting: Lighting
    detail: float = 1.0  # multiplies the requested Gaussian density for the whole scene


def sun_direction(rng: np.random.Generator) -> tuple[float, float, float]:
    """Unit vector towards a sun 35-60 degrees up at a random azimuth."""
    el, az = np.radians(rng.uniform(35, 60)), rng.uniform(0, 2 * np.pi)
    return (float(np.cos(el) * np.cos(az)), float(np.cos(el) * np.sin(az)), float(np.sin(el)))


def split_lengths(total: float, rng: np.random.Generator, lo: float, hi: float) -> list[float]:
    """Cut ``total`` into pieces, each between ``lo`` and ``hi`` (a short rest is merged)."""
    pieces, left = [], total
    while left > hi:
        piece = rng.uniform(lo, hi)
        if left - piece < lo:
            piece = left / 2
        pieces.append(piece)
        left -= piece
    pieces.append(left)
    return pieces
