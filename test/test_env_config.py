"""EnvConfig: one configuration, checked once, taken by AirPlayEnv, make_env (gymnasium.make) and
AirPlayVectorEnv; errors name the field and the value; the dict and keyword forms give the same one."""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

import airplay.gym  # noqa: F401  (registers the ids)
from airplay.sim.disturbance import Disturbance
from airplay.tasks.protocol import load_protocol
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env import AirPlayEnv
from airplay.world.env_config import EnvConfig, RewardConfig, env_config
from airplay.world.env_factory import make_env
from airplay.world.vector_env import AirPlayVectorEnv

SIZE = 16


@pytest.fixture(scope="module")
def world(indoor_2, scene_cache):
    protocol = load_protocol()
    protocol = replace(protocol, task=replace(protocol.task, grid_resolution_m=0.2))
    return World.load(indoor_2, protocol=protocol, cache_dir=scene_cache).with_camera_size(SIZE, SIZE)


@pytest.fixture(scope="module")
def tasks(world):
    return [replace(t, time_limit_s=0.3) for t in sample_tasks(world.scene, world.grid, 3, 0, "pointgoal",
                                                                  world.protocol)]


@pytest.mark.parametrize("values,name", [
    (dict(setting="racing"), "setting"),
    (dict(observations=("rgb", "lidar")), "observations"),
    (dict(observations="rgb"), "observations"),
    (dict(setting="goalfree", observations=("goal",)), "observations"),
    (dict(setting="vln", observations=("goal", "instruction")), "observations"),
    (dict(image_size=0), "image_size"),
    (dict(image_size=(64, 2.5)), "image_size"),
    (dict(num_tasks=0), "num_tasks"),
    (dict(task_seed=1.5), "task_seed"),
    (dict(task_order="shuffle"), "task_order"),
    (dict(render_backend="vulkan"), "render_backend"),
    (dict(render_images="yes"), "render_images"),
    (dict(render_mode="human"), "render_mode"),
    (dict(action_repeat=0), "action_repeat"),
    (dict(reward=5), "reward must be"),
    (dict(reward={"success": float("inf")}), "reward_success"),
    (dict(reward_progress="fast"), "reward_progress"),
    (dict(reward_collision=float("nan")), "reward_collision"),
    (dict(progress="manhattan"), "progress"),
    (dict(disturbance=3.0), "disturbance"),
    (dict(disturbance="gale=9"), "gale"),
    (dict(disturbance_seed=None), "disturbance_seed"),
    (dict(cache_dir=7), "cache_dir"),
    (dict(threads=0), "threads"),
    (dict(speed=3), "speed"),
])
def test_bad_values_name_the_field(values, name):
    with pytest.raises(ValueError, match=name):
        EnvConfig.from_dict(values)


def test_the_forms_agree_and_round_trip():
    nested = EnvConfig.from_dict({"setting": "imagegoal", "image_size": 32, "observations": ["rgb", "goal"],
                                  "reward": {"success": 5.0, "progress": "geodesic"}, "disturbance": "wind=2:0"})
    flat = env_config("imagegoal", image_size=(32, 32), observations=("rgb", "goal"), reward_success=5,
                      progress="geodesic", disturbance=Disturbance(wind=(2.0, 0.0, 0.0)))
    keywords = EnvConfig(setting="imagegoal", image_size=32, observations=["rgb", "goal"],
                         reward=RewardConfig(success=5.0, progress="geodesic"), disturbance="wind=2:0")
    assert nested == flat == keywords
    assert nested.image_size == (32, 32) and nested.observations == ("rgb", "goal")
    assert EnvConfig.from_dict(nested.to_dict()) == nested
    assert nested.replace(reward_collision=-1.0).reward == RewardConfig(success=5.0, collision=-1.0, progress="geodesic")
    assert env_config(nested) is nested  # nothing to change: the same configuration
    with pytest.raises(ValueError, match="setting given twice"):
        env_config("pointgoal", setting="goalfree")
    with pytest.raises(dataclasses.FrozenInstanceError):
        nested.num_tasks = 3


def test_one_config_builds_all_three_alike(world, tasks):
    """The same EnvConfig given to AirPlayEnv, make_env, gymnasium.make and AirPlayVectorEnv: the same
    spaces and, flown on one task, the same first steps as the keyword form."""
    config = EnvConfig(observations=("depth", "goal", "state"), render_backend="cpu", action_repeat=2,
                       reward=RewardConfig(progress_weight=0.5, success=3.0), threads=1)
    single = AirPlayEnv(world, config.replace(task_order="random"), tasks=tasks)
    made = make_env(world, config, tasks=tasks)
    gym_made = gym.make("airplay/PointGoal-v0", scene=world, config=config, tasks=tasks).unwrapped
    keywords = make_env(world, "pointgoal", tasks=tasks, observations=("depth", "goal", "state"), render_backend="cpu",
                        action_repeat=2, reward_progress=0.5, reward_success=3.0)
    venv = AirPlayVectorEnv(2, world, config, tasks=tasks)
    assert made.config == gym_made.config == keywords.config.replace(threads=1)
    for env in (single, made, gym_made, keywords):
        assert env.observation_space == venv.single_observation_space
        assert env.action_space == venv.single_action_space
        assert env.action_repeat == 2 and env.reward_progress == 0.5 and env.reward_success == 3.0
    flights = []
    for env in (made, keywords):
        obs, _ = env.reset(seed=3)
        rewards = [env.step(np.array([1.0, 0.0, 0.0, 0.0], np.float32))[1] for _ in range(3)]
        flights.append((obs["state"].tobytes(), rewards))
    assert flights[0] == flights[1]
    venv.close()


@pytest.mark.parametrize("values,name", [
    (dict(disturbance="wind=1:0"), "disturbance"),
    (dict(render_images=False), "render_images"),
    (dict(task_order="cycle"), "task_order"),
])
def test_the_vector_env_refuses_what_only_the_single_one_does(world, tasks, values, name):
    with pytest.raises(ValueError, match=name):
        AirPlayVectorEnv(2, world, EnvConfig(**values), tasks=tasks)
    with pytest.raises(ValueError, match=name) if name == "task_order" else contextlib.nullcontext():
        make_env(world, EnvConfig(**values), tasks=tasks)  # the single one takes a disturbance, no images


def test_airplay_env_takes_the_setting_positionally_and_refuses_vln(world, tasks):
    env = AirPlayEnv(world, "goalfree", render_images=False)
    assert env.config.setting == "goalfree" and "goal" not in env.observation_space.spaces
    with pytest.raises(ValueError, match="setting: AirPlayEnv flies"):
        AirPlayEnv(world, "vln", tasks=tasks)
