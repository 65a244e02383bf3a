"""AirPlayVectorEnv over several scenes: each sub-environment equals the single environment of its
scene step by step (observations, rewards, terminations, infos) through autoresets, for
PointGoal and VLN; errors for bad scene lists name the argument."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import airplay.gym  # noqa: F401  (registers the ids)
from airplay.scene.synthetic import make_scene
from airplay.tasks.protocol import load_protocol
from airplay.tasks.sampler import sample_tasks
from airplay.vln.episodes import episodes_from_tasks
from airplay.world import World
from airplay.world.vector_env import AirPlayVectorEnv, make_env
from helpers.vector_rollouts import assert_steps_equal, random_actions

SIZE = 16  # pixels: the images are compared, not looked at


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """Two tiny scenes (different rooms), 16x16 cameras, a 0.2 m grid."""
    root = tmp_path_factory.mktemp("vector_scenes")
    protocol = load_protocol()
    protocol = replace(protocol, task=replace(protocol.task, grid_resolution_m=0.2))
    out = []
    for seed in (2, 5):
        make_scene("indoor", seed, root / f"indoor_{seed}", gaussians_per_m2=4)
        out.append(World.load(root / f"indoor_{seed}", protocol=protocol, cache_dir=root / "cache")
                   .with_camera_size(SIZE, SIZE))
    return out


def _short(tasks):
    return [replace(t, time_limit_s=0.3) for t in tasks]  # 15 steps: episodes end within the test


@pytest.fixture(scope="module")
def short_tasks(worlds):
    """Per scene, three PointGoal tasks and three VLN episodes (goal-free tasks, instructions) of 0.3 s."""
    point, vln = [], []
    for w in worlds:
        point.append(_short(sample_tasks(w.scene, w.grid, 3, 0, "pointgoal", w.protocol)))
        goal_free = sample_tasks(w.scene, w.grid, 3, 0, "goalfree", w.protocol)
        vln.append(episodes_from_tasks(goal_free, w.scene.spec.landmarks))
    return {"pointgoal": point, "vln": vln}


@pytest.mark.parametrize("setting,obs_keys,threads,repeat", [
    ("pointgoal", ("rgb", "depth", "goal", "state"), 2, 1),
    ("vln", ("rgb", "state", "instruction"), 1, 1),
    ("pointgoal", ("depth", "goal", "state"), 1, 4),
])
def test_multi_scene_equals_single_envs(worlds, short_tasks, setting, obs_keys, threads, repeat):
    if setting == "vln":  # VLN episodes get the protocol's time limit for their reference path: 0.3 s here too
        worlds = [replace(w, protocol=replace(w.protocol, time_limit_base_s=0.3, time_limit_per_astar_m_s=0.0))
                  for w in worlds]
    tasks = short_tasks[setting]
    if repeat > 1:  # limits of 9 to 17 periods: episodes end inside a step, at different periods per scene
        tasks = [[replace(t, time_limit_s=0.18 + 0.06 * j + 0.02 * k) for k, t in enumerate(ts)]
                 for j, ts in enumerate(tasks)]
    n = 3  # sub-environments 0 and 2 in scene 0, 1 in scene 1
    kwargs = dict(observations=obs_keys, render_backend="cpu", reward_progress=2.0, reward_collision=-3.0,
                  action_repeat=repeat)
    batch = AirPlayVectorEnv(n, worlds, setting, tasks=tasks, threads=threads, **kwargs)
    # the scenes' state bounds differ: the batch's space holds both
    singles = SyncVectorEnv([lambda i=i: make_env(worlds[i % 2], setting, tasks=tasks[i % 2], **kwargs)
                             for i in range(n)], autoreset_mode=AutoresetMode.NEXT_STEP,
                            observation_mode=(batch.observation_space, batch.single_observation_space))
    assert list(batch.scene_of) == [0, 1, 0]
    ia, ib, ended = assert_steps_equal(singles, batch, random_actions(n, 24).astype(np.float32), obs_keys, seed=3,
                                       check_spaces=True)  # (random commands give the largest body rates)
    assert ia["task_id"][1].startswith(worlds[1].name) and ib["task_id"][0].startswith(worlds[0].name)
    assert ended >= n, "every sub-environment should have ended (and reset) at least once"
    batch.close()
    singles.close()


def test_make_vec_takes_a_list_of_scenes(worlds, short_tasks):
    venv = gym.make_vec("airplay/PointGoal-v0", num_envs=2, scene=worlds, tasks=short_tasks["pointgoal"],
                        observations=("depth", "goal"), render_backend="cpu")
    obs, info = venv.reset(seed=0)
    assert isinstance(venv, AirPlayVectorEnv) and obs["depth"].shape == (2, SIZE, SIZE, 1)
    assert [t.split("-")[0] for t in info["task_id"]] == [worlds[0].name, worlds[1].name]
    venv.close()


@pytest.mark.parametrize("change,name", [
    (dict(scene=[]), r"scene: an empty list"),
    (dict(scene="bad"), r"scene\[1\]: scene '/nonexistent/scene' does not load"),
    (dict(scene="sizes"), r"image_size: the scenes' cameras differ"),
    (dict(num_envs=1), r"scene: 2 scenes for num_envs=1"),
    (dict(tasks="flat"), r"tasks: with a list of 2 scenes"),
])
def test_bad_scene_lists_name_the_argument(worlds, short_tasks, change, name):
    args = dict(num_envs=3, scene=list(worlds), tasks=None, num_tasks=2, observations=("goal",))
    args.update(change)
    if args["scene"] == "bad":
        args["scene"] = [worlds[0], "/nonexistent/scene"]
    elif args["scene"] == "sizes":
        args["scene"] = [worlds[0], worlds[1].with_camera_size(SIZE, SIZE // 2)]
    if args["tasks"] == "flat":
        args["tasks"] = short_tasks["pointgoal"][0]
    with pytest.raises(ValueError, match=name):
        AirPlayVectorEnv(**args)


def test_make_refuses_a_list_of_scenes(worlds):
    with pytest.raises(ValueError, match="scene: gymnasium.make builds one environment"):
        gym.make("airplay/PointGoal-v0", scene=list(worlds), num_tasks=1)


def test_vln_default_episodes_per_scene(worlds):
    """make_vec("airplay/VLN-v0") over two scenes makes each scene's default episodes (its own
    landmarks' instructions); the world layer's class alone asks for them, naming ``tasks``."""
    venv = gym.make_vec("airplay/VLN-v0", num_envs=2, scene=list(worlds), num_tasks=1,
                        observations=("depth", "instruction"), render_backend="cpu")
    obs, info = venv.reset(seed=0)
    assert [t.split("-")[0] for t in info["task_id"]] == [worlds[0].name, worlds[1].name]
    assert all(isinstance(s, str) and s for s in obs["instruction"])
    venv.close()
    with pytest.raises(ValueError, match=r"tasks: the vln setting flies given VLN episodes"):
        AirPlayVectorEnv(2, list(worlds), "vln", num_tasks=1, observations=("depth",))
