"""EpisodeFeed: queued episodes flown N at a time; ended rows refilled at once, rows with nothing left
parked, an episode that ends at its start reported and its row refilled in the same call."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from airplay.tasks.protocol import load_protocol
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env_config import EnvConfig
from airplay.world.episode_feed import EpisodeFeed
from airplay.world.vector_env import AirPlayVectorEnv


@pytest.fixture(scope="module")
def world(indoor_2, scene_cache):
    protocol = load_protocol()
    protocol = replace(protocol, task=replace(protocol.task, grid_resolution_m=0.2))
    return World.load(indoor_2, protocol=protocol, cache_dir=scene_cache).with_camera_size(8, 8)


def test_the_feed_flies_every_item_once_and_parks_idle_rows(world):
    tasks = [replace(t, time_limit_s=0.02 * (2 + k)) for k, t in enumerate(sample_tasks(
        world.scene, world.grid, 4, 0, "pointgoal", world.protocol))]
    tasks.insert(1, replace(tasks[0], task_id="at-goal", start_position=tasks[0].goal_position))
    venv = AirPlayVectorEnv(2, world, EnvConfig(observations=("state", "goal"), render_backend="cpu", threads=1),
                            tasks=tasks)
    feed = EpisodeFeed(venv, range(len(tasks)), lambda k: tasks[k])
    started, done = [], []

    def on_start(rows, items):
        started.extend(zip(rows, items))

    def on_done(row, status, steps):
        done.append((feed.end(row), status, steps))
        return done[-1]

    first = feed.begin([0, 1], on_start, on_done)
    assert first == [(1, "success", 0)]  # started at its goal: reported, row 1 refilled with item 2
    assert started == [(0, 0), (1, 1), (1, 2)] and feed.live() == [0, 1]
    assert feed.obs["state"].shape == (2, 13) and feed.wall_s.min() > 0
    while feed.live():
        live = feed.live()
        terminated, truncated, info = feed.step(np.zeros((2, 4), np.float32))
        ended = [row for row in live if terminated[row] or truncated[row]]
        for row in ended:
            on_done(row, str(info["status"][row]), int(info["steps"][row]))
        feed.begin(ended, on_start, on_done)
    assert sorted(k for k, _, _ in done) == list(range(len(tasks)))
    assert {k: steps for k, status, steps in done if status == "timeout"} == {0: 2, 2: 3, 3: 4, 4: 5}
    assert venv.parked.all() and not feed.pending  # nothing left: both rows parked
    venv.close()
