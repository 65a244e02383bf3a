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

MISSING_EXTRA = ("airplay scene import needs PyMCubes and fast-simplification: "
                 "pip install -e '.[import]' (both are small numpy-only wheels)")


def _mcubes():
    try:
        import mcubes
    except ImportError:
        raise RuntimeError(MISSING_EXTRA) from None
    return mcubes


def _marching_cubes(field: np.ndarray, origin: np.ndarray, voxel: float):
    """trimesh.Trimesh of the zero level set of ``field`` (free space as outside), map frame."""
    import trimesh

    mcubes = _mcubes()

    padded = np.pad(field, 1, mode="constant", constant_values=1.0).astype(np.float64)
    # No grid value exactly on the level: vertices would coincide and leave zero-area faces,
    # which the scene loader drops, opening the surface.
    padded[padded == 0.0] = 1e-4
    # PyMCubes takes the inside where the volume exceeds the isovalue: negate (solid > 0).
    verts, faces = mcubes.marching_cubes(-padded, 0.0)
    if len(faces) == 0:
        return trimesh.Trimesh(np.zeros((0, 3)), np.zeros((0, 3), np.int64), process=False)
    verts = origin + voxel * (verts - 1.0)
    return _drop_degenerate(trimesh.Trimesh(verts, faces, process=True))


def _drop_degenerate(mesh):
    """The mesh as it will read back from collision.ply (float32 vertices, merged where they
    coincide), without the faces the scene loader would drop (area <= MIN_FACE_AREA_M2)."""
    from airplay.scene.mesh_io import MIN_FACE_AREA_M2

    mesh.vertices = np.asarray(mesh.vertices, np.float32).astype(np.float64)
    mesh.merge_vertices()
    good = mesh.area_faces > MIN_FACE_AREA_M2
    if not good.all():
        mesh.update_faces(good)
        mesh.remove_unreferenced_vertices()
    return mesh


def simplify(mesh, max_faces: int):
    """Quadric decimation to at most ``max_faces`` (the mesh itself when already within)."""
    import trimesh

    try:
        import fast_simplification
    except ImportError:
        raise RuntimeError(MISSING_EXTRA) from None
    if len(mesh.faces) <= max_faces or max_faces <= 0:
        return mesh
    reduction = 1.0 - max_faces / len(mesh.faces)
    v, f = fast_simplification.simplify(np.asarray(mesh.vertices, np.float32), np.asarray(mesh.faces, np.int32),
                                        target_reduction=float(reduction))
    return _drop_degenerate(trimesh.Trimesh(v, f, process=True))


MAX_COARSENINGS = 2
COARSEN_ABOVE = 4
"""A piece whose raw surface has more than this many times its face budget is first remade from
a field twice as coarse (up to :data:`MAX_COARSENINGS` times), so decimation stays moderate."""


def _min_pool(field: np.ndarray) -> np.ndarray:
    """The field on a grid twice as coarse, each coarse voxel the minimum of its 2x2x2 (solid wins)."""
    nx, ny, nz = (s + (s % 2) for s in field.shape)
    padded = np.pad(field, [(0, nx - field.shape[0]), (0, ny - field.shape[1]), (0, nz - field.shape[2])], mode="edge")
    return padded.reshape(nx // 2, 2, ny // 2, 2, nz // 2, 2).min(axis=(1, 3, 5))


def _closed_simplified(raw, max_faces: int, voxel: float) -> list:
    """Components of ``raw`` simplified to about ``max_faces`` in all; a component that decimation
    left open (its parity inside would be wrong) is replaced by the raw components it overlaps."""
    simple = simplify(raw, max_faces)
    if simple is raw:
        return [raw]
    good, bad_boxes = [], []
    for part in simple.split(only_watertight=False):
        if part.is_watertight:
            good.append(part)
        else:
            bad_boxes.append(part.bounds)
    if not bad_boxes:
        return good
    pad = 2.0 * voxel
    for part in raw.split(only_watertight=False):
        lo, hi = part.bounds
        if any(np.all(lo <= b[1] + pad) and np.all(hi >= b[0] - pad) for b in bad_boxes):
            good.append(part)
    return good


def surface_mesh(field: np.ndarray, origin: np.ndarray, voxel: float):
    """The whole zero level set as one mesh (for measuring against a true mesh, not for collision)."""
    return _marching_cubes(field, origin, voxel)


def collision_mesh(field: np.ndarray, origin: np.ndarray, voxel: float, cut_z_m: float, max_faces: int,
                   _coarsened: int = 0):
    """The collision mesh: two pieces cut at ``cut_z_m`` (see the module docstring), each simplified
    to half of ``max_faces``; components that simplification opened are replaced by their
    unsimplified originals so every piece stays closed. Still over budget, the whole is remade
    from a field twice as coarse (min-pooled: solid wins), up to :data:`MAX_COARSENINGS` times."""
    mesh = _collision_mesh(field, origin, voxel, cut_z_m, max_faces)
    if len(mesh.faces) > max_faces and _coarsened < MAX_COARSENINGS:
        return collision_mesh(_min_pool(field), origin + 0.5 * voxel, 2.0 * voxel, cut_z_m, max_faces, _coarsened + 1)
    return mesh


def _collision_mesh(field: np.ndarray, origin: np.ndarray, voxel: float, cut_z_m: float, max_faces: int):
    import trimesh

    kc = int(np.clip(round((cut_z_m - origin[2]) / voxel), 1, field.shape[2] - 2))
    lower = field.copy()
    lower[:, :, kc + 2:] = 1.0
    upper = field.copy()
    upper[:, :, :kc] = 1.0
    parts = []
    for piece in (lower, upper):
        raw, v = _marching_cubes(piece, origin, voxel), voxel
        for _ in range(MAX_COARSENINGS):
            if len(raw.faces) <= COARSEN_ABOVE * max_faces // 2:
                break
            piece, v = _min_pool(piece), 2.0 * v  # conservative: a coarse voxel is solid if any part is
            raw = _marching_cubes(piece, origin + 0.5 * (v - voxel), v)
        if len(raw.faces) == 0:
            continue
        parts.extend(_closed_simplified(raw, max_faces // 2, v))
    if not parts:
        raise ValueError("the fused volume holds no surface: nothing was observed as free space")
    return trimesh.util.concatenate(parts)
