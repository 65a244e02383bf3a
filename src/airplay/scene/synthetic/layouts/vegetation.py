"""Vegetation: a park or forest glade crossed by dirt paths.

Map frame: the park is [0, W] x [0, D]; the ground (grass, dirt paths) extends 8 m
beyond it, where a ring of larger trees and bushes closes the view. Trees stand off the
paths with canopies from about 2.9-4 m up, so in the 1-4 m flight band trunks and the
lower canopies are obstacles; bushes and rocks sit below it.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.builder import SceneBuilder
from airplay.scene.synthetic.layouts import Layout, props, sun_direction
from airplay.scene.synthetic.splat import Lighting
from airplay.scene.synthetic.textures.nature import path_distance

MARGIN = 8.0


def _smooth_path(points: np.ndarray, per_segment: int = 8) -> np.ndarray:
    """Catmull-Rom spline through ``points`` (K, 2), sampled ``per_segment`` times per span."""
    p = np.concatenate([points[:1], points, points[-1:]])
    out = []
    for i in range(1, len(p) - 2):
        p0, p1, p2, p3 = p[i - 1], p[i], p[i + 1], p[i + 2]
        for t in np.linspace(0, 1, per_segment, endpoint=False):
            out.append(0.5 * ((2 * p1) + (-p0 + p2) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t ** 2
                              + (-p0 + 3 * p1 - 3 * p2 + p3) * t ** 3))
    out.append(p[-2])
    return np.array(out)


def _paths(rng: np.random.Generator, W: float, D: float) -> tuple:
    """Main path west -> east with a branch to the north or south edge."""
    ys = rng.uniform(0.3, 0.7, size=4) * D
    main = np.array([[-MARGIN, ys[0]], [W * 0.33, ys[1]], [W * 0.66, ys[2]], [W + MARGIN, ys[3]]])
    main = _smooth_path(main)
    k = int(rng.integers(len(main) // 3, 2 * len(main) // 3))
    start = main[k]
    end_y = -MARGIN if rng.random() < 0.5 else D + MARGIN
    branch = np.array([start, [start[0] + rng.uniform(-6, 6), (start[1] + end_y) / 2], [start[0] + rng.uniform(-8, 8), end_y]])
    branch = _smooth_path(branch)
    out = []
    for line, half in ((main, rng.uniform(0.9, 1.3)), (branch, rng.uniform(0.6, 0.9))):
        out.append((float(np.round(half, 3)), *[float(np.round(v, 3)) for v in line.ravel()]))
    return tuple(out)


def _scatter(rng, lo, hi, count, min_dist, ok, existing: list) -> list:
    """Dart throwing: up to ``count`` points in the box lo..hi at least ``min_dist`` apart."""
    out = []
    for _ in range(count * 30):
        if len(out) >= count:
            break
        p = rng.uniform(lo, hi)
        if not ok(p):
            continue
        if any(np.hypot(*(p - q)) < min_dist for q in existing + out):
            continue
        out.append(p)
    return out


def make_vegetation(rng: np.random.Generator) -> Layout:
    b = SceneBuilder()
    W, D = float(rng.uniform(34.0, 42.0)), float(rng.uniform(26.0, 32.0))
    paths = _paths(rng, W, D)
    ground = b.material("ground", paths=paths)
    hidden = ("-z", "+x", "-x", "+y", "-y")
    b.box((0, 0, -0.3), (W, D, 0.0), ground, skip=hidden)
    m = MARGIN
    for lo, hi in (((-m, -m), (W + m, 0.0)), ((-m, D), (W + m, D + m)), ((-m, 0.0), (0.0, D)), ((W, 0.0), (W + m, D))):
        b.box((*lo, -0.3), (*hi, 0.0), ground, skip=hidden, detail=0.35)

    def path_gap(p, need):
        return path_distance(np.asarray(p, dtype=float)[None], paths)[0] > need

    trees = _scatter(rng, (1.5, 1.5), (W - 1.5, D - 1.5), int(W * D / 45), 4.5,
                     lambda p: path_gap(p, 1.2), [])
    for p in trees:
        props.tree(b, *p, rng, base=rng.uniform(2.9, 4.0), conifer=rng.random() < 0.25, size=rng.uniform(0.85, 1.15))
    # The forest edge: a ring of trees outside the park, off the path exits.
    ring = []
    for _ in range(int(2 * (W + D) / 4.0)):
        side = rng.integers(4)
        t = rng.uniform(0, 1)
        d = rng.uniform(2.0, MARGIN - 1.5)
        p = [np.array([t * W, -d]), np.array([t * W, D + d]), np.array([-d, t * D]), np.array([W + d, t * D])][side]
        if path_gap(p, 1.5) and all(np.hypot(*(p - q)) > 3.5 for q in ring):
            ring.append(p)
    for p in ring:
        props.tree(b, *p, rng, base=rng.uniform(1.8, 2.8), conifer=rng.random() < 0.4, size=rng.uniform(1.0, 1.3),
                   detail=0.35)
    bushes = _scatter(rng, (-MARGIN + 1, -MARGIN + 1), (W + MARGIN - 1, D + MARGIN - 1), int(W * D / 50), 2.0,
                      lambda p: path_gap(p, 1.4), trees + ring)
    for p in bushes:
        props.bush(b, *p, rng)
    rocks = _scatter(rng, (1.0, 1.0), (W - 1.0, D - 1.0), int(rng.integers(5, 11)), 2.0,
                     lambda p: path_gap(p, 1.2), trees + bushes)
    for p in rocks:
        props.rock(b, *p, rng)
    # A couple of benches facing the main path.
    main = np.asarray(paths[0][1:]).reshape(-1, 2)
    half = paths[0][0]
    for k in rng.choice(np.arange(4, len(main) - 4), size=2, replace=False):
        a, c = main[k], main[k + 1]
        tangent = (c - a) / np.linalg.norm(c - a)
        normal = np.array([-tangent[1], tangent[0]])
        spot = a + normal * (half + 0.9)
        if 1.0 < spot[0] < W - 1.0 and 1.0 < spot[1] < D - 1.0:
            props.bench(b, *spot, float(np.arctan2(-normal[1], -normal[0])))
    polygon = np.array([[0.0, 0.0], [W, 0.0], [W, D], [0.0, D]])
    return Layout(b, polygon, 1.0, 4.0, Lighting(sun=sun_direction(rng)))
