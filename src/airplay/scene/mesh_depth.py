"""Depth images from the collision mesh by ray casting (the geometry AirPlayground uses).

Rays leave the camera centre through every pixel centre; the first hit gives the depth.
Embree (the ``embreex`` package) is called directly when installed (about 3 ms for a
224x224 view of a synthetic scene on one core); otherwise trimesh's pure-Python
intersector, which is correct but much slower.
"""

from __future__ import annotations

import numpy as np


def pixel_rays_camera(K: np.ndarray, width: int, height: int) -> np.ndarray:
    """(H*W, 3) ray directions in the optical frame with z = 1, through pixel centres (row-major)."""
    K = np.asarray(K, dtype=np.float64)
    u = np.arange(width) + 0.5
    v = np.arange(height) + 0.5
    uu, vv = np.meshgrid(u, v)
    x = (uu - K[0, 2]) / K[0, 0]
    y = (vv - K[1, 2]) / K[1, 1]
    return np.stack([x.ravel(), y.ravel(), np.ones(width * height)], axis=1)


class MeshRaycaster:
    """Casts rays against one triangle mesh given in the ``map`` frame (first hits only)."""

    def __init__(self, mesh) -> None:
        self.mesh = mesh
        self._rays_cam: np.ndarray | None = None
        self._rays_key: tuple | None = None
        try:
            from embreex import rtcore_scene
            from embreex.mesh_construction import TriangleMesh
        except ImportError:
            import trimesh

            self._scene = None
            self._fallback = trimesh.ray.ray_triangle.RayMeshIntersector(mesh)
            self.engine = "trimesh"
        else:
            self._scene = rtcore_scene.EmbreeScene()
            TriangleMesh(self._scene, np.ascontiguousarray(mesh.triangles, dtype=np.float32))
            self.engine = "embree"

    def first_hits(self, origins: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For rays (R, 3) in map: (hit points (R, 3), NaN where none; face index (R,), -1 where none).

        Directions need not be unit length; hit points are origin + t * direction.
        """
        origins = np.ascontiguousarray(np.broadcast_to(origins, np.shape(directions)), dtype=np.float64)
        directions = np.asarray(directions, dtype=np.float64)
        points = np.full((len(origins), 3), np.nan)
        faces = np.full(len(origins), -1, dtype=np.int64)
        if self._scene is not None:
            res = self._scene.run(origins.astype(np.float32), directions.astype(np.float32), output=1)
            hit = res["geomID"] >= 0
            t = res["tfar"][hit].astype(np.float64)
            points[hit] = origins[hit] + t[:, None] * directions[hit]
            faces[hit] = res["primID"][hit]
            return points, faces
        locs, ray_idx, tri_idx = self._fallback.intersects_location(origins, directions, multiple_hits=False)
        if len(ray_idx):
            dist = np.linalg.norm(locs - origins[ray_idx], axis=1)
            order = np.lexsort((dist, ray_idx))
            ray_sorted = ray_idx[order]
            first = np.r_[True, ray_sorted[1:] != ray_sorted[:-1]]
            keep = order[first]
            points[ray_idx[keep]] = locs[keep]
            faces[ray_idx[keep]] = tri_idx[keep]
        return points, faces

    def depth(self, viewmat: np.ndarray, K: np.ndarray, width: int, height: int) -> np.ndarray:
        """(H, W) float32 depth in metres along the optical axis (z), ``inf`` where a ray hits nothing.

        Args:
            viewmat: (4, 4) world-to-camera (map -> camera_optical, OpenCV).
            K: (3, 3) pinhole intrinsics in pixels.
        """
        viewmat = np.asarray(viewmat, dtype=np.float64)
        cam_to_world = np.linalg.inv(viewmat)
        key = (width, height, *np.asarray(K, dtype=np.float64).ravel().tolist())
        if self._rays_key != key:
            self._rays_cam, self._rays_key = pixel_rays_camera(K, width, height), key
        # Rays with optical z = 1: the hit parameter t is the z-depth itself.
        dirs = self._rays_cam @ cam_to_world[:3, :3].T
        origin = cam_to_world[:3, 3]
        if self._scene is None:
            points, _ = self.first_hits(origin, dirs)
            depth = np.full(width * height, np.inf)
            hit = np.isfinite(points[:, 0])
            depth[hit] = (points[hit] - origin) @ cam_to_world[:3, 2]
            return depth.reshape(height, width).astype(np.float32)
        dirs32 = np.ascontiguousarray(dirs, dtype=np.float32)
        origins32 = np.ascontiguousarray(np.broadcast_to(origin.astype(np.float32), dirs32.shape))
        # Embree releases the GIL: cast the halves of the image on two threads.
        half = len(dirs32) // 2
        other = _pool().submit(self._scene.run, origins32[half:], dirs32[half:], query="DISTANCE")
        first = self._scene.run(origins32[:half], dirs32[:half], query="DISTANCE")
        t = np.concatenate([first, other.result()])
        t[t >= _EMBREE_NO_HIT] = np.inf
        return t.reshape(height, width).astype(np.float32)


_EMBREE_NO_HIT = 1e37
"""embreex reports a miss as a distance of 1e37."""
_POOL = None


def _pool():
    global _POOL
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="airplay-raycast")
    return _POOL
