"""Collision meshes (PLY, OBJ, GLB) through trimesh, validated."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError

MIN_FACE_AREA_M2 = 1e-12


def load_collision_mesh(path: str | Path):
    """Load a triangle mesh (trimesh.Trimesh); scenes (GLB) are flattened into one mesh.

    Raises :class:`SceneError` naming the file when it is missing, unreadable, empty, has
    non-finite vertices, or only degenerate (zero-area) faces. Degenerate faces among good
    ones are dropped.
    """
    import trimesh

    path = Path(path)
    if not path.is_file():
        raise SceneError(path, "file not found")
    try:
        loaded = trimesh.load(path, force=None, process=False)
    except Exception as err:  # trimesh raises many types for corrupt files
        raise SceneError(path, f"cannot read mesh: {type(err).__name__}: {err}") from None
    if isinstance(loaded, trimesh.Scene):
        if not loaded.geometry:
            raise SceneError(path, "mesh is empty (the file holds no geometry)")
        loaded = loaded.to_geometry() if hasattr(loaded, "to_geometry") else loaded.dump(concatenate=True)
    if not isinstance(loaded, trimesh.Trimesh):
        raise SceneError(path, f"holds a {type(loaded).__name__}, not a triangle mesh (no faces?)")
    mesh = loaded
    if len(mesh.faces) == 0 or len(mesh.vertices) == 0:
        raise SceneError(path, "mesh is empty (no faces)")
    if not np.isfinite(mesh.vertices).all():
        raise SceneError(path, "mesh has NaN or infinite vertex coordinates")
    if int(mesh.faces.max()) >= len(mesh.vertices) or int(mesh.faces.min()) < 0:
        raise SceneError(path, "mesh faces index vertices that do not exist")
    areas = mesh.area_faces
    good = areas > MIN_FACE_AREA_M2
    if not good.any():
        raise SceneError(path, f"mesh is degenerate: all {len(areas)} faces have zero area")
    if not good.all():
        mesh = trimesh.Trimesh(vertices=mesh.vertices, faces=mesh.faces[good], process=False)
    return mesh


def transform_mesh(mesh, scale: float, rotation: np.ndarray, translation: np.ndarray):
    """A copy of ``mesh`` under x' = scale * R x + t."""
    m = np.eye(4)
    m[:3, :3] = scale * np.asarray(rotation, dtype=np.float64)
    m[:3, 3] = translation
    out = mesh.copy()
    out.apply_transform(m)
    return out
