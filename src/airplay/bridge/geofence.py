"""Geofence geometry for the safety supervisor: a horizontal polygon (map x/y) and/or an
altitude band (map z), in metres, with point containment and the outward normals of the
boundary parts near a point."""

from __future__ import annotations

import math

import numpy as np


def signed_area(poly: np.ndarray) -> float:
    """Shoelace area of a polygon (M, 2), positive when counter-clockwise."""
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


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
        inside = False  # even-odd ray casting; boundary points count as inside via the distance test
        v = self.vertices
        for i in range(len(v)):
            (x0, y0), (x1, y1) = v[i], v[(i + 1) % len(v)]
            if (y0 > y) != (y1 > y) and x < x0 + (y - y0) * (x1 - x0) / (y1 - y0):
                inside = not inside
        return inside or min((d for d, _ in self._edges(x, y)), default=math.inf) < 1e-9

    def _edges(self, x: float, y: float):
        """(distance m, outward unit normal (2,)) of every polygon edge from point (x, y)."""
        v = self.vertices
        for i in range(len(v)):
            a, b = v[i], v[(i + 1) % len(v)]
            ab = b - a
            length = float(np.hypot(*ab))
            t = min(1.0, max(0.0, float(np.dot([x, y] - a, ab)) / (length * length)))
            d = float(np.hypot(*(a + t * ab - [x, y])))
            yield d, np.array([ab[1], -ab[0]]) / length  # CCW polygon: right of the edge is outside

    def near_normals(self, position_enu: np.ndarray, margin_m: float) -> tuple[list[np.ndarray], list[str]]:
        """Outward unit normals (3,) ENU of the fence parts within ``margin_m`` of the position,
        with a description of each (for intervention reasons)."""
        x, y, z = (float(v) for v in position_enu)
        normals, names = [], []
        if self.vertices is not None:
            for i, (d, n) in enumerate(self._edges(x, y)):
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
