"""A* on a 3D occupancy grid: 26-connected, Euclidean step costs, octile-3D heuristic.

The shortest 26-connected path's length is AirPlayground's reference shortest length for
A*-SPL. Steps between 26-neighbours cost 1, sqrt(2) or sqrt(3) cells; the heuristic is the
exact obstacle-free 26-connected distance (octile in 3D), which is consistent, so every
cell is expanded at most once and the path returned is optimal. Ties in f are broken
towards larger g (deeper nodes), which keeps long straight searches cheap; the search is
deterministic.

An optional non-negative per-cell ``penalty`` multiplies step costs (entering cell b from
a costs ``step * (1 + (penalty[a] + penalty[b]) / 2)``): the expert uses it to keep away
from walls. The heuristic stays admissible and consistent with it; ``length_m`` is always
the geometric length of the path found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

SQRT2 = float(np.sqrt(2.0))
SQRT3 = float(np.sqrt(3.0))


def _offsets() -> tuple[np.ndarray, np.ndarray]:
    offs, costs = [], []
    for dx in (-1, 0, 1):
        for dy in (-1, 0, 1):
            for dz in (-1, 0, 1):
                if dx == dy == dz == 0:
                    continue
                offs.append((dx, dy, dz))
                costs.append(float(np.sqrt(dx * dx + dy * dy + dz * dz)))
    return np.array(offs, dtype=np.int64), np.array(costs, dtype=np.float64)


OFFSETS, STEP_COSTS = _offsets()
"""The 26 neighbour offsets (26, 3) and their lengths in cells (26,)."""


@dataclass(frozen=True)
class AStarPath:
    """A grid path: ``cells`` (K, 3) int64 from start to goal inclusive; ``length_m`` its
    geometric length (metres, sum of step lengths); ``cost`` the search cost in cells
    (equal to length / resolution without a penalty); ``expanded`` nodes expanded."""

    cells: np.ndarray
    length_m: float
    cost: float
    expanded: int


@numba.njit(cache=True, inline="always")
def _octile(dx: int, dy: int, dz: int) -> float:
    a, b, c = abs(dx), abs(dy), abs(dz)
    if a < b:
        a, b = b, a
    if b < c:
        b, c = c, b
    if a < b:
        a, b = b, a
    return c * 1.7320508075688772 + (b - c) * 1.4142135623730951 + (a - b)


@numba.njit(cache=True, inline="always")
def _before(f1: float, g1: float, f2: float, g2: float) -> bool:
    """Heap order: smaller f first, then larger g."""
    return f1 < f2 or (f1 == f2 and g1 > g2)


@numba.njit(cache=True)
def _search(free, penalty, use_penalty, start, goal, offsets, step_costs):
    """Core A*: returns (path cells (K, 3) int64 or empty, cost in cells, expanded)."""
    nx, ny, nz = free.shape
    n = nx * ny * nz
    g = np.empty(n, dtype=np.float64)
    g[:] = np.inf
    state = np.zeros(n, dtype=np.uint8)  # 0 unseen, 1 open, 2 closed
    parent = np.full(n, -1, dtype=np.int8)  # index into offsets of the step that reached the cell
    cap = 1 << 16
    hf = np.empty(cap, dtype=np.float64)
    hg = np.empty(cap, dtype=np.float64)
    hv = np.empty(cap, dtype=np.int64)
    size = 0

    sx, sy, sz = start[0], start[1], start[2]
    gx, gy, gz = goal[0], goal[1], goal[2]
    s_idx = (sx * ny + sy) * nz + sz
    g_idx = (gx * ny + gy) * nz + gz
    g[s_idx] = 0.0
    state[s_idx] = 1
    hf[0] = _octile(gx - sx, gy - sy, gz - sz)
    hg[0] = 0.0
    hv[0] = s_idx
    size = 1
    expanded = 0
    found = False
    while size > 0:
        # pop
        cur = hv[0]
        cur_g = hg[0]
        size -= 1
        if size > 0:
            lf, lg, lv = hf[size], hg[size], hv[size]
            i = 0
            while True:
                c = 2 * i + 1
                if c >= size:
                    break
                if c + 1 < size and _before(hf[c + 1], hg[c + 1], hf[c], hg[c]):
                    c += 1
                if _before(hf[c], hg[c], lf, lg):
                    hf[i], hg[i], hv[i] = hf[c], hg[c], hv[c]
                    i = c
                else:
                    break
            hf[i], hg[i], hv[i] = lf, lg, lv
        if state[cur] == 2 or cur_g > g[cur]:
            continue  # stale entry
        state[cur] = 2
        expanded += 1
        if cur == g_idx:
            found = True
            break
        cx = cur // (ny * nz)
        rem = cur - cx * ny * nz
        cy = rem // nz
        cz = rem - cy * nz
        pen_cur = penalty[cx, cy, cz] if use_penalty else 0.0
        for d in range(26):
            x = cx + offsets[d, 0]
            y = cy + offsets[d, 1]
            z = cz + offsets[d, 2]
            if x < 0 or y < 0 or z < 0 or x >= nx or y >= ny or z >= nz:
                continue
            if not free[x, y, z]:
                continue
            nb = (x * ny + y) * nz + z
            if state[nb] == 2:
                continue
            step = step_costs[d]
            if use_penalty:
                step = step * (1.0 + 0.5 * (pen_cur + penalty[x, y, z]))
            ng = cur_g + step
            if ng < g[nb]:
                g[nb] = ng
                parent[nb] = d
                state[nb] = 1
                nf = ng + _octile(gx - x, gy - y, gz - z)
                # push
                if size == cap:
                    cap *= 2
                    nhf = np.empty(cap, dtype=np.float64)
                    nhg = np.empty(cap, dtype=np.float64)
                    nhv = np.empty(cap, dtype=np.int64)
                    nhf[:size] = hf[:size]
                    nhg[:size] = hg[:size]
                    nhv[:size] = hv[:size]
                    hf, hg, hv = nhf, nhg, nhv
                i = size
                size += 1
                while i > 0:
                    p = (i - 1) // 2
                    if _before(nf, ng, hf[p], hg[p]):
                        hf[i], hg[i], hv[i] = hf[p], hg[p], hv[p]
                        i = p
                    else:
                        break
                hf[i], hg[i], hv[i] = nf, ng, nb
    if not found:
        return np.empty((0, 3), dtype=np.int64), np.inf, expanded
    # walk back
    count = 1
    x, y, z = gx, gy, gz
    while not (x == sx and y == sy and z == sz):
        d = parent[(x * ny + y) * nz + z]
        x -= offsets[d, 0]
        y -= offsets[d, 1]
        z -= offsets[d, 2]
        count += 1
    cells = np.empty((count, 3), dtype=np.int64)
    x, y, z = gx, gy, gz
    for i in range(count - 1, -1, -1):
        cells[i, 0], cells[i, 1], cells[i, 2] = x, y, z
        if i > 0:
            d = parent[(x * ny + y) * nz + z]
            x -= offsets[d, 0]
            y -= offsets[d, 1]
            z -= offsets[d, 2]
    return cells, g[g_idx], expanded


def path_length_cells(cells: np.ndarray) -> float:
    """Geometric length of a cell path (K, 3), in cells."""
    if len(cells) < 2:
        return 0.0
    return float(np.linalg.norm(np.diff(np.asarray(cells, dtype=np.float64), axis=0), axis=1).sum())


def astar(free: np.ndarray, start, goal, resolution_m: float = 1.0,
          penalty: np.ndarray | None = None) -> AStarPath | None:
    """Shortest 26-connected path over ``free`` (nx, ny, nz) bool from cell ``start`` to cell
    ``goal`` (integer (3,) indices); None when either end is outside the grid or blocked, or
    the goal is unreachable. ``penalty`` (nx, ny, nz) float >= 0 optionally weights steps."""
    free = np.ascontiguousarray(free, dtype=np.bool_)
    if free.ndim != 3:
        raise ValueError(f"free must be a 3D boolean grid, got shape {free.shape}")
    s = np.asarray(start, dtype=np.int64).reshape(3)
    t = np.asarray(goal, dtype=np.int64).reshape(3)
    shape = np.array(free.shape)
    for c in (s, t):
        if np.any(c < 0) or np.any(c >= shape) or not free[c[0], c[1], c[2]]:
            return None
    if penalty is None:
        pen, use = np.zeros((1, 1, 1), dtype=np.float32), False
    else:
        pen = np.ascontiguousarray(penalty, dtype=np.float32)
        if pen.shape != free.shape:
            raise ValueError(f"penalty shape {pen.shape} differs from the grid's {free.shape}")
        if not (pen >= 0).all():
            raise ValueError("penalty must be non-negative (and not NaN)")
        use = True
    cells, cost, expanded = _search(free, pen, use, s, t, OFFSETS, STEP_COSTS)
    if len(cells) == 0:
        return None
    return AStarPath(cells=cells, length_m=path_length_cells(cells) * float(resolution_m),
                     cost=float(cost), expanded=int(expanded))


def astar_on_grid(grid, start_m: np.ndarray, goal_m: np.ndarray, penalty: np.ndarray | None = None):
    """A* on a :class:`~airplay.tasks.navigable.NavigableGrid` between the cells nearest to
    two map points (metres); None when an end is not in a free cell or unreachable."""
    s, t = grid.to_cell(np.asarray(start_m)), grid.to_cell(np.asarray(goal_m))
    return astar(grid.free, s, t, grid.resolution_m, penalty)
