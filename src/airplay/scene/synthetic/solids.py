"""Analytic tests on the solids of a :class:`~.builder.SceneBuilder`.

``inside`` hides surface samples buried in other solids and measures free space;
``sun_visibility`` casts shadow rays (compiled with numba; exact for boxes, cylinders
and ellipsoids, with an axis-aligned bounding-box early-out).
"""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.builder import BOX, CYLINDER

try:  # numba is a core dependency of airplay (the CPU renderer); keep a slow path anyway
    from numba import njit
except ImportError:  # pragma: no cover
    def njit(*args, **kwargs):
        return (lambda f: f) if not args or not callable(args[0]) else args[0]


def _local(points: np.ndarray, center: np.ndarray, yaw: float) -> np.ndarray:
    d = points - center
    c, s = np.cos(yaw), np.sin(yaw)
    return np.column_stack([c * d[:, 0] + s * d[:, 1], -s * d[:, 0] + c * d[:, 1], d[:, 2]])


def inside(points: np.ndarray, kind: int, center: np.ndarray, half: np.ndarray, yaw: float,
           inflate: float = 0.0) -> np.ndarray:
    """Boolean (N,): points strictly inside one solid grown by ``inflate`` metres."""
    d = _local(points, center, yaw)
    h = half + inflate
    if kind == BOX:
        return (np.abs(d) < h).all(axis=1)
    if kind == CYLINDER:
        return (d[:, 0] ** 2 + d[:, 1] ** 2 < h[0] ** 2) & (np.abs(d[:, 2]) < h[2])
    return ((d / h) ** 2).sum(axis=1) < 1.0


def inside_any(points: np.ndarray, solids: dict[str, np.ndarray], inflate: float = 0.0) -> np.ndarray:
    """Boolean (N,): points inside any solid grown by ``inflate`` metres."""
    out = np.zeros(len(points), dtype=bool)
    lo, hi = solids["aabb_lo"] - inflate, solids["aabb_hi"] + inflate
    for j in range(len(solids["kind"])):
        near = np.flatnonzero(~out & (points >= lo[j]).all(axis=1) & (points <= hi[j]).all(axis=1))
        if len(near):
            out[near] = inside(points[near], solids["kind"][j], solids["center"][j],
                               solids["half"][j], solids["yaw"][j], inflate)
    return out


def hidden_samples(points: np.ndarray, normals: np.ndarray, parts: np.ndarray,
                   solids: dict[str, np.ndarray], eps: float = 0.01, ground_z: float = 0.0) -> np.ndarray:
    """Boolean (N,): samples below the ground plane ``ground_z`` (never seen: the ground
    is everywhere the vehicle can look) or whose point nudged ``eps`` along its normal lies
    in another solid."""
    q = points + eps * normals
    hidden = points[:, 2] < ground_z - 0.5 * eps
    order = np.argsort(parts, kind="stable")
    n_parts = len(solids["kind"])
    starts = np.searchsorted(parts[order], np.arange(n_parts + 1))
    part_lo = np.full((n_parts, 3), np.inf)
    part_hi = np.full((n_parts, 3), -np.inf)
    has = starts[1:] > starts[:-1]
    sq = q[order]
    part_lo[has] = np.minimum.reduceat(sq, starts[:-1][has], axis=0)
    part_hi[has] = np.maximum.reduceat(sq, starts[:-1][has], axis=0)
    for j in range(n_parts):
        lo, hi = solids["aabb_lo"][j], solids["aabb_hi"][j]
        cand = np.flatnonzero(has & (part_lo <= hi).all(axis=1) & (part_hi >= lo).all(axis=1))
        cand = cand[cand != j]
        if not len(cand):
            continue
        idx = np.concatenate([order[starts[k]:starts[k + 1]] for k in cand])
        idx = idx[~hidden[idx]]
        hit = inside(q[idx], solids["kind"][j], solids["center"][j], solids["half"][j], solids["yaw"][j])
        hidden[idx[hit]] = True
    return hidden


@njit(cache=True)
def _slab(o, d, h, t0, t1):  # pragma: no cover - compiled
    """Clip [t0, t1] to |o + t d| < h along one axis; returns t0 > t1 when empty."""
    if abs(d) < 1e-12:
        if abs(o) >= h:
            return 1.0, 0.0
        return t0, t1
    ta, tb = (-h - o) / d, (h - o) / d
    if ta > tb:
        ta, tb = tb, ta
    return max(t0, ta), min(t1, tb)


@njit(cache=True)
def _ray_hits(o, d, kind, c, h, yaw, tmax):  # pragma: no cover - compiled
    """Does the ray o + t d, 0 < t < tmax, enter the solid?"""
    cy, sy = np.cos(yaw), np.sin(yaw)
    ox, oy, oz = o[0] - c[0], o[1] - c[1], o[2] - c[2]
    lx, ly, lz = cy * ox + sy * oy, -sy * ox + cy * oy, oz
    dx, dy, dz = cy * d[0] + sy * d[1], -sy * d[0] + cy * d[1], d[2]
    if kind == 0:
        t0, t1 = _slab(lx, dx, h[0], 0.0, tmax)
        t0, t1 = _slab(ly, dy, h[1], t0, t1)
        t0, t1 = _slab(lz, dz, h[2], t0, t1)
        return t0 < t1
    if kind == 1:
        t0, t1 = _slab(lz, dz, h[2], 0.0, tmax)
        if t0 >= t1:
            return False
        qa = dx * dx + dy * dy
        qb = 2.0 * (lx * dx + ly * dy)
        qc = lx * lx + ly * ly - h[0] * h[0]
        if qa < 1e-12:
            return qc < 0.0
        disc = qb * qb - 4.0 * qa * qc
        if disc <= 0.0:
            return False
        sq = np.sqrt(disc)
        return max(t0, (-qb - sq) / (2.0 * qa)) < min(t1, (-qb + sq) / (2.0 * qa))
    px, py, pz = lx / h[0], ly / h[1], lz / h[2]
    ex, ey, ez = dx / h[0], dy / h[1], dz / h[2]
    qa = ex * ex + ey * ey + ez * ez
    qb = 2.0 * (px * ex + py * ey + pz * ez)
    qc = px * px + py * py + pz * pz - 1.0
    disc = qb * qb - 4.0 * qa * qc
    if disc <= 0.0:
        return False
    sq = np.sqrt(disc)
    return (-qb + sq) / (2.0 * qa) > 0.0 and (-qb - sq) / (2.0 * qa) < tmax


@njit(cache=True)
def _visibility(origins, own, d, kinds, centers, halves, yaws, lo, hi, tmax):  # pragma: no cover
    n = origins.shape[0]
    out = np.ones(n)
    inv = np.empty(3)
    for a in range(3):
        inv[a] = 1.0 / d[a] if abs(d[a]) > 1e-12 else 1e30
    for i in range(n):
        o = origins[i]
        for j in range(kinds.shape[0]):
            if j == own[i]:
                continue
            t0, t1 = 0.0, tmax
            for a in range(3):
                ta, tb = (lo[j, a] - o[a]) * inv[a], (hi[j, a] - o[a]) * inv[a]
                if ta > tb:
                    ta, tb = tb, ta
                t0, t1 = max(t0, ta), min(t1, tb)
            if t0 > t1:
                continue
            if _ray_hits(o, d, kinds[j], centers[j], halves[j], yaws[j], tmax):
                out[i] = 0.0
                break
    return out


def sun_visibility(points: np.ndarray, normals: np.ndarray, parts: np.ndarray, sun_dir: np.ndarray,
                   solids: dict[str, np.ndarray], eps: float = 0.02, tmax: float = 200.0) -> np.ndarray:
    """(N,) 1.0 where the sun (unit direction towards it) is visible from a sample, else 0.0.

    A sample's own solid is skipped: every solid is convex, so its self-shadowing is the
    Lambert term n . sun applied by the caller.
    """
    origins = np.ascontiguousarray(points + eps * normals, dtype=np.float64)
    return _visibility(origins, np.ascontiguousarray(parts, dtype=np.int64), np.asarray(sun_dir, dtype=np.float64),
                       solids["kind"], np.ascontiguousarray(solids["center"]), np.ascontiguousarray(solids["half"]),
                       np.ascontiguousarray(solids["yaw"]), np.ascontiguousarray(solids["aabb_lo"]),
                       np.ascontiguousarray(solids["aabb_hi"]), tmax)
