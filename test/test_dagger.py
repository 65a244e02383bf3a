"""``airplay dagger``: the policy flies, the state-only expert labels what it visited, the
labelled frames become a LeRobot dataset marked with their iteration, the policy is retrained
from its previous weights, and a killed run resumes without flying again what it flew."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from airplay.cli import main
from airplay.data.collect_flight import world_with_camera
from airplay.data.keys import ACTION_KEY, STATE_KEY
from airplay.data.lerobot import LeRobotDataset, LeRobotWriter
from airplay.policies import make_policy
from airplay.policies.checkpoint import load_policy
from airplay.policies.dagger import DaggerConfig, DaggerError, dagger, fly_episode
from airplay.policies.dataset import ChunkDataset, EpisodeData
from airplay.policies.train import TrainConfig, build_policy, train
from airplay.scene.synthetic import make_scene
from airplay.world.env import AirPlayEnv
from airplay.world import World
from airplay.tasks.sampler import sample_tasks

SIZE = (32, 32)
TINY = {"image_size": 32, "backbone": "small", "backbone_width": 8, "image_features": 16, "hidden_dim": 32}


pytestmark = pytest.mark.slow  # the module's fixture collects and trains (~100 s)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A small indoor scene, two expert demonstrations as a LeRobot dataset, a tiny CNN-BC."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("dagger")
    make_scene("indoor", 2, root / "indoor", gaussians_per_m2=4)
    world = world_with_camera(World.load(root / "indoor"), SIZE)
    env = AirPlayEnv(world, "pointgoal", tasks=[], render_backend="cpu", render_images=False)
    expert = make_policy("field_expert", world)
    episodes = []
    with LeRobotWriter(root / "demos", image_shape=SIZE) as writer:
        for task in sample_tasks(world.scene, world.grid, 2, 0, "pointgoal", world.protocol):
            ep = fly_episode(world, env, expert, expert, task, "cpu", 0.0, np.random.default_rng(0))
            assert ep["status"] == "success"
            np.testing.assert_array_equal(ep["label"], ep["command"])  # the expert flew its own labels
            writer.add_episode(ep["rgb"], ep["state"], ep["label"], goal=ep["goal"])
            episodes.append(EpisodeData(rgb=ep["rgb"], state=ep["state"], action=ep["label"], goal=ep["goal"]))
    ds = ChunkDataset(episodes, 32)
    torch.manual_seed(0)
    policy = build_policy("cnn_bc", ds, **TINY)
    train(policy, ds, TrainConfig.for_policy("cnn_bc", steps=20, batch_size=16, lr=1e-3, save_every=0),
          root / "ckpt0", progress=False)
    return root, world


def config(root, **changes) -> DaggerConfig:
    fields = dict(checkpoint=root / "ckpt0", datasets=(root / "demos",), scenes=(root / "indoor",), out=root / "run",
                  iterations=2, episodes=2, steps=10, batch_size=16, lr=1e-3, image_size=SIZE, beta=0.5)
    return DaggerConfig(**{**fields, **changes})


def test_labels_are_the_experts_on_the_visited_states_and_the_data_is_marked(setup):
    root, world = setup
    records = dagger(config(root), progress=False)
    assert [r["iteration"] for r in records] == [1, 2]
    assert records[0]["beta"] == 0.5 and records[1]["beta"] == 0.25
    expert = make_policy("field_expert", world).expert
    tasks = {t.task_id: t for t in sample_tasks(world.scene, world.grid, 2, 1001, "pointgoal", world.protocol)}
    ds = LeRobotDataset(root / "run" / "iter_01" / "data")
    assert ds.num_episodes == 2
    for e in range(ds.num_episodes):
        info = ds.episodes[e].meta
        assert info["dagger_iteration"] == 1 and info["source"] == "airplay dagger"
        ep = ds.episode(e)
        expert.reset(tasks[info["task_id"]])
        labels = np.concatenate([expert.act_on_state(s) for s in ep[STATE_KEY]])
        np.testing.assert_array_equal(ep[ACTION_KEY], labels)  # a function of the recorded state alone
    # the policy flew (mostly) its own commands: they differ from the labels
    with np.load(next((root / "run" / "iter_01" / "rollouts").glob("*.npz"))) as z:
        assert np.abs(z["command"] - z["label"]).max() > 1e-3
    # warm start: the retrained policy has the first one's normalization and loads
    p0, p2 = load_policy(root / "ckpt0"), load_policy(root / "run" / "iter_02" / "checkpoint")
    torch.testing.assert_close(p0.normalizer.stats[ACTION_KEY].center, p2.normalizer.stats[ACTION_KEY].center)
    assert any(not torch.equal(a, b) for a, b in zip(p0.state_dict().values(), p2.state_dict().values()))


def test_a_killed_run_resumes_without_flying_again(setup):
    root, _ = setup
    out = root / "resume"
    dagger(config(root, out=out, iterations=1), progress=False)
    flown = {p: p.stat().st_mtime_ns for p in (out / "iter_01" / "rollouts").glob("*.npz")}
    # killed in iteration 2 after one rollout: that rollout stays, the rest is redone
    records = dagger(config(root, out=out, iterations=2), progress=False)
    assert len(records) == 2
    assert {p: p.stat().st_mtime_ns for p in flown} == flown
    lines = (out / "dagger.jsonl").read_text().splitlines()
    assert [json.loads(x)["iteration"] for x in lines] == [1, 2]
    assert dagger(config(root, out=out, iterations=2), progress=False) == records  # nothing left to do


def test_bad_inputs_are_named(setup, tmp_path):
    root, _ = setup
    with pytest.raises(DaggerError, match="checkpoint"):
        config(root, checkpoint=tmp_path)
    with pytest.raises(DaggerError, match="dataset"):
        config(root, datasets=(tmp_path,))
    with pytest.raises(DaggerError, match="beta"):
        config(root, beta=2.0)
    assert main(["dagger", "--checkpoint", str(tmp_path), "--dataset", str(root / "demos"), "--scenes",
                 str(root / "indoor"), "--out", str(tmp_path / "x")]) == 2


def test_delayed_commands_are_executed_late(setup):
    """``delay_steps``: each command is executed that many periods after its observation (hover
    before the first); 0 is the undelayed flight."""
    _, world = setup
    env = AirPlayEnv(world, "pointgoal", tasks=[], render_backend="cpu", render_images=False)
    expert = make_policy("field_expert", world)
    task = min(sample_tasks(world.scene, world.grid, 6, 0, "pointgoal", world.protocol), key=lambda t: t.astar_length_m)
    flights = {d: fly_episode(world, env, expert, expert, task, "cpu", 0.0, np.random.default_rng(0), delay_steps=d)
               for d in (0, 3)}
    speed = {d: np.linalg.norm(ep["state"][:, 7:10], axis=1) for d, ep in flights.items()}
    assert speed[0][3] > 0.05  # the expert sets off at once
    np.testing.assert_allclose(speed[3][:4], 0.0, atol=1e-6)  # three periods of hover: still at rest
    assert speed[3][5] > 0.0
    assert flights[3]["status"] == "success"
    np.testing.assert_array_equal(flights[0]["command"][:20], flights[0]["label"][:20])
    with pytest.raises(ValueError, match="delay_steps must be an integer >= 0"):
        fly_episode(world, env, expert, expert, task, "cpu", 0.0, np.random.default_rng(0), delay_steps=-1)
