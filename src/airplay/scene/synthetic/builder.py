"""Scene construction from closed primitives: boxes, vertical cylinders, ellipsoids.

Every primitive is at the same time

* a *solid* (analytic shape, used to hide surface samples buried in other solids, to cast
  sun shadows and to measure free space),
* a closed, outward-wound triangle mesh (a watertight component of the collision mesh),
* a set of *surface patches* (quads and triangles lying exactly on that mesh) that are
  sampled with Gaussians, each patch with a material.

Coordinates: map frame, ENU, z up, metres; the ground surface is z = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

BOX, CYLINDER, ELLIPSOID = 0, 1, 2
FACES = ("+x", "-x", "+y", "-y", "+z", "-z")
# Box corners are indexed sx + 2 sy + 4 sz (s = 0: -half, 1: +half along the local axis);
# each face is (o, o + eu, o + eu + ev, o + ev), counter-clockwise seen from outside.
_BOX_FACE_CORNERS = {
    "+x": (1, 3, 7, 5), "-x": (2, 0, 4, 6), "+y": (3, 2, 6, 7),
    "-y": (0, 1, 5, 4), "+z": (4, 5, 7, 6), "-z": (0, 2, 3, 1),
}


@dataclass(frozen=True)
class Material:
    """A procedural material: ``kind`` selects the texture function, ``params`` tune it."""

    kind: str
    params: tuple = ()

    def get(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


@lru_cache(maxsize=4)
def _unit_icosphere(subdivisions: int) -> tuple[np.ndarray, np.ndarray]:
    import trimesh

    sphere = trimesh.creation.icosphere(subdivisions=subdivisions, radius=1.0)
    return np.asarray(sphere.vertices, dtype=np.float64), np.asarray(sphere.faces, dtype=np.int64)


def _yaw_axes(yaw: float) -> np.ndarray:
    """(3, 3) rows: the local x, y, z axes of a frame yawed about map z."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])


class SceneBuilder:
    """Collects primitives; :mod:`layouts` fill one, the sampler and mesher read it."""

    def __init__(self) -> None:
        self.materials: list[Material] = []
        self._material_ids: dict[Material, int] = {}
        self.kinds: list[int] = []
        self.centers: list[np.ndarray] = []
        self.halves: list[np.ndarray] = []
        self.yaws: list[float] = []
        self._verts: list[np.ndarray] = []
        self._faces: list[np.ndarray] = []
        self._n_verts = 0
        # quads: origin(3) eu(3) ev(3) u0 v0 | ints: material part; detail
        self._quads: list[tuple] = []
        # triangles: a(3) b(3) c(3) | material part; detail
        self._tris: list[tuple] = []

    # -- materials ---------------------------------------------------------------------
    def material(self, kind: str, **params: Any) -> int:
        """Index of the material ``kind`` with ``params`` (identical requests share one)."""
        key = Material(kind, tuple(sorted(params.items())))
        if key not in self._material_ids:
            self._material_ids[key] = len(self.materials)
            self.materials.append(key)
        return self._material_ids[key]

    # -- primitives --------------------------------------------------------------------
    def _add_solid(self, kind: int, center: np.ndarray, half: np.ndarray, yaw: float,
                   verts: np.ndarray, faces: np.ndarray) -> int:
        self.kinds.append(kind)
        self.centers.append(np.asarray(center, dtype=np.float64))
        self.halves.append(np.asarray(half, dtype=np.float64))
        self.yaws.append(float(yaw))
        self._verts.append(verts)
        self._faces.append(faces + self._n_verts)
        self._n_verts += len(verts)
        return len(self.kinds) - 1

    def box(self, lo: Any, hi: Any, material: int, *, faces: dict[str, int] | None = None,
            skip: tuple[str, ...] = (), detail: float = 1.0, face_detail: dict[str, float] | None = None) -> int:
        """Axis-aligned box between corners ``lo`` and ``hi``; see :meth:`box_at`."""
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        return self.box_at((lo + hi) / 2, hi - lo, 0.0, material, faces=faces, skip=skip, detail=detail,
                           face_detail=face_detail)

    def box_at(self, center: Any, size: Any, yaw: float, material: int, *,
               faces: dict[str, int] | None = None, skip: tuple[str, ...] = (), detail: float = 1.0,
               face_detail: dict[str, float] | None = None) -> int:
        """Box of ``size`` (x, y, z extents in its own frame) at ``center``, yawed about z.

        ``faces`` overrides the material per face ("+x", "-x", "+y", "-y", "+z", "-z", in
        the box frame); faces in ``skip`` are part of the mesh but carry no Gaussians
        (never seen from where the vehicle flies). ``detail`` scales the sample density,
        ``face_detail`` overrides it per face.
        """
        center, half = np.asarray(center, dtype=np.float64), np.asarray(size, dtype=np.float64) / 2
        if (half <= 0).any():
            raise ValueError(f"box size must be positive, got {size}")
        axes = _yaw_axes(yaw)
        signs = np.array([[(i >> k) & 1 for k in range(3)] for i in range(8)], dtype=np.float64) * 2 - 1
        corners = center + (signs * half) @ axes
        tri_faces = []
        part = len(self.kinds)
        for name in FACES:
            a, b, c, d = _BOX_FACE_CORNERS[name]
            tri_faces += [(a, b, c), (a, c, d)]
            if name in skip:
                continue
            mat = (faces or {}).get(name, material)
            o, eu, ev = corners[a], corners[b] - corners[a], corners[d] - corners[a]
            u0 = float(o @ eu) / float(np.linalg.norm(eu))
            v0 = float(o @ ev) / float(np.linalg.norm(ev))
            self._quads.append((*o, *eu, *ev, u0, v0, mat, part, (face_detail or {}).get(name, detail)))
        return self._add_solid(BOX, center, half, yaw, corners, np.array(tri_faces, dtype=np.int64))

    def cylinder(self, x: float, y: float, z0: float, z1: float, radius: float, material: int, *,
                 cap: int | None = None, segments: int = 12, detail: float = 1.0) -> int:
        """Vertical cylinder (a prism of ``segments`` sides) from z0 to z1."""
        n = segments
        theta = 2 * np.pi * np.arange(n) / n
        ring = np.stack([x + radius * np.cos(theta), y + radius * np.sin(theta)], axis=1)
        bottom = np.column_stack([ring, np.full(n, z0)])
        top = np.column_stack([ring, np.full(n, z1)])
        verts = np.concatenate([bottom, top])
        part = len(self.kinds)
        faces = []
        chord = float(np.linalg.norm(ring[1] - ring[0]))
        for i in range(n):
            j = (i + 1) % n
            faces += [(i, j, n + j), (i, n + j, n + i)]
            eu, ev = bottom[j] - bottom[i], top[i] - bottom[i]
            self._quads.append((*bottom[i], *eu, *ev, i * chord, z0, material, part, detail))
        cap_mat = material if cap is None else cap
        for i in range(1, n - 1):
            faces += [(n, n + i, n + i + 1), (0, i + 1, i)]
            self._tris.append((*top[0], *top[i], *top[i + 1], cap_mat, part, detail))
            self._tris.append((*bottom[0], *bottom[i + 1], *bottom[i], cap_mat, part, detail))
        center = np.array([x, y, (z0 + z1) / 2])
        half = np.array([radius, radius, (z1 - z0) / 2])
        return self._add_solid(CYLINDER, center, half, 0.0, verts, np.array(faces, dtype=np.int64))

    def ellipsoid(self, center: Any, radii: Any, material: int, *, subdivisions: int = 1,
                  yaw: float = 0.0, detail: float = 1.0) -> int:
        """Ellipsoid (an icosphere scaled by ``radii`` in its own frame, yawed about z)."""
        unit, tri = _unit_icosphere(subdivisions)
        center, radii = np.asarray(center, dtype=np.float64), np.asarray(radii, dtype=np.float64)
        verts = center + (unit * radii) @ _yaw_axes(yaw)
        part = len(self.kinds)
        for a, b, c in tri:
            self._tris.append((*verts[a], *verts[b], *verts[c], material, part, detail))
        return self._add_solid(ELLIPSOID, center, radii, yaw, verts, tri.copy())

    # -- read-out ----------------------------------------------------------------------
    def solid_arrays(self) -> dict[str, np.ndarray]:
        """kind (S,), center (S, 3), half (S, 3), yaw (S,), aabb_lo/aabb_hi (S, 3)."""
        lo = np.array([v.min(axis=0) for v in self._verts])
        hi = np.array([v.max(axis=0) for v in self._verts])
        kinds = np.array(self.kinds, dtype=np.int64)
        centers, halves = np.array(self.centers), np.array(self.halves)
        # Analytic cylinders and ellipsoids bulge past their inscribed meshes.
        round_ = kinds != BOX
        lo[round_] = np.minimum(lo[round_], centers[round_] - halves[round_].max(axis=1, keepdims=True))
        hi[round_] = np.maximum(hi[round_], centers[round_] + halves[round_].max(axis=1, keepdims=True))
        return {"kind": kinds, "center": centers, "half": halves,
                "yaw": np.array(self.yaws), "aabb_lo": lo, "aabb_hi": hi}

    def quads(self) -> dict[str, np.ndarray]:
        a = np.array(self._quads, dtype=np.float64).reshape(-1, 14)
        return {"origin": a[:, 0:3], "eu": a[:, 3:6], "ev": a[:, 6:9], "u0": a[:, 9], "v0": a[:, 10],
                "material": a[:, 11].astype(np.int64), "part": a[:, 12].astype(np.int64), "detail": a[:, 13]}

    def triangles(self) -> dict[str, np.ndarray]:
        a = np.array(self._tris, dtype=np.float64).reshape(-1, 12)
        return {"a": a[:, 0:3], "b": a[:, 3:6], "c": a[:, 6:9],
                "material": a[:, 9].astype(np.int64), "part": a[:, 10].astype(np.int64), "detail": a[:, 11]}

    def mesh_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(vertices (V, 3), faces (F, 3)) of all primitives, each a closed component."""
        return np.concatenate(self._verts), np.concatenate(self._faces)

    def mesh(self):
        """The collision mesh as a ``trimesh.Trimesh`` (not processed: the order is kept)."""
        import trimesh

        v, f = self.mesh_arrays()
        return trimesh.Trimesh(vertices=v, faces=f, process=False)
