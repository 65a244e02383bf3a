"""Navigable-grid test worlds: exact SDFs of axis-aligned boxes on a voxel grid, a 10 x 8 m room
(``REGION``) with a floor, a pillar and a wall with a door, and :func:`make_grid` building the
navigable grid over them (test_tasks, test_expert, test_field_expert)."""

from __future__ import annotations

import numpy as np

from airplay.scene.spec import NavigableRegion
from airplay.sim.sdf import SignedDistanceField
from airplay.tasks.navigable import NavigableGrid

RES = 0.1


def box_sdf(points: np.ndarray, lo, hi) -> np.ndarray:
    """Exact signed distance to an axis-aligned box [lo, hi] (negative inside)."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    c, h = (lo + hi) / 2, (hi - lo) / 2
    q = np.abs(points - c) - h
    return np.linalg.norm(np.maximum(q, 0.0), axis=-1) + np.minimum(q.max(axis=-1), 0.0)


def boxes_sdf(boxes, lower, upper, res=RES) -> SignedDistanceField:
    """SDF of a union of boxes sampled on a grid whose voxel (0,0,0) centre is ``lower``."""
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    n = np.ceil((upper - lower) / res).astype(int) + 1
    axes = [lower[a] + res * np.arange(n[a]) for a in range(3)]
    pts = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
    values = np.full(tuple(n), np.inf)
    for lo, hi in boxes:
        values = np.minimum(values, box_sdf(pts, lo, hi))
    return SignedDistanceField(lower, res, values.astype(np.float32))


SQUARE = np.array([[0.0, 0.0], [10.0, 0.0], [10.0, 8.0], [0.0, 8.0]])
REGION = NavigableRegion(SQUARE, 0.5, 2.5)
FLOOR = ((-2, -2, -1), (12, 10, 0))
PILLAR = ((4, 2, 0), (5, 6, 4))
# a wall across the room at x in [6, 6.4], closed except a 1 m door at y in [6.5, 7.5], z < 2
WALL = [((6, -2, 0), (6.4, 6.5, 4)), ((6, 7.5, 0), (6.4, 10, 4)), ((6, 6.5, 2.0), (6.4, 7.5, 4))]


def make_grid(boxes, region=REGION, clearance=0.3, margin=0.05, res=RES) -> tuple[NavigableGrid, SignedDistanceField]:
    lo = np.r_[region.polygon.min(0) - 1, region.z_min - 1]
    hi = np.r_[region.polygon.max(0) + 1, region.z_max + 1]
    sdf = boxes_sdf(boxes, lo, hi, RES)
    return NavigableGrid.build(region, sdf, res, clearance, boundary_margin_m=margin), sdf

