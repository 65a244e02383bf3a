"""Navigable grid, A* (optimality against brute-force Dijkstra), task sampling, protocol."""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import replace

import numpy as np
import pytest
from helpers.grids import FLOOR, PILLAR, REGION, RES, SQUARE, WALL, make_grid

from airplay.scene.spec import NavigableRegion
from airplay.tasks.astar import OFFSETS, STEP_COSTS, astar, astar_on_grid
from airplay.tasks.navigable import NavigableGrid, polygon_signed_distance
from airplay.tasks.protocol import Protocol, TaskSettings, load_protocol
from airplay.tasks.sampler import TaskSamplingError, candidate_pairs, endpoint_candidates, sample_tasks
from airplay.yaml_config import ConfigError


@pytest.fixture(scope="module")
def room():
    return make_grid([FLOOR, PILLAR, *WALL])


# ---------------------------------------------------------------------------------------
# protocol


def test_protocol_defaults_are_airplaygrounds():
    p = load_protocol()
    assert p.task == TaskSettings(0.10, 128, 2.0, 0.40, 0.0, 0.05)
    assert p.success_radius_m == 1.0
    assert p.time_limit_s(20.0) == pytest.approx(p.time_limit_base_s + 20.0 * p.time_limit_per_astar_m_s)


def test_protocol_errors_name_file_and_field(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="nope.yaml"):
        load_protocol(missing)
    bad = tmp_path / "protocol.yaml"
    bad.write_text("task: {grid_resolution_m: -1}\nsuccess_radius_m: 1\ntime_limit: {base_s: 1, per_astar_m_s: 1}\n")
    with pytest.raises(ConfigError, match=r"protocol.yaml.*task.grid_resolution_m"):
        load_protocol(bad)
    bad.write_text("task: [1, 2]\n")
    with pytest.raises(ConfigError, match="task"):
        load_protocol(bad)
    bad.write_text("task: {a: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_protocol(bad)


# ---------------------------------------------------------------------------------------
# navigable grid


def test_grid_free_cells_honour_region_band_margin_and_clearance(room):
    grid, sdf = room
    assert grid.resolution_m == RES
    cells = np.argwhere(grid.free)
    pts = grid.to_world(cells)
    assert (sdf.query(pts) > grid.clearance_m).all()
    assert (pts[:, 2] >= REGION.z_min + 0.05 - 1e-9).all() and (pts[:, 2] <= REGION.z_max - 0.05 + 1e-9).all()
    assert (polygon_signed_distance(SQUARE, pts[:, :2]) >= 0.05).all()
    # and every non-free cell fails one of them
    blocked = grid.to_world(np.argwhere(~grid.free))
    ok = (sdf.query(blocked) > grid.clearance_m) & grid.inside_region(blocked)
    assert not ok.any()
    # SDF grid reused: cell centres are SDF voxel centres
    offset = (grid.origin_m - sdf.origin_m) / RES
    assert np.allclose(offset, np.rint(offset))
    assert not grid.is_free(np.array([[4.5, 4.0, 1.5]]))[0]  # inside the pillar
    assert grid.is_free(np.array([[2.0, 4.0, 1.5]]))[0]
    assert not grid.is_free(np.array([[-5.0, 4.0, 1.5]]))[0]  # outside the grid


def test_grid_resampled_when_resolutions_differ(room):
    grid, sdf = room
    coarse = NavigableGrid.build(REGION, sdf, 0.25, grid.clearance_m, boundary_margin_m=0.05)
    assert coarse.resolution_m == 0.25
    pts = coarse.to_world(np.argwhere(np.ones(coarse.shape, bool)))
    assert np.allclose(coarse.distance_m.reshape(-1), sdf.query(pts), atol=1e-5)
    # both grids agree on (almost) every coarse cell centre
    assert (grid.is_free(pts) == coarse.free.reshape(-1)).mean() > 0.95


def test_world_cell_round_trip_and_nearest_free(room):
    grid, _ = room
    cells = np.array([[0, 0, 0], [5, 7, 3], [20, 30, 10]])
    assert np.array_equal(grid.to_cell(grid.to_world(cells)), cells)
    inside_pillar = np.array([4.5, 4.0, 1.5])
    c = grid.nearest_free(inside_pillar, max_radius_m=2.0)
    assert c is not None and grid.free[tuple(c)]
    # nearest: distance to pillar face (0.5 m) + clearance (0.3 m) -> ~0.8 m away
    assert np.linalg.norm(grid.to_world(c) - inside_pillar) == pytest.approx(0.8, abs=0.11)
    assert grid.nearest_free(inside_pillar, max_radius_m=0.3) is None


def test_slice_at_height(room):
    grid, _ = room
    mask, origin_xy, res = grid.slice_at(1.5)
    assert mask.shape == grid.shape[:2] and res == RES
    ij = np.rint((np.array([4.5, 4.0]) - origin_xy) / res).astype(int)
    assert not mask[tuple(ij)]
    ij = np.rint((np.array([2.0, 4.0]) - origin_xy) / res).astype(int)
    assert mask[tuple(ij)]
    high, _, _ = grid.slice_at(2.3)  # above the door lintel the door is closed
    door = np.rint((np.array([6.2, 7.0]) - origin_xy) / res).astype(int)
    assert mask[tuple(door)] and not high[tuple(door)]


# ---------------------------------------------------------------------------------------
# A*


def dijkstra(free: np.ndarray, start, goal, penalty: np.ndarray | None = None) -> float | None:
    """Plain-Python Dijkstra over the 26-neighbourhood (cost in cells); with ``penalty``, entering
    b from a costs ``step * (1 + (penalty[a] + penalty[b]) / 2)``, as astar's docstring says."""
    start, goal = tuple(int(v) for v in start), tuple(int(v) for v in goal)
    dist = {start: 0.0}
    queue = [(0.0, start)]
    done = set()
    while queue:
        d, c = heapq.heappop(queue)
        if c in done:
            continue
        done.add(c)
        if c == goal:
            return d
        for o, w in zip(OFFSETS.tolist(), STEP_COSTS.tolist()):
            nb = (c[0] + o[0], c[1] + o[1], c[2] + o[2])
            if min(nb) < 0 or any(nb[a] >= free.shape[a] for a in range(3)) or not free[nb]:
                continue
            step = w if penalty is None else w * (1.0 + 0.5 * (float(penalty[c]) + float(penalty[nb])))
            if d + step < dist.get(nb, math.inf):
                dist[nb] = d + step
                heapq.heappush(queue, (d + step, nb))
    return None


def check_path(free, path, start, goal):
    cells = path.cells
    assert np.array_equal(cells[0], start) and np.array_equal(cells[-1], goal)
    assert free[tuple(cells.T)].all()
    steps = np.abs(np.diff(cells, axis=0))
    assert (steps.max(axis=1) == 1).all()
    assert path.length_m == pytest.approx(np.linalg.norm(np.diff(cells, axis=0), axis=1).sum())


def random_query(rng, sizes: tuple[int, int], blocked: tuple[float, float]):
    """(free, start, goal): a random grid of edge lengths in [sizes) with a blocked fraction in
    [blocked), and two distinct free cells; None when fewer than two cells are free."""
    shape = tuple(int(v) for v in rng.integers(sizes[0], sizes[1], 3))
    free = rng.random(shape) > rng.uniform(*blocked)
    cells = np.argwhere(free)
    if len(cells) < 2:
        return None
    s, t = cells[rng.choice(len(cells), 2, replace=False)]
    return free, s, t


def test_astar_is_optimal_against_brute_force():
    rng = np.random.default_rng(7)
    compared = unreachable = 0
    for _ in range(150):
        query = random_query(rng, (2, 10), (0.1, 0.6))
        if query is None:
            continue
        free, s, t = query
        found, best = astar(free, s, t), dijkstra(free, s, t)
        if best is None:
            assert found is None
            unreachable += 1
            continue
        assert found is not None
        assert found.cost == pytest.approx(best, abs=1e-9)
        check_path(free, found, s, t)
        compared += 1
    assert compared > 80 and unreachable >= 1  # both cases exercised


def test_astar_penalty_keeps_valid_paths_no_shorter_than_optimal():
    rng = np.random.default_rng(3)
    for _ in range(30):
        free = rng.random((8, 8, 4)) > 0.3
        cells = np.argwhere(free)
        s, t = cells[rng.choice(len(cells), 2, replace=False)]
        plain = astar(free, s, t)
        pen = rng.uniform(0, 3, free.shape).astype(np.float32)
        weighted = astar(free, s, t, penalty=pen)
        assert (plain is None) == (weighted is None)
        if plain is not None:
            check_path(free, weighted, s, t)
            assert weighted.length_m >= plain.length_m - 1e-9


def test_astar_with_penalty_is_optimal_against_brute_force():
    """The weighted search's cost is Dijkstra's (within the quantum bound of the module docstring)."""
    from airplay.tasks.astar import F_QUANTUM

    rng = np.random.default_rng(11)
    compared = 0
    for _ in range(60):
        query = random_query(rng, (3, 9), (0.1, 0.5))
        if query is None:
            continue
        free, s, t = query
        shape = free.shape
        pen = (rng.uniform(0, 3, shape) * (rng.random(shape) < 0.5)).astype(np.float32)  # many zeros: ties
        found, best = astar(free, s, t, penalty=pen), dijkstra(free, s, t, pen)
        assert (found is None) == (best is None)
        if best is None:
            continue
        assert best - 1e-9 <= found.cost <= best * (1 + F_QUANTUM) + F_QUANTUM + 1e-9
        check_path(free, found, s, t)
        compared += 1
    assert compared > 30


def test_astar_breaks_ties_of_equally_short_paths_towards_the_goal():
    """In open space every cell of the box between start and goal lies on some shortest path
    (same f in exact arithmetic, f values a few ulps apart in floating point); the search
    follows one of them instead of expanding the box (the quanta of the module docstring)."""
    free = np.ones((200, 150, 20), bool)
    start, goal = (1, 0, 5), (190, 140, 18)
    for penalty in (None, np.zeros(free.shape, np.float32)):
        path = astar(free, start, goal, penalty=penalty)
        steps = len(path.cells) - 1
        assert path.cost == pytest.approx(octile_distance(start, goal), abs=1e-9)
        # f compared without quanta: 104,428 expansions here (its budget spent, then the column heuristic's)
        assert steps == 189 and path.expanded <= 3 * steps, path.expanded


def octile_distance(a, b) -> float:
    """The 26-connected distance between two cells of an empty grid (cells)."""
    d = sorted((abs(int(x) - int(y)) for x, y in zip(a, b)), reverse=True)
    return d[2] * math.sqrt(3) + (d[1] - d[2]) * math.sqrt(2) + (d[0] - d[1])


def test_column_distance_buckets_equal_the_heap_dijkstra_bit_for_bit():
    from airplay.tasks.astar import _any_free_in_column, _column_distance, _column_distance_heap

    rng = np.random.default_rng(4)
    for trial in range(300):
        nx, ny = (int(v) for v in rng.integers(1, 70, 2))
        columns = rng.random((nx, ny)) < rng.uniform(0.2, 1.0)
        if trial % 3 == 0:  # walls with gaps: long detours
            for x in range(2, nx - 1, 6):
                columns[x, :] = False
                columns[x, rng.integers(ny)] = True
        goal = (int(rng.integers(nx)), int(rng.integers(ny)))
        got, expected = _column_distance(columns, *goal), _column_distance_heap(columns, *goal)
        assert got.dtype == np.float64 and got.tobytes() == expected.tobytes(), trial
    free = rng.random((7, 5, 4)) < 0.2
    assert np.array_equal(_any_free_in_column(free), free.any(axis=2))


def test_astar_rejects_blocked_or_outside_ends():
    free = np.ones((5, 5, 5), bool)
    free[2, 2, 2] = False
    assert astar(free, (0, 0, 0), (2, 2, 2)) is None
    assert astar(free, (0, 0, 0), (5, 0, 0)) is None
    assert astar(free, (-1, 0, 0), (4, 4, 4)) is None
    same = astar(free, (1, 1, 1), (1, 1, 1))
    assert same.length_m == 0.0 and len(same.cells) == 1
    free[2] = False  # a full wall: unreachable
    assert astar(free, (0, 0, 0), (4, 4, 4)) is None


def test_astar_in_metres_on_the_room(room):
    grid, _ = room
    # around the wall through the door (x 6..6.4, y 6.5..7.5, z < 2)
    a, b = np.array([3.0, 1.0, 1.0]), np.array([8.0, 1.0, 1.0])
    path = astar_on_grid(grid, a, b)
    assert path is not None
    pts = grid.to_world(path.cells)
    through = pts[(pts[:, 0] > 6.0) & (pts[:, 0] < 6.4)]
    assert len(through) and (through[:, 1] > 6.5).all() and (through[:, 2] < 2.0).all()
    lower = math.hypot(3.0, 5.8) + math.hypot(1.6, 5.8)  # straight to the door and on, clearance aside
    assert lower < path.length_m < 1.25 * lower


def test_astar_speed_on_a_large_grid():
    """400 x 300 x 65 cells (40 x 30 x 6.5 m at 0.1 m) with walls: a 35 m query well under a second
    of this thread's CPU time (not wall-clock time, which other processes on the machine stretch)."""
    free = np.ones((400, 300, 65), bool)
    for x in (100, 200, 300):
        free[x:x + 4, :, :] = False
        gap = (x // 100) * 70
        free[x:x + 4, gap:gap + 12, 20:30] = True
    astar(free[:10, :10, :10], (0, 0, 0), (9, 9, 9))  # compile / load the cache first
    t0 = time.thread_time()
    path = astar(free, (20, 20, 10), (380, 280, 50), RES)
    elapsed = time.thread_time() - t0
    assert path is not None and path.length_m > 44.6
    assert elapsed < 1.5, f"A* took {elapsed:.2f} s"


# ---------------------------------------------------------------------------------------
# sampler


def protocol(**task) -> Protocol:
    return replace(load_protocol(), task=replace(load_protocol().task, **task))


def test_sampler_honours_separation_clearance_and_connectivity(room):
    grid, sdf = room
    proto = protocol(endpoint_candidates=64)
    tasks = sample_tasks("room", grid, 40, seed=5, settings=proto)
    assert len(tasks) == 40 and len({t.task_id for t in tasks}) == 40
    for t in tasks:
        assert t.task_id.startswith("room-pointgoal-5-") and t.setting == "pointgoal" and t.scene == "room"
        d = np.linalg.norm(t.goal_position - t.start_position)
        assert d >= proto.task.min_endpoint_separation_m
        assert t.euclidean_distance_m == pytest.approx(d)
        ends = np.stack([t.start_position, t.goal_position])
        assert (sdf.query(ends) > grid.clearance_m + proto.task.endpoint_extra_clearance_m).all()
        assert grid.is_free(ends).all()
        assert np.allclose(t.path_m[0], t.start_position) and np.allclose(t.path_m[-1], t.goal_position)
        assert grid.is_free(t.path_m).all()
        seg = np.linalg.norm(np.diff(t.path_m, axis=0), axis=1)
        assert t.astar_length_m == pytest.approx(seg.sum()) and t.astar_length_m >= d - 1e-9
        assert t.time_limit_s == pytest.approx(proto.time_limit_s(t.astar_length_m))
        assert -math.pi <= t.start_yaw < math.pi and -math.pi <= t.goal_yaw <= math.pi


def test_sampler_is_deterministic_and_seed_dependent(room):
    grid, _ = room
    a = sample_tasks("room", grid, 10, seed=1, settings=protocol())
    b = sample_tasks("room", grid, 10, seed=1, settings=protocol())
    c = sample_tasks("room", grid, 10, seed=2, settings=protocol())
    key = [(t.start_position.tolist(), t.goal_position.tolist(), t.start_yaw) for t in a]
    assert key == [(t.start_position.tolist(), t.goal_position.tolist(), t.start_yaw) for t in b]
    assert key != [(t.start_position.tolist(), t.goal_position.tolist(), t.start_yaw) for t in c]


def test_sampler_never_returns_unreachable_pairs():
    # the wall without its door: two disconnected halves
    closed = [((6, -2, 0), (6.4, 10, 4))]
    grid, _ = make_grid([FLOOR, *closed])
    tasks = sample_tasks("split", grid, 30, seed=0, settings=protocol())
    for t in tasks:
        assert (t.start_position[0] < 6.0) == (t.goal_position[0] < 6.0)
    # candidate pairs across the wall are filtered before A*
    rng = np.random.default_rng(0)
    cells = endpoint_candidates(grid, 128, 0.4, rng)
    pairs, _ = candidate_pairs(grid, cells, 2.0, 0.0)
    x = grid.to_world(cells)[:, 0]
    assert ((x[pairs[:, 0]] < 6.0) == (x[pairs[:, 1]] < 6.0)).all()
    left = (x < 6.0).sum()
    assert 0 < left < len(cells)


def test_sampler_distance_quantile_and_settings(room):
    grid, _ = room
    proto = protocol(distance_quantile=0.5, endpoint_candidates=40)
    rng = np.random.default_rng(11)
    cells = endpoint_candidates(grid, 40, 0.4, rng)
    _, all_d = candidate_pairs(grid, cells, 2.0, 0.0)
    _, kept = candidate_pairs(grid, cells, 2.0, 0.5)
    assert kept.min() >= np.quantile(all_d, 0.5) and len(kept) < len(all_d)
    tasks = sample_tasks("room", grid, 10, seed=11, setting="imagegoal", settings=proto)
    assert min(t.euclidean_distance_m for t in tasks) >= np.quantile(all_d, 0.5) - 1e-9
    assert {t.setting for t in tasks} == {"imagegoal"}
    with pytest.raises(ValueError, match="setting"):
        sample_tasks("room", grid, 1, seed=0, setting="vln", settings=proto)


def test_sampler_fails_clearly_without_room():
    tiny = NavigableRegion(np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]), 0.5, 1.5)
    grid, _ = make_grid([FLOOR], region=tiny)
    with pytest.raises(TaskSamplingError, match="room"):
        sample_tasks("room", grid, 5, seed=0, settings=protocol())
