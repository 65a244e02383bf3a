"""The policy contract: config validation naming the field, the adapters (prefix H, hold,
temporal ensembling, waypoint tracker), the observation batch, checkpoint errors, and the
expert served through the same contract with unchanged commands."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from airplay.policies import POLICY_NAMES, make_policy
from airplay.policies.act import ACTConfig
from airplay.policies.adapters import EnsembleAdapter, HoldAdapter, PrefixAdapter, TrackerAdapter, make_adapter
from airplay.policies.base import ConfigError, Policy
from airplay.policies.checkpoint import CheckpointError, load_policy, read_config
from airplay.policies.cnn_bc import CNNBCConfig
from airplay.policies.diffusion import DiffusionConfig
from airplay.policies.observation import GOAL, GOAL_IMAGE, IMAGE, STATE, ObservationHistory, image_tensor

torch.set_num_threads(1)


class Counter:
    """A predict function that records its calls; chunk n holds n * 100 + control index."""

    def __init__(self, k: int) -> None:
        self.k, self.calls = k, 0

    def __call__(self, obs):
        self.calls += 1
        c = np.zeros((self.k, 4), np.float32)
        c[:, 0] = self.calls * 100 + np.arange(self.k)
        return c


# -- configs ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls, field, value", [
    (ACTConfig, "n_heads", 7),               # does not divide dim_model 512
    (ACTConfig, "execution_horizon", 51),    # longer than the chunk
    (ACTConfig, "kl_weight", -1.0),
    (ACTConfig, "goal", "pose"),
    (ACTConfig, "image_size", 8),
    (DiffusionConfig, "chunk_size", 30),     # not a multiple of 4 for three U-Net levels
    (DiffusionConfig, "n_groups", 7),
    (DiffusionConfig, "prediction_type", "v"),
    (DiffusionConfig, "num_inference_steps", 1000),
    (CNNBCConfig, "hidden_dim", 0),
    (CNNBCConfig, "adapter", "teleport"),
    (CNNBCConfig, "backbone", "vit"),
    (CNNBCConfig, "state_norm", "zscore"),
])
def test_config_errors_name_the_field(cls, field, value):
    with pytest.raises(ConfigError, match=f"'{field}'") as err:
        cls(**{field: value})
    assert err.value.field == field


def test_pretrained_weights_need_batchnorm_and_resnet():
    with pytest.raises(ConfigError, match="'group_norm'"):
        CNNBCConfig(pretrained_backbone="/x/resnet18.pth")
    with pytest.raises(ConfigError, match="'pretrained_backbone'"):
        CNNBCConfig(pretrained_backbone="/x/resnet18.pth", group_norm=False, backbone="small")


def test_config_round_trips_through_a_dict_and_rejects_unknown_keys():
    cfg = DiffusionConfig(down_dims=(16, 32), n_groups=4, chunk_size=16, execution_horizon=8)
    assert DiffusionConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="'dim_modle'"):
        ACTConfig.from_dict({"dim_modle": 3})


def test_paper_defaults():
    act, dp, bc = ACTConfig(), DiffusionConfig(), CNNBCConfig()
    assert (act.chunk_size, act.execution_horizon, act.adapter) == (50, 50, "prefix")
    assert (dp.chunk_size, dp.execution_horizon, dp.n_obs_steps, dp.adapter) == (32, 16, 2, "prefix")
    assert (bc.chunk_size, bc.execution_horizon, bc.adapter) == (1, 1, "hold")


# -- adapters --------------------------------------------------------------------------------------
@pytest.mark.parametrize("h", [1, 5, 8])
def test_prefix_executes_h_controls_per_chunk(h):
    predict, adapter = Counter(8), PrefixAdapter(h)
    out = [adapter.step({}, predict)[0] for _ in range(3 * h)]
    assert predict.calls == 3
    assert out == [float((1 + i // h) * 100 + i % h) for i in range(3 * h)]
    adapter.reset()  # a new episode starts a new chunk
    assert adapter.step({}, predict)[0] == 400.0


def test_hold_repeats_the_first_control_h_times():
    predict, adapter = Counter(3), HoldAdapter(4)
    out = [adapter.step({}, predict)[0] for _ in range(8)]
    assert out == [100.0] * 4 + [200.0] * 4 and predict.calls == 2


def test_ensemble_averages_every_chunk_covering_the_step():
    k, m = 4, 0.5
    chunks = [np.random.default_rng(i).normal(size=(k, 4)).astype(np.float32) for i in range(7)]
    it = iter(chunks)
    adapter = EnsembleAdapter(k, coefficient=m)
    for t in range(7):
        got = adapter.step({}, lambda obs: next(it))
        ages = range(max(0, t - k + 1), t + 1)  # chunks predicted at these steps cover step t
        cands = np.stack([chunks[s][t - s] for s in ages])
        w = np.exp(-m * np.arange(len(cands)))  # the oldest weighs most
        np.testing.assert_allclose(got, w @ cands / w.sum(), rtol=1e-5, atol=1e-6)


def test_tracker_follows_waypoints_of_a_perfect_vehicle():
    """A vehicle that flies each command exactly stays on the waypoints: commands = differences."""
    dt, k = 0.02, 10
    yaw0 = 0.7
    t = (np.arange(k) + 1) * dt
    wp = np.stack([2.0 * t, 0.5 * t, -0.2 * t, 0.3 * t], 1).astype(np.float32)  # relative to the start
    state = np.zeros(13, np.float32)
    state[:3] = [1.0, 2.0, 1.5]
    adapter = TrackerAdapter(k, gain_1_s=2.0, dt_s=dt)
    pos, yaw = state[:3].astype(np.float64), yaw0
    for j in range(k):
        state[:3] = pos
        state[3:7] = [0, 0, math.sin(yaw / 2), math.cos(yaw / 2)]
        cmd = adapter.step({"state": state.copy()}, lambda obs: wp)
        c, s = math.cos(yaw), math.sin(yaw)
        pos = pos + dt * np.array([c * cmd[0] - s * cmd[1], s * cmd[0] + c * cmd[1], cmd[2]])
        yaw += dt * cmd[3]
        c0, s0 = math.cos(yaw0), math.sin(yaw0)
        d = pos - np.array([1.0, 2.0, 1.5])
        here = [c0 * d[0] + s0 * d[1], -s0 * d[0] + c0 * d[1], d[2], yaw - yaw0]
        np.testing.assert_allclose(here, wp[j], atol=1e-4)


def test_adapter_checks():
    with pytest.raises(ValueError, match="execution horizon"):
        make_adapter("prefix", 9, 8)
    with pytest.raises(ValueError, match="shape"):
        PrefixAdapter(4).step({}, lambda obs: np.zeros((2, 4)))


# -- observations ----------------------------------------------------------------------------------
def test_observation_history_repeats_the_first_frame_and_keeps_the_last_n():
    hist = ObservationHistory(2, 16, "point")
    frames = [np.full((24, 24, 3), 10 * i, np.uint8) for i in range(3)]
    for i, f in enumerate(frames):
        hist.append({"rgb": f, "state": np.full(13, i, np.float32), "goal": np.ones(3, np.float32)})
        batch = hist.batch()
        assert batch[IMAGE].shape == (1, 2, 3, 16, 16) and batch[STATE].shape == (1, 2, 13)
        assert batch[GOAL].shape == (1, 2, 3)
        assert batch[STATE][0, :, 0].tolist() == [max(0, i - 1), i]
    torch.testing.assert_close(batch[IMAGE][0, 1], image_tensor(frames[2], 16))
    with pytest.raises(KeyError, match="'goal_image'"):
        ObservationHistory(1, 16, "image").append({"rgb": frames[0], "state": np.zeros(13)})
    img = ObservationHistory(1, 16, "image")
    img.append({"rgb": frames[0], "state": np.zeros(13), "goal_image": frames[1]})
    assert img.batch()[GOAL_IMAGE].shape == (1, 3, 16, 16)


# -- checkpoints and make_policy -------------------------------------------------------------------
def test_checkpoint_errors_name_the_file(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text('{"type": "rnn", "config": {}}')
    with pytest.raises(CheckpointError, match="'rnn'"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text('{"type": "act", "config": {"n_heads": 7}}')
    with pytest.raises(CheckpointError, match="config.json.*'n_heads'"):
        read_config(tmp_path)
    (tmp_path / "config.json").write_text('{"type": "act", "config": {}}')
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_policy(tmp_path)


def test_make_policy_needs_a_checkpoint_of_the_right_type(tmp_path):
    assert {"expert", "random", "act", "dp", "cnn_bc"} <= set(POLICY_NAMES)
    with pytest.raises(ValueError, match="needs a checkpoint"):
        make_policy("act")
    (tmp_path / "config.json").write_text('{"type": "dp", "config": {}}')
    with pytest.raises(ValueError, match="holds a 'dp' policy, not 'act'"):
        make_policy("act", checkpoint=str(tmp_path))
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("rnn")


def test_the_light_policy_names_are_the_registrys():
    """airplay.policy_names (what the node schemas and the CLI's help list) names the registry's
    entries in its order, and its learned and VLN ones."""
    from airplay import policy_names
    from airplay.node_schemas import CHECKPOINT, POLICY
    from airplay.policies.registry import LEARNED_POLICIES, REGISTRY

    assert policy_names.POLICY_NAMES == POLICY_NAMES == tuple(REGISTRY)
    assert policy_names.LEARNED_POLICY_NAMES == LEARNED_POLICIES
    from airplay.policies.checkpoint import LEARNED_POLICY_CLASSES

    assert tuple(LEARNED_POLICY_CLASSES) == LEARNED_POLICIES  # a checkpoint's types are the learned entries
    assert all(REGISTRY[name].policy_class == LEARNED_POLICY_CLASSES[name] for name in LEARNED_POLICIES)
    assert policy_names.VLN_POLICY_NAMES == tuple(name for name, e in REGISTRY.items() if e.vln)
    assert all(name in POLICY.doc for name in POLICY_NAMES)
    assert all(name in CHECKPOINT.doc for name in LEARNED_POLICIES)


# -- the expert through the contract ---------------------------------------------------------------
@pytest.fixture(scope="module")
def world(indoor_1):
    from airplay.world import World

    return World.load(indoor_1)


def test_expert_goes_through_the_contract_with_unchanged_commands(world):
    """The expert is a Policy served by the hold adapter (H = 1); its commands are those of the
    A* tracker called directly on the same states, to the bit."""
    from airplay.tasks.expert import ExpertPilot
    from airplay.tasks.sampler import sample_tasks
    from airplay.world.env import AirPlayEnv

    policy = make_policy("expert", world)
    assert isinstance(policy, Policy) and policy.privileged and isinstance(policy.adapter, HoldAdapter)
    task = sample_tasks(world.scene, world.grid, 1, 3, "pointgoal", world.protocol)[0]
    env = AirPlayEnv(world, "pointgoal", tasks=[task], render_images=False)
    reference = ExpertPilot(world.grid, world.sdf, world.vehicle)
    obs, info = env.reset(options={"task": task})
    policy.reset(task)
    reference.reset(task)
    n = 0
    while info["status"] == "running" and n < 300:
        cmd = policy.select_action(obs)
        s = obs["state"]
        x, y, z, w = (float(v) for v in s[3:7])
        yaw = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
        ref = np.asarray(reference.act(s[0:3], s[7:10], yaw), np.float32)
        assert cmd.dtype == np.float32 and np.array_equal(cmd, ref)
        obs, _, _, _, info = env.step(cmd)
        n += 1
    assert n > 50
    with pytest.raises(ValueError, match="privileged"):
        policy.reset()


def test_random_policy_draws_uniformly_within_the_vehicle_limits_per_task(world):
    """``random``: uniform in the env's action box, a fresh draw every control, the same draws for
    the same task (seeded from the task id), different ones for another task."""
    from airplay.tasks.sampler import sample_tasks
    from airplay.world.env import AirPlayEnv

    policy = make_policy("random", world)
    assert isinstance(policy, Policy) and isinstance(policy.adapter, HoldAdapter)
    tasks = sample_tasks(world.scene, world.grid, 2, 0, "pointgoal", world.protocol)
    space = AirPlayEnv(world, "pointgoal", tasks=tasks, render_images=False).action_space

    def draws(task, n=2000):
        policy.reset(task)
        return np.stack([policy.select_action({}) for _ in range(n)])

    a = draws(tasks[0])
    assert a.dtype == np.float32 and all(space.contains(c) for c in a[:200])
    unit = (a - space.low) / (space.high - space.low)  # uniform on [0, 1] per dimension
    assert np.all(unit.min(0) < 0.01) and np.all(unit.max(0) > 0.99)
    assert np.all(np.abs(unit.mean(0) - 0.5) < 0.03) and np.all(np.abs(unit.std(0) - 12 ** -0.5) < 0.03)
    assert len(np.unique(a[:, 0])) == len(a)  # a new command every control
    assert np.array_equal(a, draws(tasks[0])) and not np.array_equal(a, draws(tasks[1]))
