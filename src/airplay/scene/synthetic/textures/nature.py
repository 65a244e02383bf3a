"""Park and forest materials: grass with dirt paths, bark, leaves, rock, soil."""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.builder import Material
from airplay.scene.synthetic.textures._util import TexIn, mix, rgb, tone, value_noise


def path_distance(xy: np.ndarray, paths: tuple) -> np.ndarray:
    """Distance (N,) from points to the nearest path polyline, minus its half width.

    ``paths`` = ((half_width, x0, y0, x1, y1, ...), ...).
    """
    best = np.full(len(xy), np.inf)
    for path in paths:
        half, pts = path[0], np.asarray(path[1:], dtype=np.float64).reshape(-1, 2)
        for a, b in zip(pts[:-1], pts[1:]):
            ab = b - a
            t = np.clip(((xy - a) @ ab) / max(float(ab @ ab), 1e-12), 0.0, 1.0)
            d = np.linalg.norm(xy - (a + t[:, None] * ab), axis=1) - half
            best = np.minimum(best, d)
    return best


def _grass(x: TexIn) -> np.ndarray:
    c = mix(rgb((0.26, 0.42, 0.16), len(x)), (0.42, 0.50, 0.20), x.noise(0.15, 50))
    c = mix(c, (0.55, 0.52, 0.30), np.clip((x.noise(0.4, 51) - 0.62) * 4, 0, 1))  # dry patches
    c = tone(c, x.noise(2.0, 52, 2), 0.10)
    c = tone(c, value_noise(x.p, 35.0, x.seed + 53), 0.22)  # blades
    flowers = value_noise(x.p, 12.0, x.seed + 54) > 0.93
    c[flowers] = np.where((value_noise(x.p[flowers], 3.0, x.seed + 55) > 0.5)[:, None], (0.95, 0.92, 0.75), (0.92, 0.80, 0.25))
    return c


def ground(x: TexIn, m: Material):
    """Grass; dirt on and along the ``paths`` (see :func:`path_distance`) with a ragged edge."""
    c = _grass(x)
    paths = m.get("paths", ())
    if paths:
        d = path_distance(x.p[:, :2], paths) + 0.35 * (x.noise(1.5, 56, 2) - 0.5)
        dirt = mix(rgb((0.50, 0.41, 0.30), len(x)), (0.62, 0.54, 0.42), x.noise(1.0, 57))
        dirt = tone(dirt, value_noise(x.p, 25.0, x.seed + 58), 0.15)
        pebbles = value_noise(x.p, 18.0, x.seed + 59) > 0.8
        dirt[pebbles] = dirt[pebbles] * 1.25
        c = mix(c, dirt, np.clip(0.5 - d / np.maximum(x.filt, 0.15), 0, 1))
    return c, np.zeros(len(x))


def bark(x: TexIn, m: Material):
    u, z = x.uv[:, 0], x.uv[:, 1]
    c = rgb(m.get("color", (0.33, 0.25, 0.18)), len(x))
    c = tone(c, x.noise2(u * 7.0, z * 0.9, 60), 0.22)
    fissure = x.noise2(u * 14.0, z * 1.5, 61, 1) < 0.3
    c[fissure] *= 0.6
    moss = np.clip((x.noise(0.8, 62) - 0.6) * 3, 0, 1) * np.clip(1.2 - z / 2.0, 0, 1)
    return mix(c, (0.30, 0.38, 0.18), moss), np.zeros(len(x))


def leaves(x: TexIn, m: Material):
    """Foliage: blotches of two greens, per-leaf speckle, lighter towards the top."""
    c = mix(rgb(m.get("color", (0.20, 0.38, 0.12)), len(x)), np.asarray(m.get("color2", (0.36, 0.52, 0.18))),
            x.noise(0.9, 70))
    c = tone(c, value_noise(x.p, 14.0, x.seed + 71), 0.25)
    gaps = np.clip((0.42 - x.noise(2.5, 73, 2)) * 5.0, 0.0, 1.0)  # holes between leaf clumps look dark
    c = c * (1.0 - 0.55 * gaps)[:, None]
    c = c * (0.85 + 0.25 * np.clip(x.n[:, 2], -1, 1))[:, None]
    accent = m.get("accent")
    if accent is not None:
        c = mix(c, np.asarray(accent), (value_noise(x.p, 8.0, x.seed + 72) > 0.86).astype(float))
    return c, np.zeros(len(x))


def rock(x: TexIn, m: Material):
    c = rgb(m.get("color", (0.52, 0.51, 0.49)), len(x))
    c = tone(c, x.noise(1.5, 80), 0.14)
    c = tone(c, value_noise(x.p, 30.0, x.seed + 81), 0.08)
    crack = np.abs(x.noise(2.5, 82, 2) - 0.5) < 0.02
    c[crack] *= 0.6
    moss = np.clip((x.n[:, 2] - 0.5) * 2.5, 0, 1) * np.clip((x.noise(1.2, 83) - 0.4) * 3, 0, 1)
    return mix(c, (0.33, 0.42, 0.20), moss), np.zeros(len(x))


def soil(x: TexIn, m: Material):
    c = tone(rgb(m.get("color", (0.36, 0.27, 0.20)), len(x)), value_noise(x.p, 20.0, x.seed + 90), 0.2)
    return c, np.zeros(len(x))


MATERIALS = {"ground": ground, "bark": bark, "leaves": leaves, "rock": rock, "soil": soil}
