"""The map frame of a bare capture: up axis, floor, yaw and metric scale, found from the splat.

Everything here takes points in the capture's own frame and units ("source") and returns
the similarity ``p_map = scale * R @ p_src + t`` that puts the floor at map z = 0 with z up
(ENU), the capture's centre over the map origin and, optionally, its dominant wall
directions on the map axes. Tolerances are relative to the capture's robust size (the median
distance of its Gaussians from their median point), since source units are unknown.

Up axis: planes are found one after another by RANSAC among high-opacity Gaussians; each
plane, with either sign of its normal, is a ground candidate when at most 10 % of the points
lie below it. Among candidates the one with the largest (inlier share) x (horizontal spread
/ height above it) x (how low the rest of the mass sits) wins: the ground is large, the
scene is wider than tall, and things stand on the floor, not hang from a ceiling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MAX_PLANES = 4
MIN_GROUND_SHARE = 0.04
"""A ground plane holds at least this share of the high-opacity Gaussians."""
MAX_BELOW_SHARE = 0.10
RANSAC_ITERATIONS = 400


class NoGroundError(ValueError):
    """No plane in the capture qualifies as the ground."""


@dataclass(frozen=True)
class Plane:
    """A plane n . p = d in source coordinates (n unit), with its inlier share."""

    normal: np.ndarray
    offset: float
    share: float


@dataclass(frozen=True)
class FrameFit:
    """The found frame: ``p_map = scale * rotation @ p_src + translation``.

    up_src: the up direction in source coordinates (unit).
    ground_share: share of the high-opacity Gaussians on the ground plane.
    yaw_deg: rotation about map z applied to put walls on the axes (0 when not found/asked).
    scale_source: "given", "known-distance", "metres (assumed)" or "auto (assumed ...)".
    """

    scale: float
    rotation: np.ndarray
    translation: np.ndarray
    up_src: np.ndarray
    ground_share: float
    yaw_deg: float
    scale_source: str
    notes: list[str] = field(default_factory=list)

    def apply(self, points: np.ndarray) -> np.ndarray:
        return self.scale * (np.asarray(points, float) @ self.rotation.T) + self.translation


def robust_size(points: np.ndarray) -> tuple[np.ndarray, float]:
    """(median point, median distance to it): the capture's centre and size, source units."""
    centre = np.median(points, axis=0)
    return centre, float(np.median(np.linalg.norm(points - centre, axis=1)))


def _fit_plane(points: np.ndarray) -> tuple[np.ndarray, float]:
    c = points.mean(axis=0)
    _, _, vt = np.linalg.svd(points - c, full_matrices=False)
    n = vt[-1]
    return n, float(n @ c)


def find_planes(points: np.ndarray, tol: float, rng: np.random.Generator, max_planes: int = MAX_PLANES) -> list[Plane]:
    """Up to ``max_planes`` planes, largest first, by sequential RANSAC (inlier distance ``tol``)."""
    planes: list[Plane] = []
    remaining = points
    total = len(points)
    for _ in range(max_planes):
        if len(remaining) < 50:
            break
        idx = rng.integers(0, len(remaining), size=(RANSAC_ITERATIONS, 3))
        a, b, c = remaining[idx[:, 0]], remaining[idx[:, 1]], remaining[idx[:, 2]]
        normals = np.cross(b - a, c - a)
        norms = np.linalg.norm(normals, axis=1)
        ok = norms > 1e-12
        normals, a = normals[ok] / norms[ok, None], a[ok]
        offsets = (normals * a).sum(axis=1)
        sample = remaining[rng.integers(0, len(remaining), size=min(len(remaining), 4000))]
        counts = (np.abs(sample @ normals.T - offsets) < tol).sum(axis=0)
        best = int(np.argmax(counts))
        inl = np.abs(remaining @ normals[best] - offsets[best]) < tol
        if inl.sum() < 3:
            break
        n, d = _fit_plane(remaining[inl])
        inl = np.abs(remaining @ n - d) < tol
        planes.append(Plane(n, d, float(inl.sum()) / total))
        remaining = remaining[~inl]
    return planes


def choose_ground(points: np.ndarray, planes: list[Plane], tol: float) -> tuple[Plane, float]:
    """(ground plane with its normal pointing up, score); :class:`NoGroundError` if none qualifies."""
    best: tuple[float, Plane] | None = None
    for plane in planes:
        if plane.share < MIN_GROUND_SHARE:
            continue
        for sign in (1.0, -1.0):
            n, d = sign * plane.normal, sign * plane.offset
            h = points @ n - d
            if np.mean(h < -3.0 * tol) > MAX_BELOW_SHARE:
                continue
            height = max(float(np.percentile(h, 98)), tol)
            u = np.cross(n, [1.0, 0.0, 0.0] if abs(n[0]) < 0.9 else [0.0, 1.0, 0.0])
            u /= np.linalg.norm(u)
            v = np.cross(n, u)
            spread = 0.5 * sum(float(np.percentile(points @ ax, 98) - np.percentile(points @ ax, 2)) for ax in (u, v))
            off = h[np.abs(h) > tol]
            lowness = 1.5 - (float(np.median(off)) / height if len(off) else 0.5)
            score = plane.share * (spread / height) * lowness
            if best is None or score > best[0]:
                best = (score, Plane(n, d, plane.share))
    if best is None:
        shares = ", ".join(f"{p.share:.1%}" for p in planes) or "none"
        raise NoGroundError(f"no ground plane found: the largest planes hold {shares} of the opaque Gaussians and "
                            "none has the scene above it; the capture may have no floor or ground")
    return best[1], best[0]


def rotation_to_z(up: np.ndarray) -> np.ndarray:
    """The smallest rotation taking the unit vector ``up`` to +z."""
    up = np.asarray(up, float) / np.linalg.norm(up)
    z = np.array([0.0, 0.0, 1.0])
    v = np.cross(up, z)
    s, c = float(np.linalg.norm(v)), float(up @ z)
    if s < 1e-12:
        return np.eye(3) if c > 0 else np.diag([1.0, -1.0, -1.0])
    vx = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + vx + vx @ vx * ((1 - c) / s**2)


def rot_z(yaw_rad: float) -> np.ndarray:
    c, s = math.cos(yaw_rad), math.sin(yaw_rad)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def dominant_wall_yaw(normals_level: np.ndarray, weights: np.ndarray) -> float | None:
    """Yaw (rad, in [-pi/4, pi/4)) that puts the dominant horizontal normal directions on the
    map axes, from normals already levelled (z up); None when no direction stands out."""
    horiz = np.abs(normals_level[:, 2]) < 0.2
    if horiz.sum() < 100:
        return None
    ang = np.mod(np.arctan2(normals_level[horiz, 1], normals_level[horiz, 0]), np.pi / 2)
    hist, edges = np.histogram(ang, bins=90, range=(0, np.pi / 2), weights=weights[horiz])
    smooth = hist + np.roll(hist, 1) + np.roll(hist, -1)
    k = int(np.argmax(smooth))
    if smooth[k] < 3.0 * smooth.mean():
        return None
    peak = 0.5 * (edges[k] + edges[k + 1])
    return float(-(peak if peak < np.pi / 4 else peak - np.pi / 2))


def fit_frame(means: np.ndarray, opacities: np.ndarray, normals: np.ndarray, *, seed: int = 0,
              scale: float | None = None, known_distance: tuple[np.ndarray, np.ndarray, float] | None = None,
              align_yaw: bool = True, auto_width_m: float = 10.0, min_width_m: float = 6.0,
              max_auto_factor: float = 20.0) -> FrameFit:
    """Find the map frame of a cleaned capture.

    Args:
        means: (N, 3) Gaussian centres, source frame. opacities: (N,). normals: (N, 3) the
            shortest principal axis of each Gaussian (its surface normal for flat ones), source.
        scale: metres per source unit, when known. known_distance: (p1, p2, metres) with p1, p2
            in source coordinates. Neither: the units are taken as metres unless the capture is
            narrower than ``min_width_m``, in which case it is scaled to ``auto_width_m`` across
            (an assumption the report states; capped at ``max_auto_factor``).
    """
    rng = np.random.default_rng(seed)
    opaque = opacities > 0.5
    pts = means[opaque] if opaque.sum() >= 500 else means
    if len(pts) > 60000:
        pts = pts[rng.choice(len(pts), 60000, replace=False)]
    centre, size = robust_size(pts)
    tol = 0.01 * size
    planes = find_planes(pts.astype(np.float64), tol, rng)
    ground, _ = choose_ground(pts.astype(np.float64), planes, tol)
    r_up = rotation_to_z(ground.normal)
    notes = []
    yaw = 0.0
    if align_yaw:
        found = dominant_wall_yaw(normals @ r_up.T, opacities.astype(np.float64))
        if found is None:
            notes.append("no dominant wall direction: yaw left as captured")
        else:
            yaw = found
    rotation = rot_z(yaw) @ r_up
    if known_distance is not None:
        p1, p2, metres = known_distance
        span = float(np.linalg.norm(np.asarray(p2, float) - np.asarray(p1, float)))
        if span <= 0:
            raise ValueError("--known-distance: the two points coincide")
        s, source = metres / span, "known-distance"
    elif scale is not None:
        s, source = float(scale), "given"
    else:
        level = pts @ rotation.T
        width = float(np.mean(np.percentile(level[:, :2], 98, axis=0) - np.percentile(level[:, :2], 2, axis=0)))
        if width >= min_width_m:
            s, source = 1.0, "metres (assumed: no --scale, --known-distance or cameras)"
        else:
            s = auto_width_m / max(width, 1e-12)
            if s > max_auto_factor:
                raise ValueError(f"the capture is {width:.3g} units across and carries no metric cue; "
                                 "give --scale or --known-distance")
            source = f"auto (assumed: the capture, {width:.3g} units across, is {auto_width_m:g} m across)"
            notes.append(f"no metric cue: scaled x{s:.3g} so the capture is {auto_width_m:g} m across; "
                         "give --scale or --known-distance for true metres")
    c_level = s * (rotation @ centre)
    translation = np.array([-c_level[0], -c_level[1], -s * ground.offset])
    return FrameFit(s, rotation, translation, ground.normal, ground.share, math.degrees(yaw), source, notes)
