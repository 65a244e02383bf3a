"""AirPlayEnv: Gymnasium contract, statuses, frames of the goal vector, determinism."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env import AirPlayEnv, goal_in_heading_frame


@pytest.fixture(scope="module")
def world(indoor_2, scene_cache):
    return World.load(indoor_2, cache_dir=scene_cache)


@pytest.fixture(scope="module")
def tasks(world):
    return sample_tasks(world.scene, world.grid, 4, 0, "pointgoal", world.protocol)


@pytest.mark.parametrize("setting", ["pointgoal", "imagegoal", "goalfree"])
@pytest.mark.slow
def test_passes_gymnasium_env_checker(world, setting):
    env = AirPlayEnv(world, setting=setting, num_tasks=2, render_backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's advice on normalised action spaces
        check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=3)
    assert ("goal" in obs) == (setting == "pointgoal")
    assert ("goal_image" in obs) == (setting == "imagegoal")
    assert info["status"] == "running"
    assert obs["rgb"].std() > 5, "camera image is blank"
    assert 0.0 < obs["depth"].min() and obs["depth"].max() <= 100.0


def test_goal_vector_is_in_the_heading_frame():
    np.testing.assert_allclose(goal_in_heading_frame([1, 1, 1], np.pi / 2, [1, 4, 2]), [3, 0, 1], atol=1e-12)
    np.testing.assert_allclose(goal_in_heading_frame([0, 0, 0], 0.0, [0, 2, 0]), [0, 2, 0], atol=1e-12)


def test_state_vector_layout(world, tasks):
    env = AirPlayEnv(world, tasks=tasks, render_images=False)
    obs, _ = env.reset(options={"task": tasks[0]})
    for _ in range(30):
        obs, *_ = env.step(np.array([1.0, 0.0, 0.0, 0.2], np.float32))
    s = obs["state"]
    np.testing.assert_allclose(s[0:3], env.position, atol=1e-5)
    assert np.linalg.norm(s[3:7]) == pytest.approx(1.0, abs=1e-5)
    # Velocity in map points along the heading (forward command).
    v = s[7:10]
    assert np.dot(v[:2], [np.cos(env.yaw), np.sin(env.yaw)]) > 0.5
    assert s[12] == pytest.approx(env.vehicle.yaw_rate[0], abs=0.02)


def _drive(env, cmd, max_steps=3000):
    info = {"status": "running"}
    terminated = truncated = False
    while info["status"] == "running" and max_steps:
        _, _, terminated, truncated, info = env.step(np.asarray(cmd, np.float32))
        max_steps -= 1
    return info, terminated, truncated


def test_climbing_out_of_the_band_is_out_of_bounds(world, tasks):
    env = AirPlayEnv(world, tasks=tasks, render_images=False)
    env.reset(options={"task": tasks[0]})
    info, terminated, truncated = _drive(env, [0.0, 0.0, 2.0, 0.0])
    # The indoor ceiling may be hit first; either way it ends, terminated, above the band or at it.
    assert info["status"] in ("out_of_bounds", "collision") and terminated and not truncated
    assert env.position[2] > world.scene.spec.navigable.z_max - world.vehicle.radius_m - 0.2


def test_flying_into_a_wall_is_a_collision(world, tasks):
    env = AirPlayEnv(world, tasks=tasks, render_images=False)
    env.reset(options={"task": tasks[1]})
    info, terminated, _ = _drive(env, [1.5, 0.0, 0.0, 0.0])
    assert info["status"] in ("collision", "out_of_bounds", "success")
    if info["status"] == "collision":
        assert world.checker.clearance(env.position[None])[0] < 0
        assert terminated


def test_hovering_times_out_at_the_task_limit(world, tasks):
    task = replace(tasks[2], time_limit_s=1.0)
    env = AirPlayEnv(world, tasks=[task], render_images=False)
    env.reset(options={"task": task})
    info, terminated, truncated = _drive(env, [0.0, 0.0, 0.0, 0.0])
    assert info["status"] == "timeout" and truncated and not terminated
    assert info["steps"] == 50


def test_starting_at_the_goal_is_success(world, tasks):
    task = replace(tasks[0], goal_position=tasks[0].start_position.copy())
    env = AirPlayEnv(world, tasks=[task], render_images=False)
    _, info = env.reset(options={"task": task})
    assert info["status"] == "success" and info["steps"] == 0


def test_deterministic(world, tasks):
    rng = np.random.default_rng(5)
    actions = rng.uniform(-1, 1, (60, 4)).astype(np.float32)
    runs = []
    for _ in range(2):
        env = AirPlayEnv(world, tasks=tasks, render_images=False)
        env.reset(options={"task": tasks[3]})
        for a in actions:
            if env.status.value != "running":
                break
            env.step(a)
        runs.append(np.array(env.trajectory))
    np.testing.assert_array_equal(runs[0], runs[1])


def test_non_finite_action_is_refused(world, tasks):
    env = AirPlayEnv(world, tasks=tasks, render_images=False)
    env.reset(options={"task": tasks[0]})
    with pytest.raises(ValueError, match="finite"):
        env.step(np.array([np.nan, 0, 0, 0], np.float32))
