"""Geodesic progress for the environments' reward: cost-to-go to the goal around obstacles.

With ``progress="geodesic"`` (:class:`~airplay.world.env.AirPlayEnv`,
:class:`~airplay.world.vector_env.AirPlayVectorEnv`) the progress term of the reward is the
drop, over a step, of the goal's cost-to-go field at the vehicle's position instead of the
drop in straight-line distance. The field is the one the DAgger expert descends
(:mod:`airplay.tasks.cost_to_go`): the length (metres, map frame) of the cheapest
26-connected path on the planning grid, with the A* expert's wall penalty, so it decreases
only along ways that go around walls, and a vehicle that flies straight at a wall between it
and the goal earns nothing. (Habitat's PointNav reward uses geodesic distance for this
reason.) Straight-line progress rewards flying into the wall.

Positions inside an obstacle's or the boundary's margin read the nearest free cell within
1 m; beyond that, or where the goal cannot be reached, the field is ``inf`` and that step
earns no progress (:func:`geodesic_progress`).

Fields are built once per goal (about 0.2 s on a 0.7 M-cell indoor grid) and kept per
scene, shared by every environment of the process over that scene (:func:`field_cache`).
"""

from __future__ import annotations

import weakref

import numpy as np

from airplay.tasks.cost_to_go import FieldCache

PROGRESS_KINDS = ("euclidean", "geodesic")
"""What ``progress`` may name: straight-line or cost-to-go distance to the goal."""
FIELDS_PER_SCENE = 256
"""Goal fields kept per scene (about 6 MB each on a 0.7 M-cell grid)."""

_CACHES: "weakref.WeakKeyDictionary[object, FieldCache]" = weakref.WeakKeyDictionary()


def check_progress(progress) -> str:
    """``progress`` itself; ValueError naming it unless it is one of :data:`PROGRESS_KINDS`."""
    if progress not in PROGRESS_KINDS:
        raise ValueError(f"progress must be one of {', '.join(map(repr, PROGRESS_KINDS))}, got {progress!r}")
    return progress


def field_cache(world) -> FieldCache:
    """The :class:`FieldCache` of a :class:`~airplay.world.World`'s planning grid, one per scene
    in this process (worlds ``replace()``d from one another share it)."""
    key = world._parts  # shared by a World and the Worlds replace()d from it
    cache = _CACHES.get(key)
    if cache is None:
        cache = _CACHES[key] = FieldCache(world.grid, cache_size=FIELDS_PER_SCENE)
    return cache


def goal_field(cache: FieldCache, goal: np.ndarray) -> np.ndarray | None:
    """The cost-to-go (nx, ny, nz) metres to ``goal`` (map, m), or None when no free cell lies
    within 1 m of it (progress is then 0 throughout)."""
    cell = cache.cell_for(np.asarray(goal, dtype=np.float64).reshape(3))
    return None if cell is None else cache.values(tuple(int(c) for c in cell))


def cost_to_go(cache: FieldCache, field: np.ndarray | None, positions: np.ndarray) -> np.ndarray:
    """The field's values (K,) metres at map positions (K, 3): each position's own cell when it
    is free, else the nearest free cell within 1 m; ``inf`` where there is none (or no field)."""
    p = np.atleast_2d(np.asarray(positions, dtype=np.float64))
    return cost_to_go_rows(cache, [field] * len(p), p)


def cost_to_go_rows(cache: FieldCache, fields: list, positions: np.ndarray) -> np.ndarray:
    """:func:`cost_to_go` of position k (K, 3) in ``fields[k]`` (each a field or None), for a batch
    of vehicles flying to different goals in one scene."""
    p = np.atleast_2d(np.asarray(positions, dtype=np.float64))
    out = np.full(len(p), np.inf)
    grid = cache.grid
    cells = grid.to_cell(p)
    own = grid.in_grid(cells)
    if own.any():
        c = cells[own]
        own[own] = cache.free[c[:, 0], c[:, 1], c[:, 2]]
    for k in range(len(p)):
        field = fields[k]
        if field is None:
            continue
        if own[k]:
            out[k] = field[cells[k, 0], cells[k, 1], cells[k, 2]]
        else:
            cell = grid.nearest_free(p[k], max_radius_m=1.0)
            if cell is not None:
                out[k] = field[tuple(cell)]
    return out


def geodesic_progress(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Progress (K,) metres ``before - after`` of cost-to-go values, 0 where either is ``inf``."""
    b, a = np.asarray(before, dtype=np.float64), np.asarray(after, dtype=np.float64)
    ok = np.isfinite(b) & np.isfinite(a)
    return np.where(ok, b - np.where(ok, a, 0.0), 0.0)
