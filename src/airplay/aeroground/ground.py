"""The ground agent: where on the mesh a ground robot can stand, and its sampled poses.

Walkable ground (map frame, metres): at a point (x, y) inside the scene's navigable polygon,
rays cast straight down from above the mesh give every surface under the point; the ground
is the highest upward-facing surface (face normal z > :data:`UP_NORMAL_Z`) with nothing
overhanging it within :data:`HEADROOM_M` (a table top, a tree crown, a low ceiling) and at
most :data:`GROUND_STEP_M` above the lowest upward-facing surface there (so a roof or a
table top is not ground, a pavement over the base slab is), and below the lower bound of
the navigable region's flight band (the top of a wall or a roof is not ground either). The
point is walkable when it has such a ground, no mesh surface lies within :data:`CLEARANCE_M`
horizontally at :data:`PROBE_HEIGHTS_M` (rays in :data:`PROBE_DIRECTIONS` directions), and
the point lies outside every instance footprint grown by :data:`CLEARANCE_M`. The robot is
kinematic: a pose is (x, y, ground z, yaw), nothing more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

UP_NORMAL_Z = 0.7
HEADROOM_M = 2.0
GROUND_STEP_M = 0.5
CLEARANCE_M = 0.5
PROBE_HEIGHTS_M = (0.3, 1.0)
PROBE_DIRECTIONS = 8
MAX_SURFACES = 8


@dataclass(frozen=True)
class GroundPose:
    """A ground agent pose: position on the walkable surface (map, m) and heading (rad, CCW from east)."""

    x: float
    y: float
    z: float
    yaw_rad: float

    def to_dict(self) -> dict:
        return {"x": round(self.x, 4), "y": round(self.y, 4), "z": round(self.z, 4), "yaw_rad": round(self.yaw_rad, 6)}


def check_in_scene(scene, x: float, y: float, z: float) -> None:
    """Raise ValueError naming the coordinate unless a ground agent's base at (x, y, z) (map, m)
    lies in ``scene``'s bounds: (x, y) inside the navigable polygon and z within the collision
    mesh's height range (all finite)."""
    if not all(math.isfinite(v) for v in (x, y, z)):
        raise ValueError(f"position ({x}, {y}, {z}) is not finite")
    if not bool(scene.spec.navigable.contains_xy(np.array([[x, y]], dtype=np.float64))[0]):
        raise ValueError(f"(x, y) = ({x:.3f}, {y:.3f}) m is outside scene {scene.name}'s navigable polygon")
    lo, hi = (float(v) for v in scene.mesh.bounds[:, 2])
    if not lo <= z <= hi:
        raise ValueError(f"z = {z:.3f} m is outside scene {scene.name}'s mesh height range [{lo:.3f}, {hi:.3f}] m")


class GroundProbe:
    """Walkable-ground queries on one scene: mesh (``trimesh``, map frame) through a
    :class:`airplay.scene.mesh_depth.MeshRaycaster`, the navigable region and the instance footprints."""

    def __init__(self, caster, mesh, region, footprints: list[np.ndarray]) -> None:
        self.caster = caster
        self.normals = np.asarray(mesh.face_normals)
        self.top_z = float(mesh.bounds[1, 2]) + 1.0
        self.bottom_z = float(mesh.bounds[0, 2]) - 1.0
        self.region = region
        self.footprints = footprints  # per instance: [xmin, ymin, xmax, ymax]

    def surfaces(self, xy: np.ndarray) -> list[tuple[float, bool]]:
        """(z, upward-facing) of every surface under ``xy``, top down."""
        out = []
        z = self.top_z
        for _ in range(MAX_SURFACES):
            pts, faces = self.caster.first_hits(np.array([[xy[0], xy[1], z]]), np.array([[0.0, 0.0, -1.0]]))
            if faces[0] < 0:
                break
            hz = float(pts[0, 2])
            out.append((hz, bool(self.normals[faces[0], 2] > UP_NORMAL_Z)))
            z = hz - 1e-3
            if z < self.bottom_z:
                break
        return out

    def ground_z(self, xy) -> float | None:
        """Height (m) of the walkable surface at ``xy``, or None where the point is not walkable."""
        xy = np.asarray(xy, dtype=np.float64)
        if not bool(self.region.contains_xy(xy[None])[0]):
            return None
        for xmin, ymin, xmax, ymax in self.footprints:
            if xmin - CLEARANCE_M <= xy[0] <= xmax + CLEARANCE_M and ymin - CLEARANCE_M <= xy[1] <= ymax + CLEARANCE_M:
                return None
        surf = self.surfaces(xy)
        ups = [i for i, (_, up) in enumerate(surf) if up]
        if not ups:
            return None
        lowest = surf[ups[-1]][0]
        grounds = [i for i in ups if surf[i][0] - lowest <= GROUND_STEP_M
                   and (i == 0 or surf[i - 1][0] - surf[i][0] >= HEADROOM_M)]
        if not grounds:
            return None
        gz = surf[grounds[0]][0]
        if gz >= self.region.z_min:
            return None
        angles = np.arange(PROBE_DIRECTIONS) * 2 * math.pi / PROBE_DIRECTIONS
        dirs = np.column_stack([np.cos(angles), np.sin(angles), np.zeros_like(angles)])
        for h in PROBE_HEIGHTS_M:
            pts, faces = self.caster.first_hits(np.array([xy[0], xy[1], gz + h]), dirs)
            hit = faces >= 0
            if hit.any() and np.linalg.norm(pts[hit, :2] - xy[None], axis=1).min() < CLEARANCE_M:
                return None
        return gz

    def ceiling_above(self, xy, gz: float) -> float | None:
        """Height above the ground (m) of the first surface over ``xy`` (a ceiling), or None (open sky)."""
        pts, faces = self.caster.first_hits(np.array([[xy[0], xy[1], gz + 0.05]]), np.array([[0.0, 0.0, 1.0]]))
        return None if faces[0] < 0 else float(pts[0, 2] - gz)

    def inside_solid(self, point) -> bool:
        """True when ``point`` (map, m) is inside a closed solid: the first surface above it faces up."""
        pts, faces = self.caster.first_hits(np.asarray(point, dtype=np.float64)[None], np.array([[0.0, 0.0, 1.0]]))
        return bool(faces[0] >= 0 and self.normals[faces[0], 2] > 0.0)

    def sample_pose(self, rng: np.random.Generator, tries: int = 200) -> GroundPose | None:
        """A walkable pose drawn uniformly over the navigable polygon (heading uniform), or None."""
        lo, hi = self.region.polygon.min(axis=0), self.region.polygon.max(axis=0)
        for _ in range(tries):
            xy = rng.uniform(lo, hi)
            yaw = float(rng.uniform(-math.pi, math.pi))
            gz = self.ground_z(xy)
            if gz is not None:
                return GroundPose(float(xy[0]), float(xy[1]), gz, yaw)
        return None

    def straight_path(self, start: GroundPose, yaw_rad: float, steps: int, step_m: float) -> list[GroundPose] | None:
        """``steps`` + 1 poses from ``start`` straight along ``yaw_rad``, each walkable and with
        walkable ground every 0.5 m between them; None where the way is blocked."""
        out = [GroundPose(start.x, start.y, start.z, yaw_rad)]
        d = np.array([math.cos(yaw_rad), math.sin(yaw_rad)])
        n_check = max(1, int(math.ceil(step_m / 0.5)))
        for k in range(1, steps + 1):
            for j in range(1, n_check + 1):
                xy = np.array([start.x, start.y]) + d * step_m * (k - 1 + j / n_check)
                gz = self.ground_z(xy)
                if gz is None:
                    return None
            out.append(GroundPose(float(xy[0]), float(xy[1]), gz, yaw_rad))
        return out
