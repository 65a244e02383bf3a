"""Where to put the cameras that render depth for fusion: free-space points inside the capture.

All in ``map`` (ENU, metres). A coarse occupancy grid is made from the kept Gaussians'
centres (opacity >= 0.3), grown by one cell; candidate points are free cells at least
``clearance_m`` from it, at heights in the band, in the largest connected free region (so no
camera sits inside a closed building or under the ground). Points are picked by farthest-
point sampling; each renders a cube map (six 90 degree views), which sees every direction.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.camera import look_at_viewmat

CUBE_DIRECTIONS = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], float)


def camera_points(means_map: np.ndarray, opacities: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                  z_band: tuple[float, float], count: int, *, cell_m: float = 0.25, clearance_m: float = 0.5,
                  seed: int = 0) -> np.ndarray:
    """Up to ``count`` camera positions (K, 3), map frame, spread over the free space."""
    from scipy import ndimage

    cell = max(cell_m, float(np.max(upper - lower)) / 200.0)
    shape = tuple(int(v) for v in np.ceil((upper - lower) / cell).astype(int) + 1)
    occ = np.zeros(shape, bool)
    pts = means_map[opacities >= 0.3]
    idx = np.floor((pts - lower) / cell).astype(np.int64)
    ok = np.all((idx >= 0) & (idx < np.array(shape)), axis=1)
    occ[tuple(idx[ok].T)] = True
    occ = ndimage.binary_dilation(occ, iterations=1)
    dist = ndimage.distance_transform_edt(~occ) * cell
    zc = lower[2] + cell * np.arange(shape[2])
    band = (zc >= z_band[0]) & (zc <= z_band[1])
    cand = (dist >= clearance_m) & band[None, None, :]
    labels, n = ndimage.label(cand)
    if n == 0:
        return np.zeros((0, 3))
    sizes = np.bincount(labels.ravel())
    sizes[0] = 0
    cells = np.argwhere(labels == int(np.argmax(sizes)))
    points = lower + cell * cells
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(len(points)))]
    d = np.linalg.norm(points - points[chosen[0]], axis=1)
    for _ in range(min(count, len(points)) - 1):
        k = int(np.argmax(d))
        chosen.append(k)
        d = np.minimum(d, np.linalg.norm(points - points[k], axis=1))
    return points[chosen]


def cube_viewmats(points: np.ndarray) -> np.ndarray:
    """(6K, 4, 4) world-to-camera matrices (OpenCV optical): six axis views per point."""
    mats = []
    for p in points:
        for d in CUBE_DIRECTIONS:
            up = (0.0, 1.0, 0.0) if abs(d[2]) > 0.5 else (0.0, 0.0, 1.0)
            mats.append(look_at_viewmat(p, p + d, up))
    return np.asarray(mats)
