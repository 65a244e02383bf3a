"""Measuring an import against truth: degraded synthetic captures and the figures of issue 42.

:func:`degrade` turns a synthetic scene's splat (map frame, true) into something that looks
like a trained capture: floaters in free space, surface noise, holes, a far background
shell, and a random similarity (rotation, scale, translation) of the whole. The import
sees only the degraded file; :func:`measure` maps its results back into the truth's frame
and compares:

* Chamfer distance between the derived surface and the true mesh, both sampled inside the
  truth's navigable polygon, band grown by 0.5 m: mean and 95th percentile of the distances
  in both directions together (m);
* occupancy IoU of solid voxels (SDF < 0) at ``voxel_m`` inside the navigable volume (the
  truth's polygon and height band);
* collision agreement on random straight segments between points of the navigable volume (a segment
  collides when the SDF along it falls below ``radius_m``), and the share "derived free,
  truly colliding";
* up-axis error (deg) and relative scale error of the recovered frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airplay.scene.gaussians import Gaussians


@dataclass(frozen=True)
class Degradation:
    """The similarity applied (truth map -> degraded source: p_src = scale * R p + t) and what was added."""

    scale: float
    rotation: np.ndarray
    translation: np.ndarray
    floaters: int
    shell: int
    holes_removed: int


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    from airplay.scene.gaussians import quat_wxyz_to_matrix

    return quat_wxyz_to_matrix(q)


def degrade(g: Gaussians, seed: int, *, floater_share: float = 0.02, shell_share: float = 0.05, holes: int = 3,
            hole_radius_m: float = 0.8, noise_m: float = 0.01) -> tuple[Gaussians, Degradation]:
    """A degraded capture of ``g`` (map frame) and the similarity applied (see the module docstring)."""
    rng = np.random.default_rng(seed)
    n = len(g)
    means = g.means.astype(np.float64) + rng.normal(scale=noise_m, size=(n, 3))
    keep = np.ones(n, bool)
    for _ in range(holes):
        c = means[rng.integers(n)]
        keep &= np.linalg.norm(means - c, axis=1) > hole_radius_m
    base = Gaussians(means.astype(np.float32), g.scales, g.quats_wxyz, g.opacities, g.sh).subset(keep)
    lo, hi = g.bounds()
    centre = 0.5 * (lo + hi)
    radius = float(np.linalg.norm(hi - lo)) / 2

    def blobs(points: np.ndarray, scale_lo: float, scale_hi: float, op_lo: float, op_hi: float) -> Gaussians:
        m = len(points)
        q = rng.normal(size=(m, 4))
        return Gaussians(points.astype(np.float32), rng.uniform(scale_lo, scale_hi, (m, 3)).astype(np.float32),
                         (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32),
                         rng.uniform(op_lo, op_hi, m).astype(np.float32),
                         np.concatenate([rng.normal(size=(m, 1, 3)),
                                         np.zeros((m, g.sh.shape[1] - 1, 3))], axis=1).astype(np.float32))

    n_float = int(floater_share * n)
    floaters = blobs(rng.uniform(lo + [0, 0, 0.5], hi, (n_float, 3)), 0.01, 0.05, 0.1, 0.6)
    n_shell = int(shell_share * n)
    d = rng.normal(size=(n_shell, 3))
    d[:, 2] = np.abs(d[:, 2])
    shell = blobs(centre + 4.0 * radius * d / np.linalg.norm(d, axis=1, keepdims=True), 0.3, 1.0, 0.5, 1.0)
    whole = Gaussians.concatenate([base, floaters, shell])
    scale = float(np.exp(rng.uniform(np.log(0.3), np.log(3.0))))
    rot = _random_rotation(rng)
    t = rng.uniform(-5, 5, 3)
    out = whole.transformed(scale, rot, t)
    out = Gaussians(out.means, out.scales, out.quats_wxyz, out.opacities, out.sh)  # SH frame: as captured
    return out, Degradation(scale, rot, t, n_float, n_shell, int((~keep).sum()))


def truth_points_in_source(deg: Degradation, points_map: np.ndarray) -> np.ndarray:
    """Truth-map points (K, 3) in the degraded capture's coordinates."""
    return deg.scale * (np.asarray(points_map, float) @ deg.rotation.T) + deg.translation


def handheld_cameras(true_mesh, region, count: int, seed: int, *, height_m: float = 1.5,
                     clearance_m: float = 0.5) -> np.ndarray:
    """(K, 4, 4) camera-to-world poses (OpenCV axes), truth map frame: a hand-held capture, at
    ``height_m`` +- 5 cm above the true surface under each (a pavement, a kerb, the road), where
    the true geometry is at least ``clearance_m`` away, inside the navigable polygon, random yaw,
    pitched 0-15 deg down, rolled +-2 deg."""
    from airplay.scene.camera import look_at_viewmat
    from airplay.sim.sdf import SignedDistanceField

    rng = np.random.default_rng(seed)
    lo, hi = region.polygon.min(axis=0), region.polygon.max(axis=0)
    sdf = SignedDistanceField.from_mesh(true_mesh, np.r_[lo, height_m - 1.0], np.r_[hi, height_m + 1.0], 0.2)
    pts = np.zeros((0, 3))
    for _ in range(50):
        cand = np.c_[rng.uniform(lo, hi, (4 * count, 2)), np.full(4 * count, height_m)]
        cand = cand[region.contains_xy(cand[:, :2])]
        hits, rays, _ = true_mesh.ray.intersects_location(cand, np.tile([0.0, 0.0, -1.0], (len(cand), 1)),
                                                          multiple_hits=False)
        floor = np.full(len(cand), np.nan)
        floor[rays] = hits[:, 2]
        cand = cand[np.isfinite(floor)]
        cand[:, 2] = floor[np.isfinite(floor)] + height_m + rng.normal(0, 0.05, len(cand))
        pts = np.vstack([pts, cand[sdf.query(cand) > clearance_m]])
        if len(pts) >= count:
            break
    if len(pts) < count:
        raise ValueError(f"only {len(pts)} free camera positions found at {height_m} m")
    out = []
    for p in pts[:count]:
        yaw, pitch = rng.uniform(0, 2 * math.pi), math.radians(rng.uniform(0, 15))
        d = np.array([math.cos(yaw) * math.cos(pitch), math.sin(yaw) * math.cos(pitch), -math.sin(pitch)])
        c2w = np.linalg.inv(look_at_viewmat(p, p + d))
        roll = math.radians(rng.uniform(-2, 2))
        c2w[:3, :3] = c2w[:3, :3] @ np.array([[math.cos(roll), -math.sin(roll), 0.0],
                                              [math.sin(roll), math.cos(roll), 0.0], [0.0, 0.0, 1.0]])
        out.append(c2w)
    return np.asarray(out)


def poses_in_source(deg: Degradation, c2w: np.ndarray) -> np.ndarray:
    """Camera-to-world poses (K, 4, 4) of the truth map frame in the degraded capture's coordinates."""
    out = np.array(c2w, float)
    out[:, :3, :3] = deg.rotation @ out[:, :3, :3]
    out[:, :3, 3] = truth_points_in_source(deg, out[:, :3, 3])
    return out


def import_to_truth(deg: Degradation, frame, points_import: np.ndarray) -> np.ndarray:
    """Points in the import's map frame (K, 3) back in the truth's map frame."""
    src = (np.asarray(points_import, float) - frame.translation) @ frame.rotation / frame.scale
    return (src - deg.translation) @ deg.rotation / deg.scale


def frame_errors(deg: Degradation, frame) -> tuple[float, float]:
    """(up-axis error in degrees, relative scale error) of a recovered frame."""
    true_up_src = deg.rotation @ np.array([0.0, 0.0, 1.0])
    cosang = float(np.clip(np.dot(true_up_src, frame.up_src) / np.linalg.norm(frame.up_src), -1, 1))
    return math.degrees(math.acos(cosang)), abs(frame.scale * deg.scale - 1.0)


def _sample_in(mesh, lower: np.ndarray, upper: np.ndarray, count: int, seed: int) -> np.ndarray:
    pts, _ = mesh.sample(count, return_index=True, seed=seed)
    inside = np.all((pts >= lower) & (pts <= upper), axis=1)
    return pts[inside]


def chamfer(derived_mesh, true_mesh, region, margin_m: float = 0.5, count: int = 200_000,
            seed: int = 0) -> tuple[float, float]:
    """(mean, 95th percentile) of nearest-surface distances both ways, metres, between surface
    samples inside the navigable volume (polygon, band grown by ``margin_m`` up and down)."""
    from scipy.spatial import cKDTree

    lower = np.r_[region.polygon.min(axis=0) - margin_m, region.z_min - margin_m]
    upper = np.r_[region.polygon.max(axis=0) + margin_m, region.z_max + margin_m]
    a = _sample_in(derived_mesh, lower, upper, count, seed)
    b = _sample_in(true_mesh, lower, upper, count, seed + 1)
    a, b = a[region.contains_xy(a[:, :2])], b[region.contains_xy(b[:, :2])]
    if len(a) == 0 or len(b) == 0:
        return float("inf"), float("inf")
    d = np.concatenate([cKDTree(b).query(a)[0], cKDTree(a).query(b)[0]])
    return float(d.mean()), float(np.percentile(d, 95))


def occupancy_and_segments(derived_mesh, true_mesh, region, *, voxel_m: float = 0.1, segments: int = 10_000,
                           radius_m: float = 0.0, seed: int = 0) -> dict:
    """Occupancy IoU and segment collision agreement inside the navigable volume (truth frame)."""
    from airplay.sim.sdf import SignedDistanceField

    lower = np.r_[region.polygon.min(axis=0), region.z_min]
    upper = np.r_[region.polygon.max(axis=0), region.z_max]
    sdf_t = SignedDistanceField.from_mesh(true_mesh, lower, upper, voxel_m)
    sdf_d = SignedDistanceField.from_mesh(derived_mesh, lower, upper, voxel_m)
    shape = sdf_t.values.shape
    centres = sdf_t.origin_m[:2] + sdf_t.resolution_m * np.stack(np.meshgrid(*[np.arange(k) for k in shape[:2]],
                                                                       indexing="ij"), axis=-1).reshape(-1, 2)
    in_poly = region.contains_xy(centres[:, :2]).reshape(shape[:2])[:, :, None]
    zc = sdf_t.origin_m[2] + sdf_t.resolution_m * np.arange(shape[2])
    inside = in_poly & ((zc >= region.z_min) & (zc <= region.z_max))[None, None, :]
    solid_t, solid_d = (sdf_t.values < 0) & inside, (sdf_d.values < 0) & inside
    union = (solid_t | solid_d).sum()
    iou = float((solid_t & solid_d).sum() / union) if union else 1.0
    rng = np.random.default_rng(seed)

    def draw(k: int) -> np.ndarray:
        out = np.zeros((0, 3))
        while len(out) < k:
            p = rng.uniform(lower, upper, (2 * k, 3))
            out = np.vstack([out, p[region.contains(p)]])
        return out[:k]

    a, b = draw(segments), draw(segments)
    steps = np.linspace(0.0, 1.0, 64)
    pts = (a[:, None, :] * (1 - steps[None, :, None]) + b[:, None, :] * steps[None, :, None]).reshape(-1, 3)
    hit_t = (sdf_t.query(pts).reshape(segments, -1) < radius_m).any(axis=1)
    hit_d = (sdf_d.query(pts).reshape(segments, -1) < radius_m).any(axis=1)
    return {"occupancy_iou": iou, "collision_agreement": float((hit_t == hit_d).mean()),
            "derived_free_truly_colliding": float((hit_t & ~hit_d).mean()),
            "solid_share_truth": float(solid_t.sum() / inside.sum()), "solid_share_derived": float(solid_d.sum() / inside.sum())}
