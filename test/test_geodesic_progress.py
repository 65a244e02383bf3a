"""progress="geodesic": the reward's progress is the drop of the goal's cost-to-go around
obstacles, so flying straight at a goal behind a wall earns less than nothing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from airplay.tasks.protocol import load_protocol
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env import AirPlayEnv
from airplay.world.geodesic import cost_to_go, field_cache, geodesic_progress, goal_field


@pytest.fixture(scope="module")
def world(indoor_2, scene_cache):
    protocol = load_protocol()  # a 0.2 m grid, built in about a second
    protocol = replace(protocol, task=replace(protocol.task, grid_resolution_m=0.2))
    return World.load(indoor_2, protocol=protocol, cache_dir=scene_cache).with_camera_size(16, 16)


@pytest.fixture(scope="module")
def detour_task(world):
    """The sampled task whose path around the walls is longest against the straight line."""
    tasks = sample_tasks(world.scene, world.grid, 12, 0, "pointgoal", world.protocol)
    task = max(tasks, key=lambda t: t.astar_length_m - t.euclidean_distance_m)
    assert task.astar_length_m > task.euclidean_distance_m + 5.0, "the test needs a goal behind a wall"
    return task


def fly_at_goal(world, task, progress: str, steps: int = 200):
    """Fly straight at the goal (1 m/s along the goal vector) until the episode ends; returns the
    summed reward (bonuses 0: progress only), the status and the start and end positions."""
    env = AirPlayEnv(world, tasks=[task], observations=("goal",), render_backend="cpu", progress=progress,
                     reward_success=0.0, reward_collision=0.0, action_repeat=2)
    obs, _ = env.reset()
    start, total = env.position.copy(), 0.0
    for _ in range(steps):
        g = np.asarray(obs["goal"], dtype=np.float64)
        v = g / np.linalg.norm(g)
        obs, reward, terminated, truncated, info = env.step(np.array([v[0], v[1], 0.5 * v[2], 0.0], np.float32))
        total += reward
        if terminated or truncated:
            break
    return total, info["status"], start, env.position.copy()


def test_field_is_the_path_length_around_walls(world, detour_task):
    cache = field_cache(world)
    assert field_cache(world) is cache, "one cache per scene"
    field = goal_field(cache, detour_task.goal_position)
    at_start, at_goal = cost_to_go(cache, field, np.stack([detour_task.start_position, detour_task.goal_position]))
    assert at_goal == 0.0
    # the penalised path is at least as long as the sampler's A* path (less a cell of rounding at each end)
    assert at_start >= detour_task.astar_length_m - 2 * world.grid.resolution_m
    assert at_start > detour_task.euclidean_distance_m + 5.0
    far = np.array([[1e4, 1e4, 1e4]])
    assert np.isinf(cost_to_go(cache, field, far)).all(), "a position far from any free cell has no value"
    assert np.isinf(cost_to_go(cache, None, detour_task.start_position[None])).all()


def test_flying_at_a_goal_behind_a_wall_earns_nothing(world, detour_task):
    euclid, status_e, start, end = fly_at_goal(world, detour_task, "euclidean")
    geo, status_g, start_g, end_g = fly_at_goal(world, detour_task, "geodesic")
    np.testing.assert_array_equal(end, end_g)  # the same flight: only the reward differs
    assert status_e == status_g == "collision"
    assert euclid > 1.0, "straight-line progress rewards closing in through the wall"
    assert geo < 0.0, "around the wall, the flight went the wrong way"
    # the step rewards telescope: their sum is the field's drop from start to end
    cache = field_cache(world)
    field = goal_field(cache, detour_task.goal_position)
    phi = cost_to_go(cache, field, np.stack([start, end]))
    assert geo == pytest.approx(phi[0] - phi[1], abs=1e-9)
    # and straight-line progress is the drop in distance
    goal = detour_task.goal_position
    assert euclid == pytest.approx(np.linalg.norm(start - goal) - np.linalg.norm(end - goal), abs=1e-6)


def test_progress_is_zero_where_a_value_is_missing():
    out = geodesic_progress(np.array([5.0, np.inf, 3.0, np.inf]), np.array([4.0, 2.0, np.inf, np.inf]))
    np.testing.assert_array_equal(out, [1.0, 0.0, 0.0, 0.0])


def test_unknown_progress_names_the_argument(world, detour_task):
    with pytest.raises(ValueError, match="progress"):
        AirPlayEnv(world, tasks=[detour_task], progress="manhattan")
