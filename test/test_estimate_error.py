"""The vehicle's position-estimate error (airplay.sim.estimate_error): the process's statistics,
its correlation time as `airplay identify` measures it, the profile field, and AirPlayEnv showing
the policy the estimate while the task's rules judge the truth."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from numpy.testing import assert_allclose

from airplay.bridge.identify import correlation_time, estimate_error
from airplay.sim.estimate_error import EstimateErrorModel, estimate_error_from_profile, load_vehicle_file
from airplay.yaml_config import ConfigError


def _series(model: EstimateErrorModel, steps: int, dt: float = 0.02, seed: int = 0) -> np.ndarray:
    run = model.start(seed, "task", dt)
    out = np.empty((steps, 3))
    for k in range(steps):
        out[k] = run.offset
        run.step()
    return out


def test_the_process_has_the_models_rms_and_correlation_time():
    model = EstimateErrorModel(xy_rms_m=0.10, z_rms_m=0.11, time_constant_s=2.0)
    e = _series(model, 200_000)   # 4000 s of 50 Hz: 2000 correlation times
    assert math.sqrt(np.mean(e[:, 0] ** 2 + e[:, 1] ** 2)) == pytest.approx(0.10, rel=0.05)
    assert math.sqrt(np.mean(e[:, 2] ** 2)) == pytest.approx(0.11, rel=0.05)
    t = np.arange(len(e)) * 0.02
    # what airplay identify would report from this error (estimate - truth)
    assert correlation_time(t[:30_000], e[:30_000]) == pytest.approx(2.0, rel=0.25)
    report = estimate_error(t[:30_000], e[:30_000], t[:30_000], np.zeros((30_000, 3)), ground_s=0.0)
    again = estimate_error_from_profile({"estimate_error": report})
    assert again.time_constant_s == pytest.approx(2.0, rel=0.25) and again.xy_rms_m == pytest.approx(0.10, rel=0.3)


def test_each_task_and_seed_draws_its_own_error_the_same_every_time():
    model = EstimateErrorModel(0.2, 0.2, 1.0)
    a, b = _series(model, 50, seed=3), _series(model, 50, seed=3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, _series(model, 50, seed=4))
    other = model.start(3, "another task", 0.02).offset
    assert not np.array_equal(a[0], other)
    assert np.all(_series(EstimateErrorModel(0.0, 0.0), 10) == 0.0)


def test_a_profiles_estimate_error_is_read_and_bad_fields_are_named(tmp_path):
    good = tmp_path / "v.yaml"
    good.write_text("velocity_time_constant_s: 0.5\nprofile:\n  estimate_error:\n    xy_rms_m: 0.1\n"
                    "    z_rms_m: 0.2\n    time_constant_s: 3\n    samples: 100\n")
    params, model = load_vehicle_file(good)
    assert model == EstimateErrorModel(0.1, 0.2, 3.0) and params.velocity_time_constant_s == 0.5
    none = tmp_path / "none.yaml"
    none.write_text("velocity_time_constant_s: 0.5\n")
    assert load_vehicle_file(none)[1] is None and load_vehicle_file("")[1] is None
    for body, field in [("xy_rms_m: fast\n    z_rms_m: 0.2", "xy_rms_m"), ("z_rms_m: 0.2", "xy_rms_m"),
                        ("xy_rms_m: -1\n    z_rms_m: 0.2", "xy_rms_m"),
                        ("xy_rms_m: 0.1\n    z_rms_m: 0.2\n    time_constant_s: 0", "time_constant_s")]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"velocity_time_constant_s: 0.5\nprofile:\n  estimate_error:\n    {body}\n")
        with pytest.raises(ConfigError, match=field) as err:
            load_vehicle_file(bad)
        assert "bad.yaml" in str(err.value) and "profile.estimate_error" in str(err.value)


@pytest.fixture(scope="module")
def indoor(indoor_1):
    from airplay.world import World

    return World.load(indoor_1)


@pytest.mark.parametrize("render_images", [False, True])
def test_the_policy_sees_the_estimate_and_the_rules_judge_the_truth(indoor, render_images):
    from airplay.frames import heading_of_state
    from airplay.tasks.sampler import sample_tasks
    from airplay.world.env import AirPlayEnv, goal_in_heading_frame

    world = replace(indoor, estimate_error=EstimateErrorModel(0.3, 0.2, 1.0)).with_camera_size(32, 24)
    tasks = sample_tasks(world.scene, world.grid, 4, 0, "pointgoal", world.protocol)
    env = AirPlayEnv(world, "pointgoal", tasks=tasks, render_backend="cpu", render_images=render_images)
    plain = AirPlayEnv(indoor, "pointgoal", tasks=tasks, render_backend="cpu", render_images=render_images)
    obs, _ = env.reset(options={"task": tasks[0]})
    ref, _ = plain.reset(options={"task": tasks[0]})
    offsets = []
    for k in range(30):
        offset = env.estimated_position - env.position
        offsets.append(offset)
        assert np.linalg.norm(offset) > 0
        assert_allclose(obs["state"][0:3], (env.position + offset).astype(np.float32))
        assert_allclose(obs["state"][3:], ref["state"][3:], atol=1e-6)       # attitude, velocity: the truth's
        assert_allclose(obs["goal"], goal_in_heading_frame(env.estimated_position, heading_of_state(obs["state"]),
                                                           tasks[0].goal_position), atol=1e-5)
        if render_images:
            rgb = world.camera_images(env.estimated_position, env.yaw, "cpu", depth=False)[0]
            assert np.array_equal(obs["rgb"], rgb)   # rendered where the estimate says the vehicle is
        action = np.array([0.5, 0.0, 0.0, 0.1], np.float32)
        obs, _, _, _, info = env.step(action)
        ref, _, _, _, _ = plain.step(action)
    # the vehicle flies the same true path: the policy's view is off, the physics is not
    assert_allclose(np.asarray(env.trajectory), np.asarray(plain.trajectory), atol=1e-12)
    assert env.distance_to_goal_m == pytest.approx(plain.distance_to_goal_m)
    assert not np.allclose(offsets[0], offsets[-1])   # it wanders


@pytest.mark.parametrize("render_images", [False, True])
def test_an_imagegoal_observation_keeps_its_goal_image_with_an_estimate_error(indoor, render_images):
    from airplay.tasks.sampler import sample_tasks
    from airplay.world.env import AirPlayEnv

    world = replace(indoor, estimate_error=EstimateErrorModel(0.3, 0.2, 1.0)).with_camera_size(32, 24)
    tasks = sample_tasks(world.scene, world.grid, 2, 0, "imagegoal", world.protocol)
    env = AirPlayEnv(world, "imagegoal", tasks=tasks, render_backend="cpu", render_images=render_images)
    obs, _ = env.reset(options={"task": tasks[0]})
    for _ in range(3):
        assert set(obs) == set(env.observation_keys) and "goal_image" in obs
        assert_allclose(obs["state"][0:3], env.estimated_position.astype(np.float32))
        obs, *_ = env.step(np.array([0.3, 0.0, 0.0, 0.0], np.float32))


def test_eval_with_a_profile_that_has_an_estimate_error(indoor, tmp_path):
    """`airplay eval --vehicle` with a profile's estimate error: the runs differ from the profile
    without one only through what the policy saw; each is the same when run again."""
    base = tmp_path / "base.yaml"
    base.write_text("velocity_time_constant_s: 0.15\n")
    noisy = tmp_path / "noisy.yaml"
    noisy.write_text("velocity_time_constant_s: 0.15\nprofile:\n  estimate_error:\n    xy_rms_m: 1.5\n"
                     "    z_rms_m: 0.5\n    time_constant_s: 2.0\n")
    paths = {}
    for name, profile in (("base", base), ("noisy", noisy), ("noisy2", noisy)):
        out = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "airplay.cli", "eval", "--policy", "goal_direct", "--scenes",
                               str(indoor.scene.spec.root), "--episodes", "4", "--seed", "0", "--no-images",
                               "--no-progress", "--vehicle", str(profile), "--out", str(out)],
                              check=False, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        paths[name] = (out / "episodes.jsonl").read_text()
    assert paths["noisy"] == paths["noisy2"]
    assert paths["noisy"] != paths["base"]
