"""Learned policies reach goals in the closed loop (issue 19: offline errors looked tiny while
every policy crashed). A small policy trained on a few tasks' demonstrations must fly those
tasks to their goals through the simulator, from its own camera images and the goal vector.

Demonstrations: the state-only field expert flies each of 5 tasks 3 times with DART noise
(0.3 m/s, rad/s on the executed command; the recorded action is the clean label), so the data
shows how to come back to the path. Rendered at 64x64 on a sparse synthetic indoor scene.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from airplay.data.collect import world_with_camera
from airplay.policies import make_policy
from airplay.policies.dagger import fly_episode
from airplay.policies.dataset import ChunkDataset, EpisodeData
from airplay.policies.train import TrainConfig, build_policy, train
from airplay.scene.synthetic import make_scene
from airplay.sim.env import AirPlayEnv
from airplay.sim.world import World
from airplay.tasks.sampler import sample_tasks

TASKS, REPEATS, NOISE = 5, 3, 0.3
SMALL = {"image_size": 64, "backbone": "small", "backbone_width": 16}
MODELS = {
    "cnn_bc": ({**SMALL, "image_features": 64, "hidden_dim": 128}, 2000, 64, 1e-3),
}
"""kind -> (config, updates, batch size, peak learning rate)."""


@pytest.fixture(scope="module")
def flights(tmp_path_factory):
    """(world, env, field expert, tasks, demonstrations)."""
    root = tmp_path_factory.mktemp("closed_loop")
    make_scene("indoor", 2, root / "indoor", gaussians_per_m2=4)
    world = world_with_camera(World.load(root / "indoor", cache_dir=root / "cache"), (64, 64))
    env = AirPlayEnv(world, "pointgoal", tasks=[], render_backend="cpu", render_images=False)
    expert = make_policy("field_expert", world)
    tasks = sample_tasks(world.scene, world.grid, TASKS, 0, "pointgoal", world.protocol)
    rng = np.random.default_rng(0)
    demos = []
    for task in tasks:
        for _ in range(REPEATS):
            ep = fly_episode(world, env, expert, expert, task, "cpu", 0.0, rng, noise_std=NOISE)
            assert ep["status"] == "success", (task.task_id, ep["status"])
            demos.append(EpisodeData(rgb=ep["rgb"], state=ep["state"], action=ep["label"], goal=ep["goal"]))
    return world, env, expert, tasks, demos


def successes(policy, flights) -> list[str]:
    world, env, expert, tasks, _ = flights
    return [fly_episode(world, env, policy, expert, t, "cpu", 0.0, np.random.default_rng(0))["status"]
            for t in tasks]


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_policy_flies_its_training_tasks_to_the_goal(kind, flights, tmp_path):
    torch.set_num_threads(2)
    fields, steps, batch, lr = MODELS[kind]
    cfg = build_policy(kind, **fields).config
    assert cfg.state_features == "none"  # the default: nothing of the vehicle's own motion to copy
    ds = ChunkDataset(flights[4], cfg.image_size, cfg.n_obs_steps, cfg.chunk_size, "point")
    torch.manual_seed(0)
    policy = build_policy(kind, ds, **fields)
    train(policy, ds, TrainConfig.for_policy(kind, steps=steps, batch_size=batch, lr=lr, save_every=0, log_every=0),
          tmp_path, progress=False)
    statuses = successes(policy.eval(), flights)
    print(f"\n{kind}: {statuses}")
    assert statuses.count("success") >= 3, statuses
