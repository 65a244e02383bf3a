"""Where to put the cameras that render depth for fusion: free-space points inside the capture.

All in ``map`` (ENU, metres). A coarse occupancy grid is made from the kept Gaussians'
centres (opacity >= 0.3), grown by one cell; candidate points are free cells at least
``clearance_m`` from it, at heights in the band, over the capture's core (the 5th to 95th
percentile of the centres in x and y). Outdoors (at least 20 % of them see the sky
straight or diagonally up) only cells that see the sky are kept, so no camera sits inside a
closed building; indoors, the largest connected free region is kept. Points are picked by farthest-
point sampling; each renders a cube map (six 90 degree views), which sees every direction.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.camera import look_at_viewmat

CUBE_DIRECTIONS = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]], float)


MAX_CANDIDATES = 20000
MIN_SKY_OPEN_SHARE = 0.2
"""A capture is treated as outdoors when this share of the candidate cells sees the sky."""


def sky_open(occ: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """(K,) bool: some of the nine upward cell directions from each cell leaves the grid through its
    top without crossing an occupied cell (the sky is visible; inside a closed building it is not)."""
    nx, ny, nz = occ.shape
    out = np.zeros(len(cells), bool)
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            pos = cells.copy()
            alive = ~out
            for _ in range(nz):
                pos = pos + (dx, dy, 1)
                top = pos[:, 2] >= nz
                out |= alive & top
                alive &= ~top
                side = (pos[:, 0] < 0) | (pos[:, 0] >= nx) | (pos[:, 1] < 0) | (pos[:, 1] >= ny)
                alive &= ~side
                if not alive.any():
                    break
                idx = np.clip(pos, 0, np.array(occ.shape) - 1)
                alive &= ~occ[idx[:, 0], idx[:, 1], idx[:, 2]]
    return out


def camera_points(means_map: np.ndarray, opacities: np.ndarray, lower: np.ndarray, upper: np.ndarray,
                  z_band: tuple[float, float], count: int, *, cell_m: float = 0.25, clearance_m: float = 0.5,
                  spacing_m: float = 0.0, seed: int = 0) -> np.ndarray:
    """Up to ``count`` camera positions (K, 3), map frame, spread over the free space.

    ``spacing_m``: the typical distance between neighbouring Gaussians (m); the sky test's grid
    is at least twice as coarse."""
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
    # Only over the capture's core (5th to 95th percentile of the centres in x and y): the strip
    # outside a room's walls sees the sky, and a camera there would look at the walls' backs.
    core_lo, core_hi = np.percentile(pts[:, :2], 5, axis=0), np.percentile(pts[:, :2], 95, axis=0)
    xc = lower[0] + cell * np.arange(shape[0])
    yc = lower[1] + cell * np.arange(shape[1])
    core = ((xc >= core_lo[0]) & (xc <= core_hi[0]))[:, None] & ((yc >= core_lo[1]) & (yc <= core_hi[1]))[None, :]
    cand = (dist >= clearance_m) & band[None, None, :] & core[:, :, None]
    labels, n = ndimage.label(cand)
    if n == 0:
        return np.zeros((0, 3))
    rng = np.random.default_rng(seed)
    cells = np.argwhere(cand)
    if len(cells) > MAX_CANDIDATES:
        cells = cells[rng.choice(len(cells), MAX_CANDIDATES, replace=False)]
    # The sky test runs on a grid coarse enough that sparse roofs (a few Gaussians per m^2) close.
    f = max(1, int(np.ceil(2.0 * spacing_m / cell)))
    coarse = ndimage.maximum_filter(occ, size=f)[::f, ::f, ::f] if f > 1 else occ
    open_up = sky_open(coarse, cells // f)
    if open_up.mean() >= MIN_SKY_OPEN_SHARE:
        cells = cells[open_up]  # outdoors: stay where the sky is seen, out of closed buildings
    else:
        sizes = np.bincount(labels.ravel())
        sizes[0] = 0
        cells = np.argwhere(labels == int(np.argmax(sizes)))  # indoors: the largest free room
    points = lower + cell * cells
    return farthest_points(points, count, seed=seed, weight=centre_weight(points, means_map))


def cube_viewmats(points: np.ndarray) -> np.ndarray:
    """(6K, 4, 4) world-to-camera matrices (OpenCV optical): six axis views per point."""
    mats = []
    for p in points:
        for d in CUBE_DIRECTIONS:
            up = (0.0, 1.0, 0.0) if abs(d[2]) > 0.5 else (0.0, 0.0, 1.0)
            mats.append(look_at_viewmat(p, p + d, up))
    return np.asarray(mats)


def centre_weight(points: np.ndarray, means: np.ndarray) -> np.ndarray:
    """(K,) 1 / (1 + (r / r50)^2): r the horizontal distance of each point from the Gaussians'
    median, r50 the Gaussians' median such distance."""
    c = np.median(means[:, :2], axis=0)
    r50 = float(np.median(np.linalg.norm(means[:, :2] - c, axis=1))) or 1.0
    r = np.linalg.norm(points[:, :2] - c, axis=1)
    return 1.0 / (1.0 + (r / r50) ** 2)


def farthest_points(points: np.ndarray, count: int, existing: np.ndarray | None = None, seed: int = 0,
                    weight: np.ndarray | None = None) -> np.ndarray:
    """``count`` of ``points`` (K, 3) by farthest-point sampling, each as far as possible from
    the ones chosen before and from ``existing`` (E, 3); with ``weight`` (K,) the distance is
    scaled by it (a weight falling off from the capture's centre keeps cameras where it was
    taken from, not behind its buildings)."""
    if len(points) == 0 or count <= 0:
        return np.zeros((0, 3))
    w = np.ones(len(points)) if weight is None else np.asarray(weight, float)
    if existing is not None and len(existing):
        d = np.min(np.linalg.norm(points[:, None, :] - existing[None, :, :], axis=2), axis=1)
        chosen = []
    else:
        first = int(np.argmax(w)) if weight is not None else int(np.random.default_rng(seed).integers(len(points)))
        chosen = [first]
        d = np.linalg.norm(points - points[first], axis=1)
    while len(chosen) < min(count, len(points)):
        k = int(np.argmax(d * w))
        chosen.append(k)
        d = np.minimum(d, np.linalg.norm(points - points[k], axis=1))
    return points[chosen]


def farthest_indices(points: np.ndarray, count: int, seed: int = 0) -> np.ndarray:
    """Indices of ``count`` of ``points`` (K, D) by farthest-point sampling from a seeded random
    start (all of them, in order, when there are no more than ``count``)."""
    n = len(points)
    if n <= count:
        return np.arange(n)
    chosen = [int(np.random.default_rng(seed).integers(n))]
    d = np.linalg.norm(points - points[chosen[0]], axis=1)
    while len(chosen) < count:
        k = int(np.argmax(d))
        chosen.append(k)
        d = np.minimum(d, np.linalg.norm(points - points[k], axis=1))
    return np.sort(np.asarray(chosen))


def frontier_points(field: np.ndarray, origin: np.ndarray, voxel: float, z_band: tuple[float, float],
                    existing: np.ndarray, count: int, *, clearance_m: float = 0.5, seed: int = 0,
                    centre_means: np.ndarray | None = None) -> np.ndarray:
    """More camera points in space the fusion so far has observed free (at least ``clearance_m``
    from anything solid or unobserved), as far as possible from the cameras already used: the
    next round looks into what the last one only glimpsed."""
    from scipy import ndimage

    free = field > 0
    roomy = ndimage.distance_transform_edt(free) * voxel >= clearance_m
    zc = origin[2] + voxel * np.arange(field.shape[2])
    roomy &= ((zc >= z_band[0]) & (zc <= z_band[1]))[None, None, :]
    cells = np.argwhere(roomy)
    if len(cells) > MAX_CANDIDATES:
        cells = cells[np.random.default_rng(seed).choice(len(cells), MAX_CANDIDATES, replace=False)]
    points = origin + voxel * cells
    return farthest_points(points, count, existing, seed,
                           weight=None if centre_means is None else centre_weight(points, centre_means))
