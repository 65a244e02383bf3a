"""The navigable region (polygon + flight height band, map frame, metres) of an imported capture,
derived from the fused field rather than written by hand.

A voxel is roomy when it is observed free and at least ``clearance_m`` from any solid or
unobserved voxel. The band starts at ``z_min_m`` and rises through the layers whose roomy
area is at least half of the roomiest layer's, up to ``max_height_m``; it is at least
``min_band_m`` thick when the free space allows. The polygon is the convex hull of the roomy
cells' centres in the band (in the largest connected roomy region). Space inside the hull
that is solid or unobserved is excluded by the collision mesh, not by the polygon.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.spec import NavigableRegion


class NoFreeSpaceError(ValueError):
    """The capture holds no free space roomy enough to fly in."""


def derive_region(field: np.ndarray, origin: np.ndarray, voxel: float, *, clearance_m: float = 0.5,
                  z_min_m: float = 0.5, max_height_m: float = 4.0, min_band_m: float = 1.0) -> NavigableRegion:
    """Navigable region from a fused field (> 0 observed free), see the module docstring."""
    from scipy import ndimage
    from scipy.spatial import ConvexHull, QhullError

    free = field > 0
    dist = ndimage.distance_transform_edt(free) * voxel
    roomy = dist >= clearance_m
    zc = origin[2] + voxel * np.arange(field.shape[2])
    area = roomy.sum(axis=(0, 1)).astype(float) * voxel**2
    in_range = (zc >= z_min_m) & (zc <= max_height_m)
    if not (area[in_range] > 0).any():
        raise NoFreeSpaceError(f"no free space {clearance_m} m from every surface between z = {z_min_m} and "
                               f"{max_height_m} m above the ground found")
    peak = float(area[in_range].max())
    good = in_range & (area >= 0.5 * peak)
    k0 = int(np.argmax(in_range & (area > 0)))
    k = k0
    while k + 1 < len(zc) and good[k + 1] or (k + 1 < len(zc) and zc[k + 1] - zc[k0] < min_band_m
                                               and in_range[k + 1] and area[k + 1] > 0):
        k += 1
    z_lo, z_hi = float(max(zc[k0], z_min_m)), float(zc[k])
    if z_hi - z_lo < 0.2:
        z_hi = z_lo + 0.2
    band = (zc >= z_lo - 1e-9) & (zc <= z_hi + 1e-9)
    roomy_band = roomy & band[None, None, :]
    labels, _ = ndimage.label(roomy_band)
    sizes = np.bincount(labels.ravel())
    sizes[0] = 0
    cells = np.argwhere((labels == int(np.argmax(sizes))).any(axis=2))
    xy = origin[:2] + voxel * cells
    try:
        hull = ConvexHull(xy)
        polygon = xy[hull.vertices]
    except (QhullError, ValueError):
        lo, hi = xy.min(axis=0) - voxel, xy.max(axis=0) + voxel
        polygon = np.array([[lo[0], lo[1]], [hi[0], lo[1]], [hi[0], hi[1]], [lo[0], hi[1]]])
    return NavigableRegion(np.round(polygon, 4), round(z_lo, 4), round(z_hi, 4))
