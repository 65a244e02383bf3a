"""A* on a 3D occupancy grid: 26-connected, Euclidean step costs, octile-3D heuristic.

The shortest 26-connected path's length is AirPlayground's reference shortest length for
A*-SPL. Steps between 26-neighbours cost 1, sqrt(2) or sqrt(3) cells; the heuristic is the
exact obstacle-free 26-connected distance (octile in 3D), which is consistent, so every
cell is expanded at most once. Ties in f are broken towards larger g (deeper nodes), which
keeps long straight searches cheap; the search is deterministic.

Ties need f compared in quanta: the cells on the many equally short 26-connected paths have
the same f in exact arithmetic, but g is summed step by step and the octile distance is a
product, so in floating point their f values differ in the last bits, and without quanta
the heap orders them by that noise: it then expands the whole volume of shortest paths
(about 100,000 cells for a 40 m flight at 0.1 m, against 300-3,000 with quanta; 16x less
time on the expert's flights). The heap orders by floor(f / q), q = :data:`F_QUANTUM` cells,
then by larger g. A popped cell's f is then within q of the smallest open f, and by
induction over the path (every step costs at least one cell) the cost found is at most
``C* (1 + q) + q`` for the optimal cost C* (q = 2^-24: 6e-8 relative, far below the
rounding noise of a summed path; the costs found on the tested grids equal Dijkstra's).

Long detours (a building between start and goal) would flood the volume around the
obstacle with the octile heuristic alone; a search that expands more than
``EXPANSIONS_BEFORE_COLUMN_HEURISTIC`` cells restarts with h = max(octile, D2) where D2 is
the 8-connected 2D distance to the goal over the grid's columns that hold any free cell.
D2 is a lower bound of any 3D path's length (a path's (x, y) projection is such a 2D path
and no longer than it) and consistent, so the result is still optimal.

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

FOUND, UNREACHABLE, OVER_BUDGET = 0, 1, 2
F_QUANTUM = 2.0 ** -24
"""Cells: the heap compares f = g + h rounded down to a multiple of this (see the module docstring)."""
_F_SCALE = 1.0 / F_QUANTUM
EXPANSIONS_BEFORE_COLUMN_HEURISTIC = 20_000
"""Searches that expand more cells than this restart with the column heuristic (below)."""


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


@numba.njit(cache=True, inline="always")
def _heap_push(heap, size, key, tie, value):
    """Push (key, tie, value) on the binary heap ``heap[:size]`` (rows ordered by :func:`_before`).

    Returns (heap, size + 1); the heap array is doubled when full.
    """
    if size == heap.shape[0]:
        bigger = np.empty((2 * size, 3), dtype=np.float64)
        bigger[:size] = heap[:size]
        heap = bigger
    i = size
    while i > 0:
        p = (i - 1) // 2
        if _before(key, tie, heap[p, 0], heap[p, 1]):
            heap[i, 0], heap[i, 1], heap[i, 2] = heap[p, 0], heap[p, 1], heap[p, 2]
            i = p
        else:
            break
    heap[i, 0], heap[i, 1], heap[i, 2] = key, tie, value
    return heap, size + 1


@numba.njit(cache=True, inline="always")
def _heap_pop(heap, size):
    """Drop the top row of ``heap[:size]`` (read it first); returns the new size."""
    size -= 1
    if size > 0:
        lk, lt, lv = heap[size, 0], heap[size, 1], heap[size, 2]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= size:
                break
            if c + 1 < size and _before(heap[c + 1, 0], heap[c + 1, 1], heap[c, 0], heap[c, 1]):
                c += 1
            if _before(heap[c, 0], heap[c, 1], lk, lt):
                heap[i, 0], heap[i, 1], heap[i, 2] = heap[c, 0], heap[c, 1], heap[c, 2]
                i = c
            else:
                break
        heap[i, 0], heap[i, 1], heap[i, 2] = lk, lt, lv
    return size


@numba.njit(cache=True)
def _search(free, penalty, use_penalty, h2d, use_h2d, start, goal, offsets, step_costs, max_expanded):
    """Core A*: (path cells (K, 3) int64 or empty, cost in cells, expanded, status) with
    status FOUND, UNREACHABLE or OVER_BUDGET (more than ``max_expanded`` expansions)."""
    nx, ny, nz = free.shape
    n = nx * ny * nz
    nyz = ny * nz
    free_flat = free.reshape(n)
    pen_flat = penalty.reshape(penalty.size)
    flat_off = np.empty(26, dtype=np.int64)
    for d in range(26):
        flat_off[d] = (offsets[d, 0] * ny + offsets[d, 1]) * nz + offsets[d, 2]
    # g and parent are valid only where state != 0; np.empty / np.zeros leave untouched
    # pages unmapped, so a short search on a large grid costs only what it touches
    g = np.empty(n, dtype=np.float64)
    state = np.zeros(n, dtype=np.uint8)  # 0 unseen, 1 open, 2 closed
    parent = np.empty(n, dtype=np.int8)  # index into offsets of the step that reached the cell
    # binary heap of (f in quanta, g, cell) rows: one cache line per level
    heap = np.empty((1 << 16, 3), dtype=np.float64)
    size = 0

    sx, sy, sz = start[0], start[1], start[2]
    gx, gy, gz = goal[0], goal[1], goal[2]
    s_idx = (sx * ny + sy) * nz + sz
    g_idx = (gx * ny + gy) * nz + gz
    g[s_idx] = 0.0
    state[s_idx] = 1
    h0 = _octile(gx - sx, gy - sy, gz - sz)
    if use_h2d:
        h0 = max(h0, h2d[sx, sy])
    heap[0, 0] = np.floor(h0 * _F_SCALE)  # f in quanta (see the module docstring)
    heap[0, 1] = 0.0
    heap[0, 2] = s_idx
    size = 1
    expanded = 0
    found = False
    while size > 0:
        # pop
        cur = np.int64(heap[0, 2])
        cur_g = heap[0, 1]
        size = _heap_pop(heap, size)
        if state[cur] == 2:
            continue  # stale entry
        state[cur] = 2
        expanded += 1
        if cur == g_idx:
            found = True
            break
        if expanded > max_expanded:
            return np.empty((0, 3), dtype=np.int64), np.inf, expanded, OVER_BUDGET
        cx = cur // nyz
        rem = cur - cx * nyz
        cy = rem // nz
        cz = rem - cy * nz
        pen_cur = pen_flat[cur] if use_penalty else 0.0
        interior = 0 < cx < nx - 1 and 0 < cy < ny - 1 and 0 < cz < nz - 1
        for d in range(26):
            if interior:
                nb = cur + flat_off[d]
            else:
                x = cx + offsets[d, 0]
                y = cy + offsets[d, 1]
                z = cz + offsets[d, 2]
                if x < 0 or y < 0 or z < 0 or x >= nx or y >= ny or z >= nz:
                    continue
                nb = (x * ny + y) * nz + z
            if not free_flat[nb] or state[nb] == 2:
                continue
            step = step_costs[d]
            if use_penalty:
                step = step * (1.0 + 0.5 * (pen_cur + pen_flat[nb]))
            ng = cur_g + step
            if state[nb] == 0 or ng < g[nb]:
                g[nb] = ng
                parent[nb] = d
                state[nb] = 1
                x = cx + offsets[d, 0]
                y = cy + offsets[d, 1]
                z = cz + offsets[d, 2]
                h = _octile(gx - x, gy - y, gz - z)
                if use_h2d:
                    h = max(h, h2d[x, y])
                heap, size = _heap_push(heap, size, np.floor((ng + h) * _F_SCALE), ng, nb)
    if not found:
        return np.empty((0, 3), dtype=np.int64), np.inf, expanded, UNREACHABLE
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
    return cells, g[g_idx], expanded, FOUND


@numba.njit(cache=True)
def _column_distance_heap(columns, gx, gy):
    """:func:`_column_distance` by Dijkstra with a binary heap (the reference it is tested against)."""
    nx, ny = columns.shape
    dist = np.full((nx, ny), np.inf)
    done = np.zeros((nx, ny), dtype=np.bool_)
    heap = np.empty((1 << 12, 3), dtype=np.float64)  # (distance, 0, x * ny + y)
    dist[gx, gy] = 0.0
    heap[0, 0], heap[0, 1], heap[0, 2] = 0.0, 0.0, gx * ny + gy
    size = 1
    while size > 0:
        d0, cell = heap[0, 0], np.int64(heap[0, 2])
        cx, cy = cell // ny, cell % ny
        size = _heap_pop(heap, size)
        if done[cx, cy]:
            continue
        done[cx, cy] = True
        for dx in range(-1, 2):
            for dy in range(-1, 2):
                x, y = cx + dx, cy + dy
                if (dx == 0 and dy == 0) or x < 0 or y < 0 or x >= nx or y >= ny:
                    continue
                if not columns[x, y] or done[x, y]:
                    continue
                nd = d0 + (1.4142135623730951 if dx != 0 and dy != 0 else 1.0)
                if nd < dist[x, y]:
                    dist[x, y] = nd
                    # tie 0 for every row: the order is plain "smaller distance first"
                    heap, size = _heap_push(heap, size, nd, 0.0, x * ny + y)
    return dist


@numba.njit(cache=True)
def _column_distance(columns, gx, gy):
    """8-connected Dijkstra over the 2D mask ``columns`` (nx, ny) from (gx, gy): distance in
    cells (inf where unreachable). A lower bound of the 3D distance when ``columns`` marks
    the (x, y) columns holding any free cell.

    Dial's buckets instead of a heap: a cell at distance d (floating point, as summed along
    its path) is in bucket floor(d). Steps cost 1 or sqrt(2), so a cell of bucket k relaxes
    cells into buckets k + 1 and k + 2 only (rounding is monotone and k + 1 is exact): the
    buckets, taken in order, finalise their cells, three of them suffice (cyclically), and no
    heap is needed. The result is the same array as the heap's, bit for bit: both are the
    unique solution of d[x] = min over neighbours n of fl(d[n] + step(n, x)) with d = 0 at
    the goal (see test_astar). Should a bucket outgrow its n + 64 entries (a cell can be
    queued up to 8 times), the heap version answers instead.
    """
    dist, ok = _column_distance_dial(columns, gx, gy)
    return dist if ok else _column_distance_heap(columns, gx, gy)


@numba.njit(cache=True)
def _column_distance_dial(columns, gx, gy):
    """(distance, True) by :func:`_column_distance`'s buckets, or (partial, False) when a bucket is full."""
    nx, ny = columns.shape
    n = nx * ny
    cols = columns.reshape(n) if columns.flags.c_contiguous else columns.copy().reshape(n)
    dist = np.full(n, np.inf)
    done = np.zeros(n, dtype=np.bool_)
    ddx = np.array([-1, -1, -1, 0, 0, 1, 1, 1])
    ddy = np.array([-1, 0, 1, -1, 1, -1, 0, 1])
    step = np.empty(8)
    flat = np.empty(8, dtype=np.int64)
    for d in range(8):
        step[d] = 1.4142135623730951 if ddx[d] != 0 and ddy[d] != 0 else 1.0
        flat[d] = ddx[d] * ny + ddy[d]
    cap = n + 64  # fixed: an array re-bound in the loop would cost reference counting on every access
    buckets = np.empty((3, cap), dtype=np.int64)  # stacks of cells x * ny + y
    sizes = np.zeros(3, dtype=np.int64)
    dist[gx * ny + gy] = 0.0
    buckets[0, 0] = gx * ny + gy
    sizes[0] = 1
    k = 0
    while sizes[0] + sizes[1] + sizes[2] > 0:
        b = k % 3
        while sizes[b] > 0:
            sizes[b] -= 1
            cell = buckets[b, sizes[b]]
            if done[cell]:
                continue  # a stale or repeated entry
            done[cell] = True
            d0 = dist[cell]
            cx = cell // ny
            cy = cell - cx * ny
            interior = 0 < cx < nx - 1 and 0 < cy < ny - 1
            for d in range(8):
                if interior:
                    nb = cell + flat[d]
                else:
                    x, y = cx + ddx[d], cy + ddy[d]
                    if x < 0 or y < 0 or x >= nx or y >= ny:
                        continue
                    nb = x * ny + y
                # (a finished neighbour is not improved: its distance is <= d0 < nd)
                if not cols[nb]:
                    continue
                nd = d0 + step[d]
                if nd < dist[nb]:
                    dist[nb] = nd
                    q = np.int64(nd) % 3
                    if sizes[q] == cap:
                        return dist.reshape(nx, ny), False
                    buckets[q, sizes[q]] = nb
                    sizes[q] += 1
        k += 1
    return dist.reshape(nx, ny), True


@numba.njit(cache=True)
def _any_free_in_column(free):
    """free.any(axis=2) for a C-contiguous (nx, ny, nz) bool grid."""
    nx, ny, nz = free.shape
    out = np.zeros((nx, ny), dtype=np.bool_)
    for i in range(nx):
        for j in range(ny):
            for k in range(nz):
                if free[i, j, k]:
                    out[i, j] = True
                    break
    return out


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
        use = True  # not checked for >= 0 here (a full pass per search); the caller's contract
    no_h2d = np.zeros((1, 1), dtype=np.float64)
    cells, cost, expanded, status = _search(free, pen, use, no_h2d, False, s, t, OFFSETS, STEP_COSTS,
                                            EXPANSIONS_BEFORE_COLUMN_HEURISTIC)
    if status == OVER_BUDGET:
        # a long detour: bound the remaining distance by the 2D distance over the grid's
        # columns, which keeps the search from flooding the volume around obstacles
        h2d = _column_distance(_any_free_in_column(free), t[0], t[1])
        cells, cost, more, status = _search(free, pen, use, h2d, True, s, t, OFFSETS, STEP_COSTS, free.size)
        expanded += more
    if status != FOUND:
        return None
    return AStarPath(cells=cells, length_m=path_length_cells(cells) * float(resolution_m),
                     cost=float(cost), expanded=int(expanded))


def astar_on_grid(grid, start_m: np.ndarray, goal_m: np.ndarray, penalty: np.ndarray | None = None):
    """A* on a :class:`~airplay.tasks.navigable.NavigableGrid` between the cells nearest to
    two map points (metres); None when an end is not in a free cell or unreachable."""
    s, t = grid.to_cell(np.asarray(start_m)), grid.to_cell(np.asarray(goal_m))
    return astar(grid.free, s, t, grid.resolution_m, penalty)
