"""Free-space viewpoints inside a scene's navigable region (for previews and benchmarks).

Clearance is estimated by ray casting against the collision mesh in 26 directions, so it
needs no signed distance field; the yaw looks down the longest free horizontal ray.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.mesh_depth import MeshRaycaster
from airplay.scene.scene import Scene


def _probe_directions() -> np.ndarray:
    d = np.array([[i, j, k] for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1) if (i, j, k) != (0, 0, 0)], float)
    return d / np.linalg.norm(d, axis=1, keepdims=True)


def free_viewpoints(
    scene: Scene,
    count: int,
    seed: int,
    min_clearance_m: float = 0.6,
    candidates: int = 400,
    caster: MeshRaycaster | None = None,
) -> list[tuple[float, float, float, float]]:
    """Up to ``count`` poses (x, y, z m in map; yaw rad) in free space, most open first.

    Openness is the clearance capped at 2 m, so among roomy places the draw order decides.

    Candidates are drawn uniformly in the navigable polygon's bounding box and height band
    with ``np.random.default_rng(seed)``; those outside the polygon or closer than
    ``min_clearance_m`` to the mesh are dropped. Deterministic for a given seed.
    """
    rng = np.random.default_rng(seed)
    nav = scene.spec.navigable
    lo, hi = nav.polygon.min(axis=0), nav.polygon.max(axis=0)
    xy = rng.uniform(lo, hi, size=(candidates, 2))
    z = rng.uniform(nav.z_min, nav.z_max, size=(candidates, 1))
    points = np.hstack([xy, z])[nav.contains_xy(xy)]
    if len(points) == 0:
        return []
    caster = caster or MeshRaycaster(scene.mesh)
    dirs = _probe_directions()
    origins = np.repeat(points, len(dirs), axis=0)
    rays = np.tile(dirs, (len(points), 1))
    hits, _ = caster.first_hits(origins, rays)
    dist = np.linalg.norm(hits - origins, axis=1)
    dist[~np.isfinite(dist)] = np.inf
    dist = dist.reshape(len(points), len(dirs))
    clearance = dist.min(axis=1)
    # Yaw: among horizontal probe directions, the longest ray that still hits something, so the
    # view looks down a street or corridor rather than over a roof into empty sky.
    horizontal = np.flatnonzero(np.abs(dirs[:, 2]) < 1e-9)
    reach = dist[:, horizontal]
    best_dir = dirs[horizontal][np.argmax(np.where(np.isfinite(reach), reach, 0.0), axis=1)]
    keep = np.flatnonzero(clearance >= min_clearance_m)
    order = keep[np.argsort(-np.minimum(clearance[keep], 2.0), kind="stable")]
    poses = []
    for i in order[:count]:
        yaw = float(np.arctan2(best_dir[i, 1], best_dir[i, 0]))
        poses.append((float(points[i, 0]), float(points[i, 1]), float(points[i, 2]), yaw))
    return poses
