"""Geodesic cost-to-go fields on the planning grid, and a carrot to fly to from any position.

:class:`FieldCache` computes, once per goal cell, the cost of the cheapest 26-connected path
from every free cell of a :class:`~airplay.tasks.navigable.NavigableGrid` to the goal cell
(Dijkstra from the goal). Step costs are those of :mod:`airplay.tasks.astar` with the
expert's wall penalty (:meth:`airplay.tasks.expert.ExpertPilot.penalty`): entering cell b
from cell a costs ``step * (1 + (penalty[a] + penalty[b]) / 2)`` with ``step`` 1, sqrt(2) or
sqrt(3) cells, so the field is the penalised path length the A* expert minimises. Field
values are in metres (cells x ``resolution_m``), ``inf`` in blocked cells and in free cells
that cannot reach the goal; the goal cell holds 0.

All positions are map coordinates (ENU, metres), the frame of the grid.

:meth:`CostToGo.lookahead_point` answers "where to fly from here": from the position's
cell (or the nearest free cell within 1 m when the position lies in an obstacle or
boundary margin) it follows steepest descent of the field (at each cell the 26-neighbour
of lowest value, first in :data:`~airplay.tasks.astar.OFFSETS` order among ties) towards
the goal, then shortcuts by line of sight: the carrot is the farthest point of that descent
path within ``distance_m`` (straight line) of the position that the position sees through
free cells keeping the clearance the path had (capped at the preferred clearance). The
answer is a pure function of (field, position): no memory between calls.

Fields are computed by a numba-compiled Dijkstra (``cache=True``) and kept in a small LRU
per goal cell (:class:`FieldCache`), so DAgger rollouts to the same goal reuse theirs;
:meth:`FieldCache.get` returns the :class:`CostToGo` of a goal (its field and the queries).
About 0.15-0.2 s per field on a 0.7 M-cell indoor grid, about 2 s on a 4 M-cell urban one.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import numba
import numpy as np

from airplay.tasks.astar import OFFSETS, STEP_COSTS
from airplay.tasks.navigable import NavigableGrid

PREFERRED_EXTRA_CLEARANCE_M = 0.45
"""As :class:`airplay.tasks.expert_settings.ExpertSettings`: wall penalty 0 this far beyond the clearance."""
WALL_PENALTY = 2.0
"""As :class:`airplay.tasks.expert_settings.ExpertSettings`: step-cost weight at the planning clearance."""
LOS_TOL_M = 0.02
"""Line-of-sight shortcuts may come this much closer to walls than the path they replace."""


def wall_penalty(grid: NavigableGrid, wall_penalty_weight: float = WALL_PENALTY,
                 preferred_extra_clearance_m: float = PREFERRED_EXTRA_CLEARANCE_M) -> np.ndarray:
    """Per-cell step-cost penalty (nx, ny, nz) float32: ``weight * x^2``, x going from 1 at the
    grid's clearance to 0 at the preferred clearance (:meth:`ExpertPilot.penalty`'s formula)."""
    c0 = grid.clearance_m
    c1 = c0 + preferred_extra_clearance_m
    x = np.clip((c1 - grid.distance_m) / max(c1 - c0, 1e-6), 0.0, 1.0)
    return (wall_penalty_weight * x * x).astype(np.float32)


# ---------------------------------------------------------------------------------------
# Dijkstra


@numba.njit(cache=True)
def _dijkstra(free, penalty, goal, offsets, step_costs, resolution):
    """Cost-to-go (metres) from every cell to ``goal`` (3,) over free cells; inf elsewhere."""
    nx, ny, nz = free.shape
    n = nx * ny * nz
    free_flat = free.reshape(n)
    pen = penalty.reshape(n)
    dist = np.full(n, np.inf)
    done = np.zeros(n, dtype=np.bool_)
    cap = 1024
    hk = np.empty(cap, dtype=np.float64)
    hv = np.empty(cap, dtype=np.int64)
    size = 0
    g = (goal[0] * ny + goal[1]) * nz + goal[2]
    dist[g] = 0.0
    hk[0] = 0.0
    hv[0] = g
    size = 1
    syz = ny * nz
    while size > 0:
        # pop the minimum (ties: smaller index first, for determinism)
        key, cur = hk[0], hv[0]
        size -= 1
        if size > 0:
            lk, lv = hk[size], hv[size]
            i = 0
            while True:
                c = 2 * i + 1
                if c >= size:
                    break
                if c + 1 < size and (hk[c + 1] < hk[c] or (hk[c + 1] == hk[c] and hv[c + 1] < hv[c])):
                    c += 1
                if hk[c] < lk or (hk[c] == lk and hv[c] < lv):
                    hk[i], hv[i] = hk[c], hv[c]
                    i = c
                else:
                    break
            hk[i], hv[i] = lk, lv
        if done[cur] or key > dist[cur]:
            continue
        done[cur] = True
        ci = cur // syz
        cj = (cur // nz) % ny
        ck = cur % nz
        pc = pen[cur]
        for o in range(offsets.shape[0]):
            ni, nj, nk = ci + offsets[o, 0], cj + offsets[o, 1], ck + offsets[o, 2]
            if ni < 0 or nj < 0 or nk < 0 or ni >= nx or nj >= ny or nk >= nz:
                continue
            nb = (ni * ny + nj) * nz + nk
            if not free_flat[nb] or done[nb]:
                continue
            nd = key + step_costs[o] * resolution * (1.0 + 0.5 * (pc + pen[nb]))
            if nd < dist[nb]:
                dist[nb] = nd
                if size == cap:
                    cap *= 2
                    hk2 = np.empty(cap, dtype=np.float64)
                    hv2 = np.empty(cap, dtype=np.int64)
                    hk2[:size] = hk[:size]
                    hv2[:size] = hv[:size]
                    hk, hv = hk2, hv2
                i = size
                size += 1
                while i > 0:
                    p = (i - 1) // 2
                    if nd < hk[p] or (nd == hk[p] and nb < hv[p]):
                        hk[i], hv[i] = hk[p], hv[p]
                        i = p
                    else:
                        break
                hk[i], hv[i] = nd, nb
    return dist.reshape(nx, ny, nz)


# ---------------------------------------------------------------------------------------
# descent and line of sight


@numba.njit(cache=True)
def _descend(field, start, offsets, max_cells):
    """Cells (M, 3) of steepest descent from ``start`` (3,) until the goal (value 0), a local
    minimum or ``max_cells`` steps; the start included."""
    nx, ny, nz = field.shape
    out = np.empty((max_cells + 1, 3), dtype=np.int64)
    ci, cj, ck = start[0], start[1], start[2]
    out[0, 0], out[0, 1], out[0, 2] = ci, cj, ck
    m = 1
    while m <= max_cells:
        best = field[ci, cj, ck]
        if best <= 0.0:
            break
        bi, bj, bk = -1, -1, -1
        for o in range(offsets.shape[0]):
            ni, nj, nk = ci + offsets[o, 0], cj + offsets[o, 1], ck + offsets[o, 2]
            if ni < 0 or nj < 0 or nk < 0 or ni >= nx or nj >= ny or nk >= nz:
                continue
            v = field[ni, nj, nk]
            if v < best:
                best = v
                bi, bj, bk = ni, nj, nk
        if bi < 0:
            break
        ci, cj, ck = bi, bj, bk
        out[m, 0], out[m, 1], out[m, 2] = ci, cj, ck
        m += 1
    return out[:m]


@numba.njit(cache=True)
def _segment_sees(free, distance, origin, resolution, ax, ay, az, bx, by, bz, required, sample_m):
    """Every sample of segment a-b (map, m; about ``sample_m`` apart, ends included) falls in a
    free cell (nearest cell) whose distance to the mesh is >= ``required``."""
    nx, ny, nz = free.shape
    dx, dy, dz = bx - ax, by - ay, bz - az
    n = max(2, int(math.ceil(math.sqrt(dx * dx + dy * dy + dz * dz) / sample_m)) + 1)
    for s in range(n):
        t = s / (n - 1)
        i = int(np.rint((ax + t * dx - origin[0]) / resolution))
        j = int(np.rint((ay + t * dy - origin[1]) / resolution))
        k = int(np.rint((az + t * dz - origin[2]) / resolution))
        if i < 0 or j < 0 or k < 0 or i >= nx or j >= ny or k >= nz:
            return False
        if not free[i, j, k] or distance[i, j, k] < required:
            return False
    return True


@numba.njit(cache=True)
def _carrot(free, distance, origin, resolution, path, px, py, pz, lookahead, cap, tol, sample_m):
    """Index of the farthest point of ``path`` (M, 3, map m) within ``lookahead`` (m) of p that p
    sees (:func:`_segment_sees`, keeping min(cap, the path's clearance up to there, p's
    clearance) - tol); 0 when none beyond the first."""
    nx, ny, nz = free.shape
    i = int(np.rint((px - origin[0]) / resolution))
    j = int(np.rint((py - origin[1]) / resolution))
    k = int(np.rint((pz - origin[2]) / resolution))
    lo = cap
    if 0 <= i < nx and 0 <= j < ny and 0 <= k < nz:
        if distance[i, j, k] < lo:
            lo = distance[i, j, k]
    best = 0
    for m in range(path.shape[0]):
        ci = int(np.rint((path[m, 0] - origin[0]) / resolution))
        cj = int(np.rint((path[m, 1] - origin[1]) / resolution))
        ck = int(np.rint((path[m, 2] - origin[2]) / resolution))
        if 0 <= ci < nx and 0 <= cj < ny and 0 <= ck < nz and distance[ci, cj, ck] < lo:
            lo = distance[ci, cj, ck]
        if m == 0:
            continue
        dx, dy, dz = path[m, 0] - px, path[m, 1] - py, path[m, 2] - pz
        if math.sqrt(dx * dx + dy * dy + dz * dz) > lookahead:
            break
        if not _segment_sees(free, distance, origin, resolution, px, py, pz, path[m, 0], path[m, 1], path[m, 2],
                             lo - tol, sample_m):
            break
        best = m
    return best


class FieldCache:
    """Cost-to-go fields of one grid, per goal cell, kept in an LRU of ``cache_size``.

    grid: the :class:`~airplay.tasks.navigable.NavigableGrid` (map ENU, metres).
    penalty: per-cell wall penalty (default :func:`wall_penalty` of the grid, the A* expert's).
    """

    def __init__(self, grid: NavigableGrid, penalty: np.ndarray | None = None, cache_size: int = 4,
                 preferred_extra_clearance_m: float = PREFERRED_EXTRA_CLEARANCE_M) -> None:
        self.grid = grid
        self.penalty = np.ascontiguousarray(penalty if penalty is not None else wall_penalty(grid), dtype=np.float32)
        self.cache_size = max(1, int(cache_size))
        self.preferred_clearance_m = grid.clearance_m + preferred_extra_clearance_m
        self._fields: OrderedDict[tuple[int, int, int], np.ndarray] = OrderedDict()
        self.free = np.ascontiguousarray(grid.free)
        self.distance = np.ascontiguousarray(grid.distance_m, dtype=np.float32)
        self.origin = np.ascontiguousarray(grid.origin_m, dtype=np.float64)
        self.last_build_s = 0.0
        self.builds = 0

    def cell_for(self, point: np.ndarray, max_radius_m: float = 1.0) -> np.ndarray | None:
        """The point's own cell when free, else the nearest free cell within ``max_radius_m``."""
        cell = self.grid.to_cell(np.asarray(point, dtype=np.float64))
        if self.grid.in_grid(cell)[0] and self.free[tuple(cell)]:
            return cell
        return self.grid.nearest_free(point, max_radius_m=max_radius_m)

    def values(self, goal_cell: tuple[int, int, int]) -> np.ndarray:
        """The cost-to-go (nx, ny, nz) float64 metres (read-only) to ``goal_cell``; built once."""
        import time

        key = tuple(int(v) for v in goal_cell)
        if key in self._fields:
            self._fields.move_to_end(key)
            return self._fields[key]
        t = time.perf_counter()
        values = _dijkstra(self.free, self.penalty, np.array(key, dtype=np.int64), OFFSETS, STEP_COSTS,
                           float(self.grid.resolution_m))
        self.last_build_s = time.perf_counter() - t
        self.builds += 1
        values.setflags(write=False)
        self._fields[key] = values
        while len(self._fields) > self.cache_size:
            self._fields.popitem(last=False)
        return values

    def get(self, goal: np.ndarray) -> "CostToGo":
        """The :class:`CostToGo` of a goal (map, m): its field is that of the goal's cell (or the
        nearest free cell within 1 m). ValueError when there is none."""
        g = np.asarray(goal, dtype=np.float64).reshape(3)
        cell = self.cell_for(g)
        if cell is None:
            raise ValueError(f"goal {g.tolist()} has no free cell within 1 m")
        key = tuple(int(v) for v in cell)
        return CostToGo(self, g, key, self.values(key))


class CostToGo:
    """The cost-to-go field of one goal and the queries on it (get one from :class:`FieldCache`).

    goal: (3,) map metres; goal_cell: its grid cell; values: (nx, ny, nz) metres to the goal
    cell along the cheapest penalised 26-connected path (inf where blocked or unreachable).
    """

    def __init__(self, cache: FieldCache, goal: np.ndarray, goal_cell: tuple[int, int, int], values: np.ndarray):
        self.cache, self.grid = cache, cache.grid
        self.goal = np.array(goal, dtype=np.float64).reshape(3)
        self.goal_cell, self.values = goal_cell, values

    def value_at(self, position: np.ndarray) -> float:
        """Field value (m) at the position's cell (nearest free within 1 m); inf when none."""
        cell = self.cache.cell_for(position)
        return float(self.values[tuple(cell)]) if cell is not None else math.inf

    def descent_path(self, position: np.ndarray, horizon_m: float) -> np.ndarray | None:
        """Map points (M, 3) of steepest descent from the position's cell (or the nearest free
        cell within 1 m) for about ``horizon_m`` of path, ending at the goal itself when the
        descent reaches the goal cell; None when that cell cannot reach the goal."""
        start = self.cache.cell_for(position)
        if start is None or not np.isfinite(self.values[tuple(start)]):
            return None
        max_cells = max(1, int(math.ceil(horizon_m / self.grid.resolution_m)))
        cells = _descend(self.values, np.asarray(start, dtype=np.int64), OFFSETS, max_cells)
        path = self.grid.to_world(cells)
        if self.values[tuple(cells[-1])] <= 0.0:
            path = np.concatenate([path, self.goal[None]])  # the goal cell reached: end at the goal itself
        return np.ascontiguousarray(path)

    def lookahead_point(self, position: np.ndarray, distance_m: float = 1.2) -> np.ndarray:
        """The carrot (3,) map metres: the farthest point of the descent path within
        ``distance_m`` (straight line) of ``position`` that the position sees (module
        docstring); the next descent point when nothing is in view; the goal itself when the
        position's cell cannot reach the goal (fly straight)."""
        p = np.asarray(position, dtype=np.float64).reshape(3)
        path = self.descent_path(p, 3.0 * distance_m + 1.0)
        if path is None:
            return self.goal.copy()
        c = self.cache
        m = _carrot(c.free, c.distance, c.origin, float(self.grid.resolution_m), path, p[0], p[1], p[2],
                    float(distance_m), float(c.preferred_clearance_m), LOS_TOL_M, 0.5 * float(self.grid.resolution_m))
        if m == 0 and len(path) > 1:
            m = 1  # nothing in view (inside a margin, or behind a corner): the next descent point
        return path[m].copy()

    def direction(self, position: np.ndarray, distance_m: float = 1.2) -> np.ndarray:
        """Unit vector (3,) map frame from ``position`` towards its carrot (zeros at the carrot)."""
        p = np.asarray(position, dtype=np.float64).reshape(3)
        d = self.lookahead_point(p, distance_m) - p
        n = float(np.linalg.norm(d))
        return d / n if n > 1e-9 else np.zeros(3)
