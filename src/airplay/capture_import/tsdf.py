"""Truncated signed distance fusion of rendered depth maps on a voxel grid (numba, CPU).

Frames and units: the grid lives in ``map`` (ENU, metres); voxel (i, j, k) has its centre at
``origin_m + voxel_m * (i, j, k)``. Cameras are given as world-to-camera 4x4 matrices into
the OpenCV optical frame (z forward, x right, y down), as the renderer takes them.

Per view and voxel (projective update, as in KinectFusion / Open3D's TSDF volume):

* the voxel centre is projected into the image; outside the image or behind the camera:
  no update;
* the pixel saw a surface (alpha >= ``alpha_surface``, finite depth d): with the voxel's
  optical depth z, ``sdf = d - z``; voxels more than ``trunc_m`` behind the surface are
  left alone (not observed), others take ``min(1, sdf / trunc_m)``;
* the pixel saw nothing (alpha < ``alpha_empty``: sky, open space): the voxel is observed
  free (+1) when closer than ``max_range_m``;
* pixels in between (soft edges) are skipped.

Values are running means in units of ``trunc_m`` (+1 free, -1 deep inside), weights count
the views that observed a voxel. :meth:`TsdfVolume.field` turns never-observed voxels
into -1: unobserved space inside the bounds counts as occupied.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange


@njit(cache=True, parallel=True)
def _integrate(values, weights, origin, voxel, view, fx, fy, cx, cy, depth, alpha,
               trunc, alpha_surface, alpha_empty, max_range, near):
    nx, ny, nz = values.shape
    h, w = depth.shape
    for i in prange(nx):
        x = origin[0] + voxel * i
        for j in range(ny):
            y = origin[1] + voxel * j
            for k in range(nz):
                z = origin[2] + voxel * k
                zc = view[2, 0] * x + view[2, 1] * y + view[2, 2] * z + view[2, 3]
                if zc <= near:
                    continue
                xc = view[0, 0] * x + view[0, 1] * y + view[0, 2] * z + view[0, 3]
                yc = view[1, 0] * x + view[1, 1] * y + view[1, 2] * z + view[1, 3]
                u = fx * xc / zc + cx
                v = fy * yc / zc + cy
                if u < 0.0 or v < 0.0:
                    continue
                iu = int(u)
                iv = int(v)
                if iu >= w or iv >= h:
                    continue
                a = alpha[iv, iu]
                if a < alpha_empty:
                    if zc >= max_range:
                        continue
                    val = 1.0
                elif a >= alpha_surface:
                    d = depth[iv, iu]
                    if not np.isfinite(d):
                        continue
                    sdf = d - zc
                    if sdf < -trunc:
                        continue
                    val = min(1.0, sdf / trunc)
                else:
                    continue
                wt = weights[i, j, k]
                values[i, j, k] = (values[i, j, k] * wt + val) / (wt + 1.0)
                weights[i, j, k] = wt + 1.0


@dataclass
class TsdfVolume:
    """A TSDF grid: ``values`` and ``weights`` (nx, ny, nz) float32, map frame, metres."""

    origin_m: np.ndarray
    voxel_m: float
    values: np.ndarray
    weights: np.ndarray
    trunc_m: float

    @classmethod
    def empty(cls, lower_m: np.ndarray, upper_m: np.ndarray, voxel_m: float, trunc_m: float | None = None) -> TsdfVolume:
        """A grid covering the box ``lower_m``..``upper_m`` (map, m); truncation 3 voxels by default."""
        lower_m, upper_m = np.asarray(lower_m, float), np.asarray(upper_m, float)
        shape = tuple(int(v) for v in np.maximum(2, np.ceil((upper_m - lower_m) / voxel_m).astype(int) + 1))
        return cls(lower_m.copy(), float(voxel_m), np.zeros(shape, np.float32), np.zeros(shape, np.float32),
                   float(trunc_m if trunc_m is not None else 3.0 * voxel_m))

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.values.shape)

    def integrate(self, viewmat: np.ndarray, K: np.ndarray, depth: np.ndarray, alpha: np.ndarray, *,
                  alpha_surface: float = 0.6, alpha_empty: float = 0.02, max_range_m: float = 1e9,
                  near_m: float = 0.05) -> None:
        """Fuse one depth map (H, W, metres along the optical axis) and its alpha (H, W)."""
        _integrate(self.values, self.weights, self.origin_m.astype(np.float64), self.voxel_m,
                   np.ascontiguousarray(viewmat, dtype=np.float64), float(K[0, 0]), float(K[1, 1]),
                   float(K[0, 2]), float(K[1, 2]), np.ascontiguousarray(depth, dtype=np.float32),
                   np.ascontiguousarray(alpha, dtype=np.float32), self.trunc_m, alpha_surface, alpha_empty,
                   float(max_range_m), float(near_m))

    def field(self) -> np.ndarray:
        """(nx, ny, nz) float32 signed field in units of ``trunc_m``: > 0 observed free,
        < 0 behind a surface or never observed (unobserved counts as occupied)."""
        return np.where(self.weights > 0, self.values, np.float32(-1.0)).astype(np.float32)

    def observed_fraction(self) -> float:
        """Share of voxels that at least one view observed."""
        return float((self.weights > 0).mean())

    def centres(self, index: np.ndarray) -> np.ndarray:
        """Map coordinates (K, 3) of voxel indices (K, 3)."""
        return self.origin_m + self.voxel_m * np.asarray(index, float)
