"""The Gymnasium ids and AirPlayVectorEnv: env checker, step-for-step equality with N single
environments (any N, any thread count), autoreset, and errors for bad arguments."""

from __future__ import annotations

import warnings
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from helpers.vector_rollouts import assert_steps_equal, random_actions

import airplay.gym
from airplay.tasks.protocol import load_protocol
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.vector_env import AirPlayVectorEnv, make_env

SIZE = 16  # pixels: the images are compared, not looked at
OBS = ("rgb", "depth", "goal", "state")


@pytest.fixture(scope="module")
def world(indoor_2, scene_cache):
    protocol = load_protocol()  # a 0.2 m SDF and grid: an eighth of the protocol's cells, built in ~1 s
    protocol = replace(protocol, task=replace(protocol.task, grid_resolution_m=0.2))
    return World.load(indoor_2, protocol=protocol, cache_dir=scene_cache).with_camera_size(SIZE, SIZE)


@pytest.fixture(scope="module")
def short_tasks(world):
    """Four tasks of 0.3 s (15 steps), so that episodes end and sub-environments reset within a test."""
    return [replace(t, time_limit_s=0.3) for t in sample_tasks(world.scene, world.grid, 4, 0, "pointgoal",
                                                                  world.protocol)]


@pytest.mark.parametrize("env_id", sorted(airplay.gym.ENV_IDS))
def test_registered_ids_pass_the_env_checker(world, env_id):
    env = gym.make(env_id, scene=world, num_tasks=2, render_backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's advice on normalised action spaces
        check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=1)
    setting = airplay.gym.ENV_IDS[env_id]
    want = {"rgb", "depth"} | {"pointgoal": {"goal"}, "imagegoal": {"goal_image"}, "vln": {"instruction"}}.get(
        setting, set())
    assert set(obs) == want, "default observations: rgb, depth and the goal (or instruction); no state unless asked"
    assert obs["rgb"].shape == (SIZE, SIZE, 3) and obs["rgb"].std() > 5
    assert info["status"] == "running"
    venv = gym.make_vec(env_id, num_envs=2, scene=world, num_tasks=2, render_backend="cpu")
    assert isinstance(venv, AirPlayVectorEnv) and venv.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
    assert venv.single_observation_space == env.observation_space
    if setting == "vln":  # the instruction: a Text observation, batched as a tuple of strings
        assert isinstance(env.observation_space["instruction"], gym.spaces.Text)
        assert isinstance(obs["instruction"], str) and len(obs["instruction"]) > 10
        batch, _ = venv.reset(seed=1)
        assert batch["instruction"][0] == obs["instruction"] and venv.observation_space.contains(batch)
    venv.close()


@pytest.mark.parametrize("n,threads,repeat,progress", [
    (1, 1, 1, "euclidean"), (3, 2, 1, "euclidean"), (8, 1, 1, "euclidean"), (8, 2, 1, "euclidean"),
    (1, 1, 3, "euclidean"), (3, 2, 3, "euclidean"), (3, 1, 1, "geodesic"), (8, 2, 3, "geodesic")])
def test_vector_env_equals_n_single_envs(world, short_tasks, n, threads, repeat, progress):
    tasks = short_tasks
    if repeat > 1:  # limits of 11, 14, 16 and 17 periods: episodes end inside a step, sub-environments at
        # different periods of one step (the batch holds the ended ones while the others fly on)
        tasks = [replace(t, time_limit_s=s) for t, s in zip(short_tasks, (0.22, 0.28, 0.32, 0.34))]
    kwargs = dict(tasks=tasks, observations=OBS, render_backend="cpu", reward_progress=2.0,
                  reward_collision=-3.0, action_repeat=repeat, progress=progress)
    singles = SyncVectorEnv([lambda: make_env(world, **kwargs) for _ in range(n)],
                            autoreset_mode=AutoresetMode.NEXT_STEP)
    batch = AirPlayVectorEnv(n, world, threads=threads, **kwargs)
    _, _, ended = assert_steps_equal(singles, batch, random_actions(n, 32).astype(np.float32), OBS, seed=7)
    assert ended >= n, "every sub-environment should have ended (and reset) at least once"
    batch.close()


def test_action_repeat_is_r_control_periods_with_one_observation(world, short_tasks, monkeypatch):
    """A step of action_repeat=3 is three single-period steps under the same action: the same
    state and observation after them, the sum of their rewards, one rendered observation, and
    the end (here the 0.3 s limit, 15 periods, inside the 6th step of 3) at the same period."""
    tasks = [replace(t, time_limit_s=0.32) for t in short_tasks]  # 16 periods: the 6th step ends after one
    kwargs = dict(tasks=tasks, observations=OBS, render_backend="cpu", reward_progress=2.0)
    one, three = make_env(world, **kwargs), make_env(world, action_repeat=3, **kwargs)
    assert three.action_repeat == 3 and three.metadata["render_fps"] == pytest.approx(50 / 3)
    observed = []
    build = three._observation
    monkeypatch.setattr(three, "_observation", lambda: observed.append(1) or build())
    a, _ = one.reset(seed=5)
    b, _ = three.reset(seed=5)
    actions = random_actions(1, 6, seed=3)[:, 0].astype(np.float32)
    for k, action in enumerate(actions):
        total, periods = 0.0, 0
        while periods < 3:
            a, r, term_a, trunc_a, info_a = one.step(action)
            total, periods = total + r, periods + 1
            if term_a or trunc_a:
                break
        renders = len(observed)
        b, r3, term_b, trunc_b, info_b = three.step(action)
        assert len(observed) == renders + 1, "one observation rendered per step"
        assert r3 == total and (term_b, trunc_b) == (term_a, trunc_a) and info_b == info_a, f"step {k}"
        for key in OBS:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"step {k}, {key}")
        if term_b or trunc_b:
            break
    assert info_b["steps"] == 16 and info_b["status"] == "timeout" and k == 5, "the limit counts periods"
    env = gym.make("airplay/PointGoal-v0", scene=world, num_tasks=2, render_backend="cpu", action_repeat=4)
    venv = gym.make_vec("airplay/PointGoal-v0", num_envs=2, scene=world, num_tasks=2, action_repeat=4)
    assert env.unwrapped.action_repeat == 4 and venv.action_repeat == 4
    venv.close()


def test_same_seeds_same_observations_whatever_n(world, short_tasks):
    one = AirPlayVectorEnv(1, world, tasks=short_tasks, observations=OBS, render_backend="cpu", threads=1)
    four = AirPlayVectorEnv(4, world, tasks=short_tasks, observations=OBS, render_backend="cpu", threads=2)
    o1, _ = one.reset(seed=[12])
    o4, _ = four.reset(seed=[3, 12, 5, 6])
    actions = random_actions(4, 10)
    for k in range(10):
        for key in OBS:
            np.testing.assert_array_equal(o1[key][0], o4[key][1])
        o1, *_ = one.step(actions[k, 1:2])
        o4, *_ = four.step(actions[k])


def test_autoreset_next_step(world, short_tasks):
    env = AirPlayVectorEnv(2, world, tasks=short_tasks, observations=("state", "goal"), render_backend="cpu")
    env.reset(seed=0)
    hover = np.zeros((2, 4), np.float32)
    for _ in range(14):
        _, _, term, trunc, info = env.step(hover)
        assert not (term | trunc).any()
    _, _, term, trunc, info = env.step(hover)  # the 15th step: 0.3 s, the tasks' limit
    assert trunc.all() and not term.any() and list(info["status"]) == ["timeout", "timeout"]
    # The next step resets, ignoring the action: the new episode starts where its task does.
    obs, reward, term, trunc, info = env.step(np.full((2, 4), 1.5, np.float32))
    assert not (term | trunc).any() and (reward == 0.0).all() and (info["steps"] == 0).all()
    starts = {t.task_id: t.start_position for t in short_tasks}
    for i in range(2):
        np.testing.assert_allclose(obs["state"][i, :3], starts[info["task_id"][i]], atol=1e-6)
        np.testing.assert_array_equal(obs["state"][i, 7:], 0.0)
    _, _, _, _, info = env.step(hover)
    assert (info["steps"] == 1).all() and list(info["status"]) == ["running", "running"]


def test_set_tasks_changes_the_pool_of_episodes_that_start_later(world, short_tasks):
    """set_tasks (a curriculum's): running episodes fly on with their task; every episode started
    after it (autoreset, restart, reset) draws from the new pool; bad pools are refused by name."""
    env = AirPlayVectorEnv(3, world, tasks=short_tasks, observations=("goal",), render_backend="cpu")
    env.reset(seed=1)
    hover = np.zeros((3, 4), np.float32)
    _, _, _, _, info = env.step(hover)
    before = list(info["task_id"])
    env.set_tasks(short_tasks[3:])
    assert env.tasks == short_tasks[3:]
    _, _, _, _, info = env.step(hover)
    assert list(info["task_id"]) == before  # running episodes keep their task
    for _ in range(13):  # the 0.3 s limit ends them (15 steps); the next step autoresets into the new pool
        env.step(hover)
    _, _, _, _, info = env.step(hover)
    assert set(info["task_id"]) == {short_tasks[3].task_id} and (info["steps"] == 0).all()
    env.set_tasks(short_tasks[:2])
    env.restart([1])
    _, _, _, _, info = env.step(hover)
    assert info["task_id"][1] in {t.task_id for t in short_tasks[:2]} and info["task_id"][0] == short_tasks[3].task_id
    _, info = env.reset(seed=5)
    assert set(info["task_id"]) <= {t.task_id for t in short_tasks[:2]}
    with pytest.raises(ValueError, match="at least one task"):
        env.set_tasks([])
    with pytest.raises(ValueError, match=r"tasks\[0\] .* imagegoal task"):
        env.set_tasks([replace(short_tasks[0], setting="imagegoal")])
    with pytest.raises(ValueError, match=r"tasks\[1\] .* of scene 'elsewhere'"):
        env.set_tasks([short_tasks[0], replace(short_tasks[1], scene="elsewhere")])
    with pytest.raises(ValueError, match="scene must be a scene index in 0..0"):
        env.set_tasks(short_tasks, scene=1)
    assert env.tasks == short_tasks[:2]  # a refused pool changes nothing


def test_reward_weights_scale_progress(world, short_tasks):
    rewards = []
    for weight in (1.0, 0.5):
        env = AirPlayVectorEnv(2, world, tasks=short_tasks, observations=("goal",), reward_progress=weight)
        env.reset(seed=4)
        rewards.append(sum(env.step(np.tile([[1.0, 0.0, 0.0, 0.0]], (2, 1)))[1] for _ in range(10)))
    assert np.abs(rewards[0]).min() > 1e-4
    np.testing.assert_allclose(rewards[1], 0.5 * rewards[0], rtol=1e-12)


@pytest.mark.parametrize("kwargs,name", [
    (dict(num_envs=0), "num_envs"),
    (dict(observations=("rgb", "lidar")), "observations"),
    (dict(observations="rgb"), "observations"),
    (dict(image_size=0), "image_size"),
    (dict(image_size=(64, 0)), "image_size"),
    (dict(threads=0), "threads"),
    (dict(reward_success=float("nan")), "reward_success"),
    (dict(scene="/nonexistent/scene"), "scene"),
    (dict(action_repeat=0), "action_repeat"),
    (dict(action_repeat=-2), "action_repeat"),
    (dict(action_repeat=2.5), "action_repeat"),
    (dict(action_repeat=True), "action_repeat"),
    (dict(progress="manhattan"), "progress"),
])
def test_bad_arguments_name_the_argument(world, short_tasks, kwargs, name):
    args = dict(num_envs=2, scene=world, tasks=short_tasks)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        AirPlayVectorEnv(**args)
    if "num_envs" not in kwargs and "threads" not in kwargs:  # the single environment checks the same
        single = {k: v for k, v in args.items() if k != "num_envs"}
        with pytest.raises(ValueError, match=name):
            gym.make("airplay/PointGoal-v0", **single)


def test_goal_free_has_no_goal_to_observe(world):
    with pytest.raises(ValueError, match="observations"):
        gym.make("airplay/GoalFree-v0", scene=world, observations=("rgb", "goal"), num_tasks=1)


def test_bad_actions_name_the_sub_environment(world, short_tasks):
    env = AirPlayVectorEnv(3, world, tasks=short_tasks, observations=("goal",))
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"shape \(3, 4\)"):
        env.step(np.zeros((2, 4)))
    bad = np.zeros((3, 4))
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="sub-environment 2"):
        env.step(bad)


def test_camera_batch_rows_equal_single_frames_in_any_output_layout(world, short_tasks):
    """CameraBatch rounds each view straight into its row of the caller's uint8 array; a row that
    is not contiguous (a strided view) gets the same image, and either is the single frame's."""
    from airplay.world.camera_batch import CameraBatch

    pos = np.array([t.start_position for t in short_tasks[:3]], dtype=np.float64)
    yaw = np.random.default_rng(0).uniform(-np.pi, np.pi, 3)
    batch = CameraBatch(world, 3, "cpu", threads=2)
    try:
        dense = np.zeros((3, SIZE, SIZE, 3), np.uint8)
        strided = np.zeros((3, SIZE, 2 * SIZE, 3), np.uint8)[:, :, ::2]
        batch.render(pos, yaw, dense, None)
        batch.render(pos, yaw, strided, None)
    finally:
        batch.close()
    for i in range(3):
        single = world.camera_images(pos[i], float(yaw[i]), "cpu", depth=False)[0]
        np.testing.assert_array_equal(dense[i], single)
        np.testing.assert_array_equal(strided[i], single)
