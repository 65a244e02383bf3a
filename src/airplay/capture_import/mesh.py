"""From the fused field to a collision mesh: marching cubes (PyMCubes), then simplification
(fast-simplification, quadric decimation) to a face budget.

The field is > 0 in observed free space and < 0 in solids and never-observed space (map,
ENU, metres). Outside the grid counts as free, so every solid gets a closed surface.

Why the mesh is made in two overlapping pieces: airplay's SDF (``airplay.sim.sdf``) decides
inside/outside per closed mesh component by the parity of vertical ray crossings. The free
space of a capture is a pocket inside a solid shell (ground below, unobserved space around);
as one surface, the pocket's inner wall would be a closed component whose parity "inside"
is the free space. Cutting the solid at a height ``cut_z_m`` inside the flight band into a
lower and an upper piece (overlapping by two voxels) opens the pocket in each piece, so
every closed component bounds solid. Free pockets that the cut does not cross stay closed
and count as solid: unreachable anyway, and the safe side.
"""

from __future__ import annotations

import numpy as np


def _marching_cubes(field: np.ndarray, origin: np.ndarray, voxel: float):
    """trimesh.Trimesh of the zero level set of ``field`` (free space as outside), map frame."""
    import mcubes
    import trimesh

    padded = np.pad(field, 1, mode="constant", constant_values=1.0).astype(np.float64)
    # PyMCubes takes the inside where the volume exceeds the isovalue: negate (solid > 0).
    verts, faces = mcubes.marching_cubes(-padded, 0.0)
    if len(faces) == 0:
        return trimesh.Trimesh(np.zeros((0, 3)), np.zeros((0, 3), np.int64), process=False)
    verts = origin + voxel * (verts - 1.0)
    return trimesh.Trimesh(verts, faces, process=True)


def simplify(mesh, max_faces: int):
    """Quadric decimation to at most ``max_faces`` (the mesh itself when already within)."""
    import fast_simplification
    import trimesh

    if len(mesh.faces) <= max_faces or max_faces <= 0:
        return mesh
    reduction = 1.0 - max_faces / len(mesh.faces)
    v, f = fast_simplification.simplify(np.asarray(mesh.vertices, np.float32), np.asarray(mesh.faces, np.int32),
                                        target_reduction=float(reduction))
    return trimesh.Trimesh(v, f, process=True)


def surface_mesh(field: np.ndarray, origin: np.ndarray, voxel: float):
    """The whole zero level set as one mesh (for measuring against a true mesh, not for collision)."""
    return _marching_cubes(field, origin, voxel)


def collision_mesh(field: np.ndarray, origin: np.ndarray, voxel: float, cut_z_m: float, max_faces: int):
    """The collision mesh: two pieces cut at ``cut_z_m`` (see the module docstring), each simplified
    to half of ``max_faces``; components that simplification opened are replaced by their
    unsimplified originals so every piece stays closed."""
    import trimesh

    kc = int(np.clip(round((cut_z_m - origin[2]) / voxel), 1, field.shape[2] - 2))
    lower = field.copy()
    lower[:, :, kc + 2:] = 1.0
    upper = field.copy()
    upper[:, :, :kc] = 1.0
    parts = []
    for piece in (lower, upper):
        raw = _marching_cubes(piece, origin, voxel)
        if len(raw.faces) == 0:
            continue
        simple = simplify(raw, max_faces // 2)
        parts.append(simple if simple.is_watertight or not raw.is_watertight else raw)
    if not parts:
        raise ValueError("the fused volume holds no surface: nothing was observed as free space")
    return trimesh.util.concatenate(parts)
