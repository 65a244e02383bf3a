"""A loaded scene: splat and collision mesh in the map frame, plus what scene.yaml declares."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import Gaussians
from airplay.scene.mesh_io import load_collision_mesh, transform_mesh
from airplay.scene.spec import SceneSpec, parse_scene_yaml

MIN_OVERLAP_FRACTION = 0.5
"""Share of Gaussian means that must lie in the (grown) mesh bounds for splat and mesh to
count as overlapping; real captures carry far-away floaters, so this is not 1."""


def load_gaussians(path: str | Path) -> Gaussians:
    """Load a splat by suffix: ``.ply`` (INRIA layout) or ``.splat`` (antimatter15)."""
    from airplay.scene.ply_io import read_gaussians_ply
    from airplay.scene.splat_io import read_splat

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".ply":
        return read_gaussians_ply(path)
    if suffix == ".splat":
        return read_splat(path)
    raise SceneError(path, f"unknown splat format {suffix!r}; expected .ply or .splat")


def overlap_fraction(gaussians: Gaussians, mesh_bounds: np.ndarray) -> float:
    """Share of Gaussian means inside the mesh's AABB grown by 1 m + 10 % of its extent."""
    lo, hi = np.asarray(mesh_bounds[0]), np.asarray(mesh_bounds[1])
    grow = 1.0 + 0.1 * (hi - lo)
    inside = np.all((gaussians.means >= lo - grow) & (gaussians.means <= hi + grow), axis=1)
    return float(inside.mean())


@dataclass(frozen=True)
class Scene:
    """Splat and collision mesh aligned in ``map`` (ENU, metres) with their spec.

    gaussians: :class:`Gaussians` in map.
    mesh: ``trimesh.Trimesh`` in map.
    spec: the parsed scene.yaml.
    """

    spec: SceneSpec
    gaussians: Gaussians
    mesh: object

    @property
    def name(self) -> str:
        return self.spec.name

    @classmethod
    def load(cls, folder: str | Path) -> "Scene":
        """Load and validate a scene folder; :class:`SceneError` names the file and the problem."""
        spec = parse_scene_yaml(folder)
        raw = load_gaussians(spec.splat_file)
        s, r, t = spec.splat_alignment.matrix()
        gaussians = raw if spec.splat_alignment.is_identity() else raw.transformed(s, r, t)
        mesh = load_collision_mesh(spec.collision_file)
        if not spec.collision_alignment.is_identity():
            mesh = transform_mesh(mesh, *spec.collision_alignment.matrix())
        frac = overlap_fraction(gaussians, mesh.bounds)
        if frac < MIN_OVERLAP_FRACTION:
            g_lo, g_hi = gaussians.bounds()
            raise SceneError(
                spec.splat_file,
                f"splat and collision mesh do not overlap: only {frac:.0%} of Gaussians lie within the mesh "
                f"bounds (splat {np.round(g_lo, 2).tolist()}..{np.round(g_hi, 2).tolist()}, mesh "
                f"{np.round(mesh.bounds[0], 2).tolist()}..{np.round(mesh.bounds[1], 2).tolist()} in map); "
                "check splat.convention and splat.transform in scene.yaml",
            )
        return cls(spec=spec, gaussians=gaussians, mesh=mesh)
