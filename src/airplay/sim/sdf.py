"""Signed distance field of a scene's collision mesh, on a voxel grid, cached on disk.

Built once per scene (and cached by mesh content and grid settings) over the volume the
vehicle can reach: the navigable polygon's bounding box and the height band, each grown
by ``padding_m``. Values are metres at voxel centres, positive in free space and negative
inside solids; :meth:`SignedDistanceField.query` interpolates trilinearly.

Construction:

1. Inside/outside per voxel: each closed connected component of the mesh is ray cast on
   its own, one vertical ray per (x, y) column under it (Embree, all hits), and the parity
   of crossings below a voxel centre says whether it is inside; solid = inside any
   component. Open components (real captures' meshes often have them) and parts thinner
   than two voxels make the voxels their surface passes through solid.
2. Euclidean distance transforms (scipy) of the free and the solid voxels give the
   distance to the nearest voxel of the other kind; half a voxel is taken off so that the
   zero crossing lies between the two, where the surface is. Against exact point-to-mesh
   distances in free space the error is below 0.13 m at the default 0.1 m resolution
   (measured on the synthetic scenes; thin parts err on the safe side).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit, prange

from airplay import config

DEFAULT_RESOLUTION_M = 0.10
DEFAULT_PADDING_M = 1.0
CACHE_VERSION = 1


@njit(cache=True, inline="always")
def trilinear_at(values, origin, inv_res, px, py, pz):
    """Signed distance (m) at the map point (px, py, pz), interpolated trilinearly in the grid
    ``values`` (nx, ny, nz) whose cell (0, 0, 0) centre is ``origin`` (3,) and whose cells are
    ``1 / inv_res`` m wide; points outside the grid take the nearest border value."""
    nx, ny, nz = values.shape
    fx = (px - origin[0]) * inv_res
    fy = (py - origin[1]) * inv_res
    fz = (pz - origin[2]) * inv_res
    fx = min(max(fx, 0.0), nx - 1.0)
    fy = min(max(fy, 0.0), ny - 1.0)
    fz = min(max(fz, 0.0), nz - 1.0)
    x0 = min(int(fx), nx - 2) if nx > 1 else 0
    y0 = min(int(fy), ny - 2) if ny > 1 else 0
    z0 = min(int(fz), nz - 2) if nz > 1 else 0
    x1 = min(x0 + 1, nx - 1)
    y1 = min(y0 + 1, ny - 1)
    z1 = min(z0 + 1, nz - 1)
    tx, ty, tz = fx - x0, fy - y0, fz - z0
    c00 = values[x0, y0, z0] * (1 - tx) + values[x1, y0, z0] * tx
    c10 = values[x0, y1, z0] * (1 - tx) + values[x1, y1, z0] * tx
    c01 = values[x0, y0, z1] * (1 - tx) + values[x1, y0, z1] * tx
    c11 = values[x0, y1, z1] * (1 - tx) + values[x1, y1, z1] * tx
    c0 = c00 * (1 - ty) + c10 * ty
    c1 = c01 * (1 - ty) + c11 * ty
    return c0 * (1 - tz) + c1 * tz


@njit(cache=True, parallel=True)
def _trilinear(values, origin, inv_res, points, out):
    for i in prange(points.shape[0]):
        out[i] = trilinear_at(values, origin, inv_res, points[i, 0], points[i, 1], points[i, 2])


@njit(cache=True)
def _trilinear_serial(values, origin, inv_res, points, out):
    for i in range(points.shape[0]):
        out[i] = trilinear_at(values, origin, inv_res, points[i, 0], points[i, 1], points[i, 2])


_PARALLEL_MIN_POINTS = 4096
"""Below this many points a query runs on one thread: waking the thread pool costs far more
than a few lookups (0.15-0.5 ms for one point on a busy 2-core machine, against ~1 us)."""


@dataclass(frozen=True)
class SignedDistanceField:
    """Signed distance (metres) sampled at voxel centres.

    origin_m: (3,) map coordinates of the centre of voxel (0, 0, 0).
    resolution_m: voxel edge length.
    values: (nx, ny, nz) float32; > 0 free space, < 0 inside solids.
    """

    origin_m: np.ndarray
    resolution_m: float
    values: np.ndarray

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.values.shape)

    @property
    def upper_m(self) -> np.ndarray:
        """Map coordinates of the centre of the last voxel."""
        return self.origin_m + (np.array(self.values.shape) - 1) * self.resolution_m

    def centres(self, axis: int) -> np.ndarray:
        """Voxel-centre coordinates (metres, map) along ``axis`` (0 = x, 1 = y, 2 = z)."""
        return self.origin_m[axis] + self.resolution_m * np.arange(self.values.shape[axis])

    def query(self, points: np.ndarray) -> np.ndarray:
        """(N,) float32 signed distance at points (N, 3) in map; trilinear, clamped to the grid."""
        pts = np.ascontiguousarray(np.atleast_2d(points), dtype=np.float64)
        out = np.empty(len(pts), dtype=np.float32)
        kernel = _trilinear if len(pts) >= _PARALLEL_MIN_POINTS else _trilinear_serial
        kernel(self.values, self.origin_m.astype(np.float64), 1.0 / self.resolution_m, pts, out)
        return out

    @classmethod
    def from_mesh(cls, mesh, lower_m: np.ndarray, upper_m: np.ndarray,
                  resolution_m: float = DEFAULT_RESOLUTION_M) -> "SignedDistanceField":
        """Build over the box [lower_m, upper_m] (map, metres) at ``resolution_m``."""
        from scipy.ndimage import distance_transform_edt

        lower_m = np.asarray(lower_m, dtype=np.float64)
        upper_m = np.asarray(upper_m, dtype=np.float64)
        shape = np.maximum(np.ceil((upper_m - lower_m) / resolution_m).astype(int) + 1, 2)
        origin = lower_m
        solid = _solid_voxels(mesh, origin, resolution_m, tuple(shape))
        if solid.all():
            values = np.full(shape, -np.inf, np.float32)
        elif not solid.any():
            values = np.full(shape, np.inf, np.float32)
        else:
            outside = distance_transform_edt(~solid, sampling=resolution_m)
            inside = distance_transform_edt(solid, sampling=resolution_m)
            half = 0.5 * resolution_m
            values = np.where(solid, -(inside - half), outside - half).astype(np.float32)
        return cls(origin_m=origin, resolution_m=float(resolution_m), values=np.ascontiguousarray(values))

    @classmethod
    def for_scene(cls, scene, resolution_m: float = DEFAULT_RESOLUTION_M, padding_m: float = DEFAULT_PADDING_M,
                  cache_dir: str | Path | None = None) -> "SignedDistanceField":
        """The SDF over the scene's reachable volume, from the on-disk cache when present.

        The cache key is the mesh's vertices and faces, the box and the resolution; a
        changed mesh or setting builds anew. Writes are atomic.
        """
        nav = scene.spec.navigable
        lower = np.array([*nav.polygon.min(axis=0), nav.z_min]) - padding_m
        upper = np.array([*nav.polygon.max(axis=0), nav.z_max]) + padding_m
        mesh = scene.mesh
        digest = hashlib.sha256()
        digest.update(np.ascontiguousarray(mesh.vertices, dtype=np.float64).tobytes())
        digest.update(np.ascontiguousarray(mesh.faces, dtype=np.int64).tobytes())
        digest.update(np.array([*lower, *upper, resolution_m, CACHE_VERSION], dtype=np.float64).tobytes())
        key = digest.hexdigest()[:24]
        folder = Path(cache_dir) if cache_dir is not None else config.cache_dir()
        path = folder / f"sdf-{key}.npz"
        if path.is_file():
            try:
                with np.load(path) as data:
                    return cls(data["origin_m"], float(data["resolution_m"]), np.ascontiguousarray(data["values"]))
            except (OSError, KeyError, ValueError):
                pass  # unreadable cache entry: rebuild and overwrite it
        sdf = cls.from_mesh(mesh, lower, upper, resolution_m)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".sdf-{key}.{os.getpid()}.tmp.npz"
        try:
            np.savez(tmp, origin_m=sdf.origin_m, resolution_m=sdf.resolution_m, values=sdf.values)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        return sdf


def _solid_voxels(mesh, origin: np.ndarray, res: float, shape: tuple[int, int, int]) -> np.ndarray:
    """(nx, ny, nz) bool: voxel centre inside some closed component of the mesh.

    Each connected component is tested on its own by the parity of +z ray crossings over
    the columns under its bounding box, so components that touch or overlap (a car cabin
    standing on its body, a wall on the floor: coincident faces, which a ray caster
    reports once) are still right. Open components contribute their surface voxels.
    """
    nx, ny, nz = shape
    solid = np.zeros(shape, dtype=bool)
    upper = origin + res * (np.array(shape) - 1)
    for part in mesh.split(only_watertight=False):
        lo, hi = part.bounds
        if np.any(hi < origin - res) or np.any(lo > upper + res):
            continue
        if not part.is_watertight or np.min(hi - lo) < 2 * res:
            # Open parts have no inside; thin ones (a table top) could fall between voxel
            # centres: both are rasterised by their surface (conservative by < 1 voxel).
            solid |= _surface_voxels(part, origin, res, shape)
            if not part.is_watertight:
                continue
        ix = np.arange(max(0, int(np.floor((lo[0] - origin[0]) / res))),
                       min(nx, int(np.ceil((hi[0] - origin[0]) / res)) + 1))
        iy = np.arange(max(0, int(np.floor((lo[1] - origin[1]) / res))),
                       min(ny, int(np.ceil((hi[1] - origin[1]) / res)) + 1))
        if len(ix) == 0 or len(iy) == 0:
            continue
        gx, gy = np.meshgrid(ix, iy, indexing="ij")
        # A tiny offset keeps rays off the edges and vertices of axis-aligned geometry,
        # where a crossing could be counted twice or not at all.
        origins = np.column_stack([origin[0] + res * gx.ravel() + 1.37e-5, origin[1] + res * gy.ravel() + 2.71e-5,
                                   np.full(gx.size, lo[2] - 1.0)])
        directions = np.tile([0.0, 0.0, 1.0], (len(origins), 1))
        locations, ray_idx, _ = _all_hits_intersector(part).intersects_location(
            origins, directions, multiple_hits=True)
        if len(ray_idx) == 0:
            continue
        k = np.clip(np.ceil((locations[:, 2] - origin[2]) / res).astype(np.int64), 0, nz)
        toggles = np.zeros((len(origins), nz + 1), dtype=np.int32)
        np.add.at(toggles, (ray_idx, k), 1)
        inside = (np.cumsum(toggles, axis=1)[:, :nz] % 2 == 1).reshape(len(ix), len(iy), nz)
        solid[ix[0]:ix[-1] + 1, iy[0]:iy[-1] + 1, :] |= inside
    return solid


def _all_hits_intersector(mesh):
    """trimesh's ray intersector reporting every crossing (Embree when installed)."""
    try:
        from trimesh.ray.ray_pyembree import RayMeshIntersector
    except ImportError:
        from trimesh.ray.ray_triangle import RayMeshIntersector
    return RayMeshIntersector(mesh)


def _surface_voxels(mesh, origin: np.ndarray, res: float, shape: tuple[int, int, int]) -> np.ndarray:
    """Voxels the surface passes through (for open meshes): dense surface samples binned."""
    solid = np.zeros(shape, dtype=bool)
    count = int(min(2e7, max(1e3, mesh.area / (0.25 * res) ** 2)))
    points, _ = mesh.sample(count, return_index=True, seed=0)
    idx = np.rint((points - origin) / res).astype(np.int64)
    ok = np.all((idx >= 0) & (idx < np.array(shape)), axis=1)
    solid[tuple(idx[ok].T)] = True
    return solid
