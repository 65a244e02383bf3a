"""Geofence geometry for the safety supervisor: a horizontal polygon (map x/y) and/or an
altitude band (map z), in metres, with point containment, the fence parts (edges, ceiling,
floor) with their distance and outward direction from a point, and the nearest point at
least a stand-off inside the fence."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


def signed_area(poly: np.ndarray) -> float:
    """Shoelace area of a polygon (M, 2), positive when counter-clockwise."""
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


class FencePart(NamedTuple):
    """One part of the fence as seen from a point inside it.

    ``distance_m``: metres from the point to the nearest point of the part (for an edge, of
    the edge segment; for the ceiling/floor, the vertical distance). ``direction``: (3,) map
    ENU unit vector from the point towards that nearest point, i.e. the part's outward normal
    where the nearest point is inside the edge (towards the vertex near a vertex); the rate at
    which the distance shrinks is ``velocity . direction``. ``vertical``: ceiling or floor.
    ``name``: a description for intervention reasons."""

    distance_m: float
    direction: np.ndarray
    vertical: bool
    name: str


class Geofence:
    """Horizontal polygon (map x/y, CCW) and/or altitude band (map z), with distances and the
    outward normals of the boundary parts near a point."""

    def __init__(self, vertices_ccw: np.ndarray | None, z_min_m: float | None, z_max_m: float | None) -> None:
        """vertices_ccw: (M, 2) map x/y metres, counter-clockwise, or None (band only);
        z_min_m / z_max_m: altitude band (map z, metres), None where unbounded."""
        self.vertices = vertices_ccw
        self.z_min_m, self.z_max_m = z_min_m, z_max_m

    def contains(self, position_enu: np.ndarray) -> bool:
        x, y, z = (float(v) for v in position_enu)
        if self.z_min_m is not None and z < self.z_min_m:
            return False
        if self.z_max_m is not None and z > self.z_max_m:
            return False
        if self.vertices is None:
            return True
        return self._inside_xy(x, y) or min((e[1] for e in self._edges(x, y)), default=math.inf) < 1e-9

    def _inside_xy(self, x: float, y: float) -> bool:
        inside = False  # even-odd ray casting; boundary points count as inside via the distance test
        v = self.vertices
        for i in range(len(v)):
            (x0, y0), (x1, y1) = v[i], v[(i + 1) % len(v)]
            if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
                inside = not inside
        return inside

    def _edges(self, x: float, y: float):
        """(index, distance m, outward unit normal (2,), nearest point (2,)) of every polygon edge
        (from vertex ``index`` to the next; zero-length edges skipped) from (x, y)."""
        v = self.vertices
        for i in range(len(v)):
            a, b = v[i], v[(i + 1) % len(v)]
            ab = b - a
            length = float(np.hypot(*ab))
            if length < 1e-12:
                continue
            t = min(1.0, max(0.0, float(np.dot([x, y] - a, ab)) / (length * length)))
            c = a + t * ab
            d = float(np.hypot(*(c - [x, y])))
            yield i, d, np.array([ab[1], -ab[0]]) / length, c  # CCW polygon: right of the edge is outside

    def near_normals(self, position_enu: np.ndarray, margin_m: float) -> tuple[list[np.ndarray], list[str]]:
        """Outward unit normals (3,) ENU of the fence parts within ``margin_m`` of the position,
        with a description of each (for intervention reasons)."""
        x, y, z = (float(v) for v in position_enu)
        normals, names = [], []
        if self.vertices is not None:
            for i, d, n, _ in self._edges(x, y):
                if d < margin_m:
                    normals.append(np.array([n[0], n[1], 0.0]))
                    names.append(f"edge {i} at {d:.2f} m")
        if self.z_max_m is not None and self.z_max_m - z < margin_m:
            normals.append(np.array([0.0, 0.0, 1.0]))
            names.append(f"ceiling z_max {self.z_max_m:.2f} m at {self.z_max_m - z:.2f} m")
        if self.z_min_m is not None and z - self.z_min_m < margin_m:
            normals.append(np.array([0.0, 0.0, -1.0]))
            names.append(f"floor z_min {self.z_min_m:.2f} m at {z - self.z_min_m:.2f} m")
        return normals, names

    def parts(self, position_enu: np.ndarray) -> list[FencePart]:
        """Every fence part (each polygon edge, the ceiling, the floor) seen from a position
        (3,) map ENU metres inside the fence: distance and outward direction (see :class:`FencePart`)."""
        x, y, z = (float(v) for v in position_enu)
        out = []
        if self.vertices is not None:
            for i, d, n, c in self._edges(x, y):
                w = (c - [x, y]) / d if d > 1e-9 else n
                out.append(FencePart(d, np.array([w[0], w[1], 0.0]), False, f"edge {i}"))
        if self.z_max_m is not None:
            out.append(FencePart(self.z_max_m - z, np.array([0.0, 0.0, 1.0]), True,
                                 f"ceiling z_max {self.z_max_m:.2f} m"))
        if self.z_min_m is not None:
            out.append(FencePart(z - self.z_min_m, np.array([0.0, 0.0, -1.0]), True,
                                 f"floor z_min {self.z_min_m:.2f} m"))
        return out

    def _signed_distance_xy(self, q: np.ndarray) -> tuple[float, np.ndarray]:
        """Signed distance (m, positive inside) of map point q (2,) to the polygon, and the unit
        direction (2,) in which it grows fastest (inwards)."""
        x, y = float(q[0]), float(q[1])
        _, d, n, c = min(self._edges(x, y), key=lambda e: e[1])
        sign = 1.0 if self._inside_xy(x, y) else -1.0
        if d < 1e-9:
            return 0.0, -n
        return sign * d, sign * (q - c) / d

    def inset(self, position_enu: np.ndarray, margin_m: float) -> np.ndarray:
        """The nearest point (3,) map ENU metres to ``position_enu`` that is at least ``margin_m``
        inside the fence: the position itself when it already is.

        Altitude: z clamped to ``[z_min + margin, z_max - margin]`` (the band's middle when it is
        thinner than two margins). Polygon: steps along the signed-distance gradient until the
        point is ``margin_m`` inside (exact for convex polygons, boxes included); where the
        polygon is too narrow for the margin, the most-inside point the steps reached."""
        p = np.asarray(position_enu, dtype=np.float64).reshape(3).copy()
        lo = -math.inf if self.z_min_m is None else self.z_min_m + margin_m
        hi = math.inf if self.z_max_m is None else self.z_max_m - margin_m
        p[2] = 0.5 * (self.z_min_m + self.z_max_m) if lo > hi else min(max(p[2], lo), hi)
        if self.vertices is None:
            return p
        q = p[:2].copy()
        best, best_sd = q.copy(), -math.inf
        for _ in range(64):
            sd, grad = self._signed_distance_xy(q)
            if sd > best_sd:
                best, best_sd = q.copy(), sd
            if sd >= margin_m - 1e-9:
                break
            q = q + (margin_m - sd + 1e-9) * grad
        p[:2] = best
        return p
