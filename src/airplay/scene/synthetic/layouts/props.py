"""Reusable objects built from primitives: trees, bushes, rocks, street and room furniture.

Each function adds closed primitives to a :class:`SceneBuilder` and draws its random
choices from the ``rng`` it is given, in a fixed order.
"""

from __future__ import annotations

import math

import numpy as np

from airplay.scene.synthetic.builder import SceneBuilder

LEAF_GREENS = [((0.16, 0.32, 0.10), (0.32, 0.48, 0.16)), ((0.20, 0.36, 0.12), (0.40, 0.52, 0.20)),
               ((0.13, 0.27, 0.12), (0.26, 0.42, 0.18)), ((0.24, 0.38, 0.10), (0.46, 0.55, 0.22))]
AUTUMN = ((0.50, 0.30, 0.08), (0.75, 0.52, 0.15))
CONIFER = ((0.08, 0.20, 0.10), (0.16, 0.30, 0.14))


def _leaf_material(b: SceneBuilder, rng: np.random.Generator, autumn_p: float = 0.12) -> int:
    if rng.random() < autumn_p:
        dark, light = AUTUMN
    else:
        dark, light = LEAF_GREENS[int(rng.integers(len(LEAF_GREENS)))]
    return b.material("leaves", color=dark, color2=light)


def tree(b: SceneBuilder, x: float, y: float, rng: np.random.Generator, *, base: float = 3.2,
         size: float = 1.0, conifer: bool = False, detail: float = 0.5) -> float:
    """A tree with its canopy starting about ``base`` m up; returns the canopy radius."""
    bark = b.material("bark", color=tuple(np.round(np.array((0.34, 0.26, 0.19)) * rng.uniform(0.8, 1.15), 3)))
    if conifer:
        height = base + rng.uniform(4.5, 6.5) * size
        b.cylinder(x, y, 0.0, height - 1.0, rng.uniform(0.14, 0.22) * size, bark, segments=8)
        leaves = b.material("leaves", color=CONIFER[0], color2=CONIFER[1])
        tiers = 4
        radius = rng.uniform(1.6, 2.1) * size
        for k in range(tiers):
            f = 1.0 - k / tiers
            rz = (height - base) / tiers * 0.9
            zc = base + (k + 0.5) * (height - base) / tiers
            r = radius * (0.35 + 0.65 * f)
            b.ellipsoid((x, y, zc), (r, r, rz), leaves, subdivisions=2 if r > 1.3 else 1,
                        yaw=rng.uniform(0, np.pi), detail=detail)
        return radius
    radius = rng.uniform(1.7, 2.5) * size
    rz = radius * rng.uniform(0.75, 0.95)
    top = base + rz
    b.cylinder(x, y, 0.0, top, rng.uniform(0.15, 0.26) * size, bark, segments=10)
    leaves = _leaf_material(b, rng)
    b.ellipsoid((x, y, top), (radius, radius * rng.uniform(0.85, 1.1), rz), leaves, subdivisions=2,
                yaw=rng.uniform(0, np.pi), detail=detail)
    for _ in range(int(rng.integers(1, 3))):
        a = rng.uniform(0, 2 * np.pi)
        r2 = radius * rng.uniform(0.55, 0.75)
        off = radius * rng.uniform(0.45, 0.65)
        zc = top + rng.uniform(-0.1, 0.5) * rz
        b.ellipsoid((x + off * math.cos(a), y + off * math.sin(a), max(zc, base + r2 * 0.8)), (r2, r2, r2 * 0.85),
                    leaves, subdivisions=1, yaw=rng.uniform(0, np.pi), detail=detail)
    return radius


def bush(b: SceneBuilder, x: float, y: float, rng: np.random.Generator, detail: float = 0.6) -> None:
    rx, ry, rz = rng.uniform(0.5, 1.0), rng.uniform(0.5, 1.0), rng.uniform(0.45, 0.8)
    flowers = rng.random() < 0.3
    dark, light = LEAF_GREENS[int(rng.integers(len(LEAF_GREENS)))]
    accent = (0.85, 0.30, 0.45) if flowers else None
    mat = b.material("leaves", color=tuple(v * 0.85 for v in dark), color2=light, accent=accent)
    b.ellipsoid((x, y, rz * 0.55), (rx, ry, rz), mat, subdivisions=1, yaw=rng.uniform(0, np.pi), detail=detail)


def rock(b: SceneBuilder, x: float, y: float, rng: np.random.Generator) -> None:
    grey = rng.uniform(0.42, 0.58)
    mat = b.material("rock", color=(round(grey, 3), round(grey * 0.98, 3), round(grey * 0.94, 3)))
    r = (rng.uniform(0.4, 1.1), rng.uniform(0.3, 0.8), rng.uniform(0.25, 0.6))
    b.ellipsoid((x, y, r[2] * 0.35), r, mat, subdivisions=1, yaw=rng.uniform(0, np.pi))


def lamp_post(b: SceneBuilder, x: float, y: float, yaw: float, height: float = 5.5) -> None:
    metal = b.material("metal", color=(0.20, 0.23, 0.22))
    b.cylinder(x, y, 0.0, height, 0.07, metal, segments=8)
    b.cylinder(x, y, 0.0, 0.5, 0.12, metal, segments=8)
    c, s = math.cos(yaw), math.sin(yaw)
    b.box_at((x + 0.45 * c, y + 0.45 * s, height - 0.05), (0.9, 0.06, 0.06), yaw, metal)
    b.box_at((x + 0.95 * c, y + 0.95 * s, height - 0.12), (0.55, 0.26, 0.14), yaw, b.material("lamp"))


def bench(b: SceneBuilder, x: float, y: float, yaw: float) -> None:
    """A park bench facing ``yaw`` (its seat front towards yaw)."""
    wood = b.material("wood", color=(0.50, 0.34, 0.20), slats=0.1)
    metal = b.material("metal", color=(0.15, 0.16, 0.16))
    c, s = math.cos(yaw), math.sin(yaw)
    b.box_at((x, y, 0.44), (0.45, 1.6, 0.06), yaw, wood)
    b.box_at((x - 0.24 * c, y - 0.24 * s, 0.72), (0.05, 1.6, 0.42), yaw, wood)
    for side in (-0.7, 0.7):
        b.box_at((x - side * s, y + side * c, 0.205), (0.45, 0.06, 0.41), yaw, metal)


def car(b: SceneBuilder, x: float, y: float, yaw: float, rng: np.random.Generator) -> None:
    palette = [(0.70, 0.10, 0.10), (0.12, 0.22, 0.50), (0.85, 0.85, 0.83), (0.10, 0.10, 0.11),
               (0.55, 0.57, 0.60), (0.20, 0.40, 0.30), (0.85, 0.70, 0.20)]
    color = palette[int(rng.integers(len(palette)))]
    c, s = math.cos(yaw), math.sin(yaw)
    length, width = rng.uniform(3.9, 4.7), rng.uniform(1.7, 1.85)
    b.box_at((x, y, 0.15 + 0.42), (length, width, 0.84), yaw, b.material("car", color=color, z0=0.15))
    back = -0.15 * length
    b.box_at((x + back * c, y + back * s, 0.99 + 0.28), (length * 0.5, width * 0.9, 0.56), yaw,
             b.material("cabin", color=color))


def bin_(b: SceneBuilder, x: float, y: float) -> None:
    b.cylinder(x, y, 0.0, 0.9, 0.25, b.material("metal", color=(0.18, 0.30, 0.22)), segments=10)


def potted_plant(b: SceneBuilder, x: float, y: float, rng: np.random.Generator, size: float = 1.0) -> None:
    pot = b.material("concrete", color=(0.62, 0.36, 0.24))
    b.cylinder(x, y, 0.0, 0.45 * size, 0.22 * size, pot, cap=b.material("soil"), segments=10)
    leaves = _leaf_material(b, rng, autumn_p=0.0)
    r = rng.uniform(0.35, 0.5) * size
    b.ellipsoid((x, y, 0.45 * size + r * 1.1), (r, r, r * 1.3), leaves, subdivisions=1, detail=1.0)


def table(b: SceneBuilder, x: float, y: float, w: float, d: float, wood: int) -> None:
    """Table centred at (x, y), w along x, d along y, top at 0.76 m."""
    b.box((x - w / 2, y - d / 2, 0.72), (x + w / 2, y + d / 2, 0.76), wood)
    for sx in (-1, 1):
        for sy in (-1, 1):
            cx, cy = x + sx * (w / 2 - 0.08), y + sy * (d / 2 - 0.08)
            b.box((cx - 0.03, cy - 0.03, 0.0), (cx + 0.03, cy + 0.03, 0.72), wood)


def sofa(b: SceneBuilder, lo: tuple, hi: tuple, back: str, fabric: int) -> None:
    """Sofa filling the floor rectangle lo..hi (x, y); ``back`` is the side of the backrest."""
    (x0, y0), (x1, y1) = lo, hi
    b.box((x0, y0, 0.0), (x1, y1, 0.42), fabric)
    t = 0.2
    rect = {"+y": (x0, y1 - t, x1, y1), "-y": (x0, y0, x1, y0 + t),
            "+x": (x1 - t, y0, x1, y1), "-x": (x0, y0, x0 + t, y1)}[back]
    b.box((rect[0], rect[1], 0.42), (rect[2], rect[3], 0.85), fabric)
