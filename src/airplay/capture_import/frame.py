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

With the capture's cameras (their up vectors in source coordinates, camera -y in OpenCV axes):
the cameras' mean up decides. ``up_from="auto"`` takes the plane whose normal is nearest to it
when that is within ``CAMERA_PLANE_MAX_DEG`` (the plane's normal is the more precise: a
camera pitched down tilts its up vector, a floor of thousands of Gaussians does not), else the
cameras' mean up itself with the floor at the 2nd percentile of the opaque Gaussians' heights;
``"cameras"`` always the mean up, ``"ground"`` always the plane search above. The angle
between the cameras' mean up and the nearest plane's normal is kept for the report. Without
``--scale`` or ``--known-distance`` the scale then comes from the cameras' median height
above the surface under each (:func:`camera_heights`), taken to be ``camera_height_m`` (an
assumption the report states).
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
CAMERA_PLANE_MAX_DEG = 15.0
"""A plane within this angle of the cameras' mean up is their ground (``up_from="auto"``)."""
MIN_CAMERA_UP_AGREEMENT = 0.7
"""Below this length of the cameras' plain mean up vector they disagree on up (portrait and
landscape mixed, a camera rolled): ``up_from="auto"`` then uses the ground plane alone."""
UP_FROM = ("auto", "cameras", "ground")
COLUMN_RADIUS_SHARE = 0.03
"""A camera's height is measured to the surface within this share of the capture's size of its
vertical line (:func:`camera_heights`)."""
MIN_COLUMN_POINTS = 10


class NoGroundError(ValueError):
    """No plane in the capture qualifies as the ground."""


class CameraHeightError(ValueError):
    """The capture's cameras do not stand over the found floor, so their height gives no scale."""


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
    scale_source: "given", "known-distance", "camera height (assumed ...)", "metres (assumed ...)"
        or "auto (assumed ...)".
    """

    scale: float
    rotation: np.ndarray
    translation: np.ndarray
    up_src: np.ndarray
    ground_share: float
    yaw_deg: float
    scale_source: str
    notes: list[str] = field(default_factory=list)
    up_from: str = "ground plane"
    """What gave the up axis: "ground plane", "ground plane (picked by the cameras)" or "cameras' mean up"."""
    camera_up_angle_deg: float | None = None
    """Angle between the cameras' mean up and the nearest ground-plane candidate's normal, degrees."""
    camera_height_src: float | None = None
    """The cameras' median height above the found floor, source units (None without cameras)."""

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


def camera_heights(points: np.ndarray, cams: np.ndarray, up: np.ndarray, floor: float, radius: float) -> np.ndarray:
    """(K,) each camera's height above the surface under it, source units: the 5th percentile of
    the heights (along ``up``) of the ``points`` below it within ``radius`` of its vertical line
    (a pavement, a raised floor: what the operator stood on); above the plane ``up . p = floor``
    where fewer than ``MIN_COLUMN_POINTS`` points are there."""
    from scipy.spatial import cKDTree

    u = np.cross(up, [1.0, 0.0, 0.0] if abs(up[0]) < 0.9 else [0.0, 1.0, 0.0])
    u /= np.linalg.norm(u)
    basis = np.stack([u, np.cross(up, u)], axis=1)
    h_pts, h_cam = points @ up, cams @ up
    tree = cKDTree(points @ basis)
    out = h_cam - floor
    for k, idx in enumerate(tree.query_ball_point(cams @ basis, radius)):
        below = h_pts[idx][h_pts[idx] < h_cam[k]]
        if len(below) >= MIN_COLUMN_POINTS:
            out[k] = h_cam[k] - float(np.percentile(below, 5))
    return out


def _angle_deg(a: np.ndarray, b: np.ndarray) -> float:
    return math.degrees(math.acos(float(np.clip(np.dot(a, b), -1.0, 1.0))))


def _up_from_cameras(pts: np.ndarray, planes: list[Plane], cam_up: np.ndarray, tol: float, up_from: str,
                     notes: list[str]) -> tuple[np.ndarray, float, Plane | None, str, float | None]:
    """(up, floor offset along it, the ground plane (None if none is near the cameras' up), what
    gave up, angle between the cameras' up and the nearest plane) with cameras."""
    best: tuple[float, Plane] | None = None
    for plane in planes:
        if plane.share < MIN_GROUND_SHARE:
            continue
        sign = 1.0 if float(plane.normal @ cam_up) >= 0 else -1.0
        cand = Plane(sign * plane.normal, sign * plane.offset, plane.share)
        ang = _angle_deg(cand.normal, cam_up)
        if best is None or ang < best[0]:
            best = (ang, cand)
    angle = None if best is None else best[0]
    near = best is not None and best[0] <= CAMERA_PLANE_MAX_DEG
    if near and up_from == "auto":
        return best[1].normal, best[1].offset, best[1], "ground plane (picked by the cameras)", angle
    h = pts @ cam_up
    if near:
        on = np.abs(pts @ best[1].normal - best[1].offset) < tol
        floor, plane = float(np.median(h[on])), best[1]
    else:
        floor, plane = float(np.percentile(h, 2)), None
        notes.append("no ground plane within "
                     f"{CAMERA_PLANE_MAX_DEG:g} deg of the cameras' up (nearest: "
                     f"{'none' if angle is None else f'{angle:.1f} deg'}): floor at the 2nd percentile of the "
                     "opaque Gaussians' heights")
    return cam_up, floor, plane, "cameras' mean up", angle


def fit_frame(means: np.ndarray, opacities: np.ndarray, normals: np.ndarray, *, seed: int = 0,
              scale: float | None = None, known_distance: tuple[np.ndarray, np.ndarray, float] | None = None,
              align_yaw: bool = True, auto_width_m: float = 10.0, min_width_m: float = 6.0,
              max_auto_factor: float = 20.0, camera_positions: np.ndarray | None = None,
              camera_ups: np.ndarray | None = None, camera_height_m: float = 1.5,
              up_from: str = "auto") -> FrameFit:
    """Find the map frame of a cleaned capture.

    Args:
        means: (N, 3) Gaussian centres, source frame. opacities: (N,). normals: (N, 3) the
            shortest principal axis of each Gaussian (its surface normal for flat ones), source.
        scale: metres per source unit, when known. known_distance: (p1, p2, metres) with p1, p2
            in source coordinates. Neither: the units are taken as metres unless the capture is
            narrower than ``min_width_m``, in which case it is scaled to ``auto_width_m`` across
            (an assumption the report states; capped at ``max_auto_factor``).
        camera_positions, camera_ups: (K, 3) the capture's camera centres and up vectors
            (source frame; see the module docstring). With them and no ``scale`` or
            ``known_distance``, the cameras' median height above the floor is taken to be
            ``camera_height_m`` metres.
        up_from: "auto", "cameras" or "ground" (see the module docstring).
    """
    if up_from not in UP_FROM:
        raise ValueError(f"up_from must be one of {', '.join(UP_FROM)}, got {up_from!r}")
    rng = np.random.default_rng(seed)
    opaque = opacities > 0.5
    pts = means[opaque] if opaque.sum() >= 500 else means
    if len(pts) > 60000:
        pts = pts[rng.choice(len(pts), 60000, replace=False)]
    centre, size = robust_size(pts)
    tol = 0.01 * size
    pts = pts.astype(np.float64)
    planes = find_planes(pts, tol, rng)
    notes: list[str] = []
    cam_up, cam_angle, up_source = None, None, "ground plane"
    if camera_ups is not None and len(camera_ups):
        mean = np.asarray(camera_ups, float).mean(axis=0)
        agreement = float(np.linalg.norm(mean))
        cam_up = mean / max(agreement, 1e-12)
        if agreement < MIN_CAMERA_UP_AGREEMENT and up_from == "auto":
            notes.append(f"the cameras disagree on up (their mean up vector is {agreement:.2f} long; portrait and "
                         "landscape mixed?): up from the ground plane alone")
            up_from = "ground"
    if cam_up is not None and up_from != "ground":
        up, floor, ground, up_source, cam_angle = _up_from_cameras(pts, planes, cam_up, tol, up_from, notes)
    else:
        ground, _ = choose_ground(pts, planes, tol)
        up, floor = ground.normal, ground.offset
        if cam_up is not None:
            cam_angle = _angle_deg(up, cam_up)
    if cam_angle is not None and cam_angle > CAMERA_PLANE_MAX_DEG:
        notes.append(f"the cameras' mean up and the nearest ground plane are {cam_angle:.1f} deg apart; "
                     f"up from the {up_source}")
    r_up = rotation_to_z(up)
    share = 0.0 if ground is None else ground.share
    cam_height = None
    if camera_positions is not None and len(camera_positions):
        # above the ground plane itself where there is one (exact even if up is tilted from it)
        n, d = (up, floor) if ground is None else (ground.normal, ground.offset)
        cam_height = float(np.median(camera_heights(pts, np.asarray(camera_positions, float), n, d,
                                                    COLUMN_RADIUS_SHARE * size)))
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
    elif cam_height is not None:
        if cam_height <= 2.0 * tol:
            raise CameraHeightError(f"the cameras' median height above the floor found is {cam_height:.3g} units: they do "
                             "not stand over it, so it gives no scale; give --scale or --known-distance")
        s = camera_height_m / cam_height
        source = (f"camera height (assumed: the cameras' median height above the floor, {cam_height:.4g} units, "
                  f"is {camera_height_m:g} m; --camera-height)")
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
    translation = np.array([-c_level[0], -c_level[1], -s * floor])
    return FrameFit(s, rotation, translation, up, share, math.degrees(yaw), source, notes, up_source, cam_angle,
                    cam_height)
