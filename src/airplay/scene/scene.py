"""A loaded scene: splat and collision mesh in the map frame, plus what scene.yaml declares.

Two ways in. :meth:`Scene.load` reads and validates everything at once (``airplay scene
check``, tools, tests). :meth:`Scene.open` parses and validates scene.yaml (the files it
names must exist) and reads the splat and the collision mesh on first use, each once:
a process that never renders never reads the splat (hundreds of MB for a real capture),
one that never needs collision geometry never reads the mesh. The checks are the same
either way; an opened scene runs the splat's checks, including the splat/mesh overlap
check, when its splat is first read, and raises the same :class:`SceneError` naming the
file then. ``dataclasses.replace(scene, spec=...)`` shares the files read (or to be read).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import Gaussians
from airplay.scene.lazy import Lazy
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


def _load_mesh_in_map(spec: SceneSpec):
    """The collision mesh named by ``spec`` (``trimesh.Trimesh``), moved into map; SceneError names the file."""
    mesh = load_collision_mesh(spec.collision_file)
    if not spec.collision_alignment.is_identity():
        mesh = transform_mesh(mesh, *spec.collision_alignment.matrix())
    return mesh


def _load_gaussians_in_map(spec: SceneSpec) -> Gaussians:
    """The splat named by ``spec``, moved into map (not yet checked against the mesh)."""
    raw = load_gaussians(spec.splat_file)
    s, r, t = spec.splat_alignment.matrix()
    return raw if spec.splat_alignment.is_identity() else raw.transformed(s, r, t)


def _check_overlap(spec: SceneSpec, gaussians: Gaussians, mesh_bounds: np.ndarray) -> None:
    """Raise a SceneError naming the splat file unless at least :data:`MIN_OVERLAP_FRACTION` of
    the Gaussians (map) lie within the collision mesh's grown bounds (map, m, (2, 3))."""
    frac = overlap_fraction(gaussians, mesh_bounds)
    if frac < MIN_OVERLAP_FRACTION:
        g_lo, g_hi = gaussians.bounds()
        raise SceneError(
            spec.splat_file,
            f"splat and collision mesh do not overlap: only {frac:.0%} of Gaussians lie within the mesh "
            f"bounds (splat {np.round(g_lo, 2).tolist()}..{np.round(g_hi, 2).tolist()}, mesh "
            f"{np.round(mesh_bounds[0], 2).tolist()}..{np.round(mesh_bounds[1], 2).tolist()} in map); "
            "check splat.convention and splat.transform in scene.yaml",
        )


class SceneFiles:
    """The splat and the collision mesh of one scene.yaml, each read (and checked) on first use.

    ``gaussians`` reads the splat, then the mesh (its bounds are needed for the overlap
    check), then checks that they overlap: the order and the errors of an eager load.
    ``mesh`` reads the mesh only. Both are :class:`~airplay.scene.lazy.Lazy` (thread-safe, once).
    """

    def __init__(self, spec: SceneSpec) -> None:
        self.mesh: Lazy = Lazy(lambda: _load_mesh_in_map(spec))
        self.gaussians: Lazy[Gaussians] = Lazy(lambda: self._checked_gaussians(spec))

    def _checked_gaussians(self, spec: SceneSpec) -> Gaussians:
        gaussians = _load_gaussians_in_map(spec)
        _check_overlap(spec, gaussians, self.mesh.get().bounds)
        return gaussians


@dataclass(frozen=True)
class Scene:
    """Splat and collision mesh aligned in ``map`` (ENU, metres) with their spec.

    gaussians: :class:`Gaussians` in map (read on first access for an opened scene).
    mesh: ``trimesh.Trimesh`` in map (likewise).
    spec: the parsed scene.yaml.
    """

    spec: SceneSpec
    _files: SceneFiles = field(repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gaussians(self) -> Gaussians:
        """The splat in map; read, checked against the mesh and kept on first access."""
        return self._files.gaussians.get()

    @property
    def mesh(self):
        """The collision mesh (``trimesh.Trimesh``) in map; read and kept on first access."""
        return self._files.mesh.get()

    def loaded_parts(self) -> frozenset[str]:
        """Which of "gaussians" and "mesh" have been read so far."""
        return frozenset(name for name in ("gaussians", "mesh") if getattr(self._files, name).built)

    @classmethod
    def open(cls, folder: str | Path) -> "Scene":
        """Parse and validate ``folder``'s scene.yaml (the files it names must exist); the splat
        and mesh are read, and checked, on first access. :class:`SceneError` names the file."""
        spec = parse_scene_yaml(folder)
        return cls(spec, SceneFiles(spec))

    @classmethod
    def load(cls, folder: str | Path) -> "Scene":
        """Load and validate a scene folder now, everything (scene.yaml, splat, mesh, their
        overlap); :class:`SceneError` names the file and the problem."""
        scene = cls.open(folder)
        scene._files.gaussians.get()  # reads the splat, then the mesh, and checks their overlap
        return scene


def scene_dirs(specs: list[str]) -> list[Path]:
    """Scene folders from arguments: a scene folder, or a folder whose sub-folders are scenes."""
    dirs: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if (path / "scene.yaml").is_file():
            dirs.append(path)
        elif path.is_dir() and any((p / "scene.yaml").is_file() for p in path.iterdir()):
            dirs.extend(sorted(p for p in path.iterdir() if (p / "scene.yaml").is_file()))
        else:
            raise SceneError(path, "not a scene folder (no scene.yaml) nor a folder of scenes")
    return dirs
