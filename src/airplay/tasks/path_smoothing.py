"""Path smoothing for the expert: line-of-sight shortcutting and corner rounding against the SDF.

All points are in map (ENU) metres. A sampled curve is *clear* (:class:`ClearanceCheck`) when the
signed distance to the mesh stays at or above a required value and the curve stays inside the
navigable region (polygon and height band) by the grid's boundary margin.

1. :func:`shortcut`: from each anchor the path jumps to the farthest following point whose
   straight segment keeps the clearance the original path had there (capped at the preferred
   clearance).
2. :func:`round_corners`: each corner of the shortcut polyline becomes a quadratic Bezier with
   legs of up to ``cut_max_m``, halved until the curve passes the same check.
3. :func:`resample`: points every ``ds`` metres of arc length.

The checks are compiled with numba and give the answers of the numpy version bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from airplay.sim.collision import inside_polygon_xy
from airplay.sim.sdf import trilinear_at
from airplay.tasks.navigable import NavigableGrid, _signed_edge_distance_at

SAMPLE_M = 0.05  # spacing of clearance checks and of the reference's arc-length samples (m)
_TOL_M = 0.02  # shortcuts may come this much closer to walls than the path they replace (m)


def _segment_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = max(2, int(math.ceil(np.linalg.norm(b - a) / SAMPLE_M)) + 1)
    return a + np.linspace(0.0, 1.0, n)[:, None] * (b - a)


@njit(cache=True, inline="always")
def _point_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, x, y, z, required, in_f32):
    """One point of :class:`ClearanceCheck`: SDF.query's float32 value >= required (compared in
    float32 when ``in_f32``, as numpy compares a float32 with a Python float, else in float64),
    inside the height band and the polygon by ``margin`` (NavigableGrid.inside_region)."""
    d = np.float32(trilinear_at(values, origin, inv_res, x, y, z))
    if in_f32:
        if not d >= np.float32(required):
            return False
    elif not np.float64(d) >= required:
        return False
    if not (z >= z_lo and z <= z_hi):
        return False
    if margin <= 0:  # NavigableRegion.contains_xy: even-odd rule
        return inside_polygon_xy(poly, x, y)
    return _signed_edge_distance_at(poly, x, y) >= margin


@njit(cache=True)
def _points_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, points, required, in_f32):
    for k in range(points.shape[0]):
        if not _point_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, points[k, 0], points[k, 1],
                            points[k, 2], required, in_f32):
            return False
    return True


@njit(cache=True)
def _segment_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, a, b, required, in_f32, sample_m):
    """:class:`ClearanceCheck` of ``_segment_points(a, b)``, the points made as np.linspace makes them."""
    dx, dy, dz = b[0] - a[0], b[1] - a[1], b[2] - a[2]
    n = max(2, int(math.ceil(math.sqrt(dx * dx + dy * dy + dz * dz) / sample_m)) + 1)
    step = 1.0 / (n - 1)
    for k in range(n):
        t = 1.0 if k == n - 1 else k * step
        if not _point_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, a[0] + t * dx, a[1] + t * dy,
                            a[2] + t * dz, required, in_f32):
            return False
    return True


@njit(cache=True)
def _shortcut(points, clearance, cap, cap_f32, tol, values, origin, inv_res, poly, z_lo, z_hi, margin, sample_m):
    """:func:`shortcut` with a :class:`ClearanceCheck`, compiled (Python's min and the float32 /
    float64 comparison of the required clearance kept)."""
    k = points.shape[0]
    keep = np.empty(max(k, 1), dtype=np.int64)
    keep[0] = 0
    count = 1
    i = 0
    while i < k - 1:
        best = i + 1
        lo = clearance[i]
        if clearance[i + 1] < lo:
            lo = clearance[i + 1]
        for j in range(i + 2, k):
            if clearance[j] < lo:
                lo = clearance[j]
            if lo < cap:  # min(cap_m, lo) is lo, a numpy float64
                required, in_f32 = lo - tol, False
            else:
                required, in_f32 = cap - tol, cap_f32
            if _segment_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, points[i], points[j], required,
                              in_f32, sample_m):
                best = j
            else:
                break
        keep[count] = best
        count += 1
        i = best
    return keep[:count]


def _compares_in_float32(value) -> bool | None:
    """How numpy compares a float32 array's minimum with ``value``: True (in float32: a Python
    float, NEP 50, or a float32), False (in float64: a float64), None (anything else)."""
    if type(value) is float or isinstance(value, (np.float32, np.float16)):
        return True
    if isinstance(value, np.float64):
        return False
    return None


class ClearanceCheck:
    """Is a sampled curve clear: signed distance >= a required value and inside the
    navigable region (polygon and height band) by the grid's boundary margin?

    Compiled for a :class:`~airplay.sim.sdf.SignedDistanceField` and a
    :class:`~airplay.tasks.navigable.NavigableGrid` (the answers of the numpy version,
    :meth:`check_numpy`, bit for bit); other kinds of ``sdf`` / ``grid`` use that version.
    """

    def __init__(self, sdf, grid: NavigableGrid):
        self.sdf, self.grid = sdf, grid

    def _compiled_args(self) -> tuple | None:
        """Arguments of the compiled checks (None: not the expected sdf / grid types)."""
        from airplay.sim.sdf import SignedDistanceField

        sdf, grid = self.sdf, self.grid
        if type(sdf) is not SignedDistanceField or type(grid) is not NavigableGrid \
                or np.asarray(grid.region.polygon).dtype != np.float64:
            return None  # (contains_xy computes in the polygon's own dtype)
        m = grid.boundary_margin_m
        return (sdf.values, sdf.origin_m.astype(np.float64), 1.0 / sdf.resolution_m,
                np.ascontiguousarray(grid.region.polygon, dtype=np.float64), float(grid.region.z_min + m),
                float(grid.region.z_max - m), float(m))

    def check_numpy(self, points: np.ndarray, required_m: float) -> bool:
        """The check in numpy (the reference of the compiled one)."""
        if not bool(np.min(self.sdf.query(points)) >= required_m):
            return False
        return bool(self.grid.inside_region(points).all())

    def __call__(self, points: np.ndarray, required_m: float) -> bool:
        pts = np.ascontiguousarray(np.atleast_2d(points), dtype=np.float64)
        in_f32 = _compares_in_float32(required_m)
        args = self._compiled_args() if in_f32 is not None and len(pts) and pts.shape[1] == 3 else None
        if args is None:
            return self.check_numpy(points, required_m)
        return bool(_points_clear(*args, pts, float(required_m), in_f32))


def shortcut(points: np.ndarray, clearance: np.ndarray, check: ClearanceCheck, cap_m: float) -> list[int]:
    """Indices of the waypoints kept by greedy line-of-sight shortcutting of ``points`` (K, 3),
    given the clearance (K,) at each point: a segment i->j must keep
    ``min(cap_m, min(clearance[i..j])) - tol``.

    Compiled for a :class:`ClearanceCheck` on float64 ``points`` and ``clearance``, with the
    same answer as the Python loop, which any other ``check`` gets."""
    cap_f32 = _compares_in_float32(cap_m)
    if (type(check) is ClearanceCheck and cap_f32 is not None and isinstance(points, np.ndarray)
            and points.dtype == np.float64 and points.ndim == 2 and points.shape[1] == 3
            and isinstance(clearance, np.ndarray) and clearance.dtype == np.float64
            and clearance.shape == (len(points),)):
        args = check._compiled_args()
        if args is not None:
            keep = _shortcut(np.ascontiguousarray(points), np.ascontiguousarray(clearance), float(cap_m), cap_f32,
                             _TOL_M, *args, SAMPLE_M)
            return keep.tolist()
    keep = [0]
    i, k = 0, len(points)
    while i < k - 1:
        best = i + 1
        lo = clearance[i]
        lo = min(lo, clearance[i + 1])
        for j in range(i + 2, k):
            lo = min(lo, clearance[j])
            if check(_segment_points(points[i], points[j]), min(cap_m, lo) - _TOL_M):
                best = j
            else:
                break
        keep.append(best)
        i = best
    return keep


def _bezier(a: np.ndarray, c: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    t = np.linspace(0.0, 1.0, n)[:, None]
    return (1 - t) ** 2 * a + 2 * t * (1 - t) * c + t ** 2 * b


def round_corners(waypoints: np.ndarray, check: ClearanceCheck, cap_m: float, cut_max_m: float) -> np.ndarray:
    """Dense polyline (M, 3) through ``waypoints`` (W, 3) with each corner replaced by a
    quadratic Bezier whose legs (<= cut_max_m, <= 45 % of each adjacent segment) are halved
    until the curve keeps the clearance of the corner it replaces (capped at ``cap_m``)."""
    w = np.asarray(waypoints, dtype=np.float64)
    if len(w) < 3:
        return np.concatenate([_segment_points(w[0], w[-1])]) if len(w) == 2 else w.copy()
    pieces = []
    prev_end = w[0]
    for i in range(1, len(w) - 1):
        u1, u2 = w[i] - w[i - 1], w[i + 1] - w[i]
        l1, l2 = np.linalg.norm(u1), np.linalg.norm(u2)
        u1, u2 = u1 / l1, u2 / l2
        d = min(cut_max_m, 0.45 * l1, 0.45 * l2)
        corner = np.concatenate([_segment_points(w[i] - d * u1, w[i]), _segment_points(w[i], w[i] + d * u2)])
        required = min(cap_m, float(np.min(check.sdf.query(corner)))) - _TOL_M
        curve = None
        if float(np.dot(u1, u2)) < 1.0 - 1e-9:
            for _ in range(6):
                a, b = w[i] - d * u1, w[i] + d * u2
                cand = _bezier(a, w[i], b, max(3, int(math.ceil(2 * d / SAMPLE_M)) + 1))
                if check(cand, required):
                    curve = cand
                    break
                d *= 0.5
        if curve is None:
            curve = w[i:i + 1]
        pieces.append(_segment_points(prev_end, curve[0]))
        pieces.append(curve)
        prev_end = curve[-1]
    pieces.append(_segment_points(prev_end, w[-1]))
    dense = np.concatenate(pieces)
    step = np.linalg.norm(np.diff(dense, axis=0), axis=1)
    return dense[np.r_[True, step > 1e-9]]


def resample(polyline: np.ndarray, ds: float) -> tuple[np.ndarray, np.ndarray]:
    """Points (N, 3) every ``ds`` metres of arc length along ``polyline`` (end included) and
    their arc lengths (N,)."""
    seg = np.linalg.norm(np.diff(polyline, axis=0), axis=1)
    s = np.r_[0.0, np.cumsum(seg)]
    total = float(s[-1])
    if total < 1e-9:
        return polyline[:1].copy(), np.zeros(1)
    n = max(2, int(math.ceil(total / ds)) + 1)
    si = np.linspace(0.0, total, n)
    return np.column_stack([np.interp(si, s, polyline[:, k]) for k in range(3)]), si

