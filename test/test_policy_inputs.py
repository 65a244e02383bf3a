"""What the learned policies read: the state features, their normalization, the
training augmentation, and old checkpoints reading as they were trained."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers.policy_data import env_obs, tiny_episodes
from helpers.tiny_policies import POLICIES, TINY, dataset_for, rollout

from airplay.policies.base import ConfigError
from airplay.policies.checkpoint import load_policy, save_policy
from airplay.policies.learned import augment_images
from airplay.policies.observation import STATE, STATE_FEATURES, state_features
from airplay.policies.train import build_policy

torch.set_num_threads(1)


@pytest.mark.parametrize("kind", POLICIES)
def test_default_policy_cannot_read_the_vehicles_motion(kind):
    """With the default state_features ("none") the commands do not change when the state
    (position, attitude, velocity, rates) does: nothing to copy."""
    ds = dataset_for(kind)
    torch.manual_seed(0)
    policy = build_policy(kind, ds, **TINY[kind]).eval()
    assert policy.config.state_features == "none" and STATE not in policy.normalizer.keys
    ep = tiny_episodes()[0]
    base = rollout(policy, ep, 6)
    ep.state[:] = np.random.default_rng(1).normal(size=ep.state.shape).astype(np.float32) * 5
    np.testing.assert_array_equal(rollout(policy, ep, 6), base)


@pytest.mark.parametrize("kind", POLICIES)
def test_full_state_policy_does_read_it(kind):
    ds = dataset_for(kind)
    torch.manual_seed(0)
    policy = build_policy(kind, ds, **TINY[kind], state_features="full").eval()
    ep = tiny_episodes()[0]
    base = rollout(policy, ep, 4)
    ep.state[:, 7:10] += 3.0
    assert np.abs(rollout(policy, ep, 4) - base).max() > 1e-4


def test_velocity_features_are_heading_frame_velocity_and_yaw_rate():
    yaw, roll = 0.7, 0.3
    # quaternion of yaw about z then roll about body x (x, y, z, w)
    cy, sy, cr, sr = math.cos(yaw / 2), math.sin(yaw / 2), math.cos(roll / 2), math.sin(roll / 2)
    q = [cy * sr, sy * sr, sy * cr, cy * cr]
    state = torch.tensor([[1.0, 2.0, 3.0, *q, 2.0 * math.cos(yaw), 2.0 * math.sin(yaw), 0.5, 0.0, 0.0, 0.0]])
    f = state_features(state, "velocity")
    assert f.shape == (1, STATE_FEATURES["velocity"])
    torch.testing.assert_close(f[0, :3], torch.tensor([2.0, 0.0, 0.5]), atol=1e-5, rtol=0)
    # a body rate about the body z axis, rolled by 0.3 rad: its map z component is cos(roll) of it
    state[0, 12] = 1.0
    assert abs(float(state_features(state, "velocity")[0, 3]) - math.cos(roll)) < 1e-5
    assert state_features(state, "none").shape == (1, 0)
    assert torch.equal(state_features(state, "full"), state)
    with pytest.raises(ValueError, match="state_features"):
        state_features(state, "pose")


def test_velocity_state_is_normalized_on_its_own_statistics():
    ds = dataset_for("cnn_bc")
    policy = build_policy("cnn_bc", ds, **TINY["cnn_bc"], state_features="velocity", state_noise_std=0.1)
    feats = state_features(ds.state, "velocity")
    stats = policy.normalizer.stats["observation__state"]
    torch.testing.assert_close(stats.center, feats.mean(0), atol=1e-5, rtol=1e-5)
    policy.eval()
    inputs = policy.model_inputs(ds.batch(torch.arange(4)))
    assert inputs[STATE].shape == (4, 1, 4)
    again = policy.model_inputs(ds.batch(torch.arange(4)))
    assert torch.equal(inputs[STATE], again[STATE])  # no noise outside training
    policy.train()
    torch.manual_seed(0)
    noisy = policy.model_inputs(ds.batch(torch.arange(4)))
    assert not torch.equal(noisy[STATE], inputs[STATE])


def test_config_fields_are_checked():
    with pytest.raises(ConfigError, match="state_features"):
        build_policy("cnn_bc", **TINY["cnn_bc"], state_features="pose")
    with pytest.raises(ConfigError, match="augment_shift_px"):
        build_policy("cnn_bc", **TINY["cnn_bc"], augment_shift_px=40)
    with pytest.raises(ConfigError, match="state_noise_std"):
        build_policy("cnn_bc", **TINY["cnn_bc"], state_noise_std=-1.0)


def test_augmentation_shifts_and_jitters_within_range():
    torch.manual_seed(0)
    images = torch.rand(5, 2, 3, 16, 16)
    assert augment_images(images, 0, 0.0) is images
    out = augment_images(images, 2, 0.2)
    assert out.shape == images.shape and float(out.min()) >= 0 and float(out.max()) <= 1
    assert not torch.equal(out, images)
    shifted = augment_images(images, 3, 0.0)
    # every shifted image is a window of its edge-padded original
    padded = torch.nn.functional.pad(images.reshape(-1, 3, 16, 16), (3,) * 4, mode="replicate")
    for i, img in enumerate(shifted.reshape(-1, 3, 16, 16)):
        assert any(torch.equal(img, padded[i, :, dy:dy + 16, dx:dx + 16]) for dy in range(7) for dx in range(7))


def test_checkpoint_without_the_field_reads_as_full_state(tmp_path):
    """A checkpoint written before state_features existed was trained on the 13 values."""
    ds = dataset_for("cnn_bc")
    torch.manual_seed(0)
    policy = build_policy("cnn_bc", ds, **TINY["cnn_bc"], state_features="full").eval()
    save_policy(policy, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["config"]["state_features"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = load_policy(tmp_path)
    assert loaded.config.state_features == "full"
    ep = tiny_episodes()[0]
    np.testing.assert_array_equal(rollout(loaded, ep, 4), rollout(policy, ep, 4))
    assert env_obs(ep, 0)["state"].shape == (13,)


@pytest.mark.parametrize("pool", ["spatial_softmax", "flatten", "avg"])
def test_image_pools_keep_where_things_are(pool):
    """spatial_softmax and flatten tell an object on the left from one on the right; the
    global average (what old checkpoints used) cannot, once the trunk's receptive field is
    smaller than the shift."""
    from airplay.policies.vision import ImageEncoder, PooledImageEncoder

    torch.manual_seed(0)
    enc = PooledImageEncoder(ImageEncoder("small", 8), 16, pool, 64).eval()
    left, right = torch.zeros(1, 3, 64, 64), torch.zeros(1, 3, 64, 64)
    left[..., 24:32, 16:20] = 1.0  # shifted by 24 px (3 x the trunk's stride), both away from the border
    right[..., 24:32, 40:44] = 1.0
    with torch.no_grad():
        differ = not torch.allclose(enc(left), enc(right), atol=1e-5)
    assert differ == (pool != "avg")


def test_old_checkpoints_read_with_the_average_pool(tmp_path):
    ds = dataset_for("cnn_bc")
    policy = build_policy("cnn_bc", ds, **TINY["cnn_bc"], image_pool="avg").eval()
    save_policy(policy, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    del cfg["config"]["image_pool"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_policy(tmp_path).config.image_pool == "avg"
