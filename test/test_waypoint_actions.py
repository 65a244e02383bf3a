"""Waypoint actions (config ``actions = "waypoint"``): the labels computed from recorded poses,
the tracker adapter executing them, the dataset's chunks and statistics, and the commands
that refuse them where their metric or labeller is defined for velocity commands only."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from airplay.policies.adapters import CONTROL_DT_S, TrackerAdapter
from airplay.policies.base import ConfigError
from airplay.policies.dataset import ChunkDataset, EpisodeData
from airplay.policies.train import build_policy
from airplay.policies.waypoints import episode_waypoints

DT = CONTROL_DT_S


def fly_commands(commands: np.ndarray, start=(1.0, -2.0, 1.2), yaw0: float = 2.5) -> np.ndarray:
    """(T + 1, 13) states of a vehicle that flies each heading-frame command (vx vy vz, yaw rate)
    exactly for one control period (velocity in the state left zero: unused here)."""
    pos, yaw = np.array(start, np.float64), yaw0
    states = []
    for cmd in list(commands) + [None]:
        s = np.zeros(13)
        s[:3] = pos
        s[3:7] = [0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)]
        states.append(s)
        if cmd is None:
            break
        c, si = math.cos(yaw), math.sin(yaw)
        pos = pos + DT * np.array([c * cmd[0] - si * cmd[1], si * cmd[0] + c * cmd[1], cmd[2]])
        yaw = yaw + DT * cmd[3]
    return np.array(states)


def smooth_commands(n: int, seed: int = 0) -> np.ndarray:
    t = np.arange(n) * DT
    rng = np.random.default_rng(seed)
    a, w, p = rng.uniform(0.2, 1.0, 4), rng.uniform(0.5, 2.0, 4), rng.uniform(0, 6, 4)
    return (a * np.sin(w * t[:, None] + p)).astype(np.float64)


def test_waypoints_of_a_straight_flight_across_the_yaw_seam():
    """Facing west (yaw pi - 0.01) and turning left at 1 rad/s while flying 1 m/s forward: the
    yaw change crosses +-pi in map but not relative to the start; x forward, y left."""
    cmd = np.tile([1.0, 0.0, 0.5, 1.0], (10, 1))
    states = fly_commands(cmd, yaw0=math.pi - 0.01)
    wp, pad = episode_waypoints(states, 3)
    assert wp.shape == (11, 3, 4) and wp.dtype == np.float32 and pad.shape == (11, 3)
    np.testing.assert_allclose(wp[0, :, 3], [DT, 2 * DT, 3 * DT], atol=1e-6)  # no 2 pi jump
    np.testing.assert_allclose(wp[0, 0, :3], [DT, 0.0, 0.5 * DT], atol=1e-6)  # forward and up
    assert wp[0, 2, 1] > 0  # turning left moves the later waypoints to the left
    assert not pad[:8].any() and pad[8].tolist() == [False, False, True] and pad[10].all()
    np.testing.assert_array_equal(wp[10], np.zeros((3, 4), np.float32))  # the last pose, repeated


def test_tracker_replays_the_commands_the_labels_came_from():
    """Labels from a flight of known commands, executed by the tracker on the same perfect
    vehicle, give back those commands: the labels' frames, units and timing are the adapter's."""
    cmd = smooth_commands(60)
    states = fly_commands(cmd)
    k = 10
    wp, _ = episode_waypoints(states, k)
    for h in (1, 5, 10):
        adapter = TrackerAdapter(h)
        state = states[0].copy()
        replay = []
        for t in range(50):
            out = adapter.step({"state": state}, lambda obs, t=t: wp[t])
            replay.append(out)
            state = fly_commands(np.array([out]), start=state[:3], yaw0=2 * math.atan2(state[5], state[6]))[1]
        np.testing.assert_allclose(np.array(replay), cmd[:50], atol=2e-4, err_msg=f"H = {h}")


def episodes(n: int = 2, frames: int = 30) -> list[EpisodeData]:
    out = []
    for e in range(n):
        cmd = smooth_commands(frames - 1, seed=e)
        states = fly_commands(cmd)
        rgb = np.random.default_rng(e).integers(0, 255, (frames, 16, 16, 3), dtype=np.uint8)
        out.append(EpisodeData(rgb=rgb, state=states, action=np.vstack([cmd, cmd[-1:]]),
                               goal=np.ones((frames, 3))))
    return out


def test_chunk_dataset_serves_waypoint_chunks_and_their_statistics():
    eps = episodes()
    ds = ChunkDataset(eps, 16, chunk_size=5, goal="point", actions="waypoint")
    batch = ds.batch(np.array([0, 27, 29, 30]))
    wp1, pad1 = episode_waypoints(eps[1].state, 5)
    torch.testing.assert_close(batch["action"][3], torch.as_tensor(wp1[0]))
    assert batch["action"].shape == (4, 5, 4)
    assert batch["action_is_pad"][1].tolist() == [False, False, True, True, True]  # frames 28, 29, then past
    assert batch["action_is_pad"][2].all()  # the last frame of episode 0
    wp0, pad0 = episode_waypoints(eps[0].state, 5)
    real = np.concatenate([wp0[~pad0], wp1[~pad1]])
    np.testing.assert_allclose(ds.stats()["action"]["mean"], real.mean(0), rtol=1e-5, atol=1e-7)
    velocity = ChunkDataset(eps, 16, chunk_size=5, goal="point")  # the default: the recorded commands
    torch.testing.assert_close(velocity.batch(np.array([0]))["action"][0], torch.as_tensor(eps[0].action[:5],
                                                                                             dtype=torch.float32))
    with pytest.raises(ValueError, match="actions must be one of velocity, waypoint"):
        ChunkDataset(eps, 16, actions="poses")


def test_waypoint_config_goes_with_the_tracker_only():
    small = {"image_size": 32, "backbone": "small", "backbone_width": 8, "image_features": 16, "hidden_dim": 32}
    with pytest.raises(ConfigError, match="'adapter'.*tracker"):
        build_policy("cnn_bc", **small, actions="waypoint")  # CNN-BC's default adapter is hold
    with pytest.raises(ConfigError, match="'adapter'"):
        build_policy("cnn_bc", **small, adapter="tracker")  # velocity commands are not waypoints
    with pytest.raises(ConfigError, match="'actions'"):
        build_policy("cnn_bc", **small, actions="poses", adapter="tracker")
    policy = build_policy("cnn_bc", **small, actions="waypoint", adapter="tracker", chunk_size=10,
                          execution_horizon=5)
    with pytest.raises(ConfigError, match="'adapter'"):
        policy.set_execution("prefix")
