"""Navigable space on the planning grid: where the vehicle's centre may be.

A cell is free when its centre (map frame ENU, metres) lies inside the navigable polygon
(x, y) and inside the flight height band (z), both by at least ``boundary_margin_m``, and
the signed distance to the collision mesh there exceeds the clearance (vehicle radius +
``clearance_margin_m`` of the protocol). The boundary margin (the protocol's
``clearance_margin_m`` too, by default) keeps paths and endpoints off the exact edge of the
region, where a centimetre of tracking error would end an episode out of bounds.

The grid covers the polygon's bounding box and the height band: cell (i, j, k) has its
centre at ``origin_m + resolution_m * (i, j, k)``. When the SDF has the planning
resolution, the grid's cells are the SDF's own voxels (no resampling); otherwise the SDF
is queried (trilinear) at the cell centres.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from airplay.scene.spec import NavigableRegion

_QUERY_CHUNK = 1 << 20


@dataclass(frozen=True)
class NavigableGrid:
    """The planning grid.

    free: (nx, ny, nz) bool, True where the vehicle's centre may be.
    distance_m: (nx, ny, nz) float32, signed distance to the collision mesh at cell centres, m.
    origin_m: (3,) map coordinates of the centre of cell (0, 0, 0), m.
    resolution_m: cell edge, m.
    clearance_m: the distance a free cell keeps from the mesh, m.
    region: the scene's navigable polygon and height band.
    boundary_margin_m: the distance a free cell keeps inside the region's boundary, m.
    """

    free: np.ndarray
    distance_m: np.ndarray
    origin_m: np.ndarray
    resolution_m: float
    clearance_m: float
    region: NavigableRegion
    boundary_margin_m: float = 0.0

    # -- construction ------------------------------------------------------------------
    @classmethod
    def build(cls, region: NavigableRegion, sdf, resolution_m: float, clearance_m: float,
              boundary_margin_m: float = 0.0) -> "NavigableGrid":
        """Grid over ``region`` from ``sdf`` (a :class:`airplay.sim.sdf.SignedDistanceField`)."""
        if not resolution_m > 0:
            raise ValueError(f"resolution_m must be positive, got {resolution_m}")
        res = float(resolution_m)
        lo = np.r_[region.polygon.min(axis=0), region.z_min]
        hi = np.r_[region.polygon.max(axis=0), region.z_max]
        sdf_origin = np.asarray(sdf.origin_m, dtype=np.float64)
        same = abs(float(sdf.resolution_m) - res) <= 1e-9 * res
        if same:
            # cells = the SDF's voxels whose centres lie within [lo, hi]
            first = np.ceil((lo - sdf_origin) / res - 1e-6).astype(np.int64)
            last = np.floor((hi - sdf_origin) / res + 1e-6).astype(np.int64)
            origin = sdf_origin + first * res
            counts = last - first + 1
        else:
            # cells of edge res centred in the box, as many as fit (at least one)
            counts = np.maximum(1, np.floor((hi - lo) / res + 1e-6)).astype(np.int64)
            origin = 0.5 * (lo + hi) - 0.5 * (counts - 1) * res
        shape = tuple(int(v) for v in counts)
        if min(shape) < 1:
            raise ValueError(f"navigable region {lo.tolist()}..{hi.tolist()} holds no grid cell at {res} m")
        vals = np.asarray(sdf.values)
        inside_sdf = same and np.all(first >= 0) and np.all(last < np.array(vals.shape))
        if inside_sdf:
            dist = np.ascontiguousarray(vals[first[0]:last[0] + 1, first[1]:last[1] + 1, first[2]:last[2] + 1],
                                        dtype=np.float32)
        else:
            dist = _query_grid(sdf, origin, res, shape)
        axes = [origin[a] + res * np.arange(shape[a]) for a in range(2)]
        xy = np.stack(np.meshgrid(axes[0], axes[1], indexing="ij"), axis=-1).reshape(-1, 2)
        in_poly = inside_polygon(region, xy, boundary_margin_m).reshape(shape[0], shape[1])
        z = origin[2] + res * np.arange(shape[2])
        in_band = (z >= region.z_min + boundary_margin_m) & (z <= region.z_max - boundary_margin_m)
        free = in_poly[:, :, None] & in_band[None, None, :] & (dist > clearance_m)
        return cls(free=free, distance_m=dist, origin_m=origin, resolution_m=res,
                   clearance_m=float(clearance_m), region=region, boundary_margin_m=float(boundary_margin_m))

    @classmethod
    def for_scene(cls, scene, sdf, settings=None, vehicle_radius_m: float | None = None) -> "NavigableGrid":
        """Grid of a :class:`~airplay.scene.scene.Scene` with protocol task settings.

        settings: :class:`~airplay.tasks.protocol.TaskSettings` (default: protocol.yaml's).
        vehicle_radius_m: collision sphere radius (default: config/vehicle.yaml's).
        """
        from airplay.tasks.protocol import load_protocol

        settings = settings if settings is not None else load_protocol().task
        if vehicle_radius_m is None:
            from airplay.sim.dynamics import load_vehicle_params

            vehicle_radius_m = load_vehicle_params().radius_m
        return cls.build(scene.spec.navigable, sdf, settings.grid_resolution_m, settings.clearance_m(vehicle_radius_m),
                         boundary_margin_m=settings.clearance_margin_m)

    # -- geometry ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int, int]:
        return self.free.shape

    def to_cell(self, points: np.ndarray) -> np.ndarray:
        """Nearest cell (K, 3) int64 of map points (K, 3); may lie outside the grid."""
        p = np.asarray(points, dtype=np.float64)
        return np.rint((p - self.origin_m) / self.resolution_m).astype(np.int64)

    def to_world(self, cells: np.ndarray) -> np.ndarray:
        """Map coordinates (K, 3) of the centres of cells (K, 3), metres."""
        return self.origin_m + self.resolution_m * np.asarray(cells, dtype=np.float64)

    def in_grid(self, cells: np.ndarray) -> np.ndarray:
        """Boolean (K,): the cells (K, 3) are inside the grid's index range."""
        c = np.atleast_2d(cells)
        return np.all((c >= 0) & (c < np.array(self.shape)), axis=1)

    def inside_region(self, points: np.ndarray) -> np.ndarray:
        """Boolean (K,): map points (K, 3) inside the region by at least the boundary margin."""
        p = np.atleast_2d(np.asarray(points, dtype=np.float64))
        m = self.boundary_margin_m
        band = (p[:, 2] >= self.region.z_min + m) & (p[:, 2] <= self.region.z_max - m)
        out = np.zeros(len(p), dtype=bool)
        if band.any():
            out[band] = inside_polygon(self.region, p[band, :2], m)
        return out

    def is_free(self, points: np.ndarray) -> np.ndarray:
        """Boolean (K,): map points (K, 3) fall in a free cell (nearest-cell lookup)."""
        c = np.atleast_2d(self.to_cell(points))
        ok = self.in_grid(c)
        out = np.zeros(len(c), dtype=bool)
        out[ok] = self.free[c[ok, 0], c[ok, 1], c[ok, 2]]
        return out

    def nearest_free(self, point: np.ndarray, max_radius_m: float = 2.0) -> np.ndarray | None:
        """The free cell (3,) nearest (Euclidean, centre to point) to a map point, or None
        when no free cell lies within ``max_radius_m``."""
        p = np.asarray(point, dtype=np.float64)
        centre = self.to_cell(p)
        r = int(np.ceil(max_radius_m / self.resolution_m))
        lo = np.maximum(centre - r, 0)
        hi = np.minimum(centre + r + 1, np.array(self.shape))
        if np.any(hi <= lo):
            return None
        block = self.free[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
        idx = np.argwhere(block)
        if len(idx) == 0:
            return None
        cells = idx + lo
        d = np.linalg.norm(self.to_world(cells) - p, axis=1)
        best = int(np.argmin(d))  # argmin: the first in C order among ties (deterministic)
        if d[best] > max_radius_m:
            return None
        return cells[best]

    def slice_at(self, z: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Top-down free mask at map height ``z`` (nearest layer, clamped to the grid):
        (mask (nx, ny) bool indexed [x, y], origin_xy (2,) = centre of cell (0, 0), resolution m).

        For ``imshow`` use ``mask.T`` with ``origin='lower'``.
        """
        k = int(np.clip(np.rint((z - self.origin_m[2]) / self.resolution_m), 0, self.shape[2] - 1))
        return self.free[:, :, k].copy(), self.origin_m[:2].copy(), self.resolution_m


@numba.njit(cache=True, inline="always")
def _signed_edge_distance_at(polygon, px, py):
    """Distance from (px, py) to the polygon's boundary, positive inside (even-odd)."""
    m = polygon.shape[0]
    best = np.inf
    inside = False
    for i in range(m):
        x0, y0 = polygon[i, 0], polygon[i, 1]
        x1, y1 = polygon[(i + 1) % m, 0], polygon[(i + 1) % m, 1]
        if (y0 > py) != (y1 > py):
            if px < x0 + (py - y0) * (x1 - x0) / (y1 - y0):
                inside = not inside
        ex, ey = x1 - x0, y1 - y0
        ee = ex * ex + ey * ey
        t = ((px - x0) * ex + (py - y0) * ey) / ee if ee > 0 else 0.0
        t = min(max(t, 0.0), 1.0)
        dx, dy = px - (x0 + t * ex), py - (y0 + t * ey)
        best = min(best, dx * dx + dy * dy)
    return np.sqrt(best) if inside else -np.sqrt(best)


@numba.njit(cache=True)
def _signed_edge_distance(polygon, xy, out):
    """out[k] = distance from xy[k] to the polygon's boundary, positive inside (even-odd)."""
    for k in range(xy.shape[0]):
        out[k] = _signed_edge_distance_at(polygon, xy[k, 0], xy[k, 1])


def polygon_signed_distance(polygon: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """(K,) distance (m) from points (K, 2) to a closed polygon's (M, 2) boundary, positive
    inside, negative outside (even-odd rule, as :meth:`NavigableRegion.contains_xy`)."""
    pts = np.ascontiguousarray(np.atleast_2d(xy), dtype=np.float64)
    out = np.empty(len(pts), dtype=np.float64)
    _signed_edge_distance(np.ascontiguousarray(polygon, dtype=np.float64), pts, out)
    return out


def inside_polygon(region: NavigableRegion, xy: np.ndarray, margin_m: float = 0.0) -> np.ndarray:
    """Boolean (K,): points (K, 2) inside the region's polygon, at least ``margin_m`` from its edges."""
    if margin_m <= 0:
        return region.contains_xy(xy)
    return polygon_signed_distance(region.polygon, xy) >= margin_m


def _query_grid(sdf, origin: np.ndarray, res: float, shape: tuple[int, int, int]) -> np.ndarray:
    """SDF (trilinear) at every cell centre of a grid, float32 (nx, ny, nz)."""
    axes = [origin[a] + res * np.arange(shape[a]) for a in range(3)]
    out = np.empty(shape, dtype=np.float32)
    plane = shape[1] * shape[2]
    yz = np.stack(np.meshgrid(axes[1], axes[2], indexing="ij"), axis=-1).reshape(-1, 2)
    rows = max(1, _QUERY_CHUNK // plane)
    for i0 in range(0, shape[0], rows):
        xs = axes[0][i0:i0 + rows]
        pts = np.column_stack([np.repeat(xs, plane), np.tile(yz, (len(xs), 1))])
        out[i0:i0 + len(xs)] = np.asarray(sdf.query(pts), dtype=np.float32).reshape(len(xs), shape[1], shape[2])
    return out
