"""Tiny synthetic demonstrations for the policy tests (no scene, no rendering): a few short
episodes of 32x32 images whose content moves with time, a state that integrates the
commands, and smooth commands that differ per episode."""

from __future__ import annotations

import numpy as np

from airplay.policies.dataset import EpisodeData


def tiny_episodes(n: int = 3, length: int = 24, size: int = 32, seed: int = 0,
                  goal_image: bool = False) -> list[EpisodeData]:
    rng = np.random.default_rng(seed)
    episodes = []
    for e in range(n):
        t = np.arange(length) * 0.02
        phase = rng.uniform(0, 2 * np.pi)
        action = np.stack([1.0 + 0.5 * np.sin(6 * t + phase), 0.3 * np.cos(4 * t + phase),
                           0.2 * np.sin(3 * t), 0.5 * np.cos(5 * t + phase)], 1).astype(np.float32)
        pos = np.cumsum(action[:, :3] * 0.02, axis=0) + rng.uniform(-1, 1, 3)
        yaw = np.cumsum(action[:, 3] * 0.02)
        quat = np.stack([np.zeros(length), np.zeros(length), np.sin(yaw / 2), np.cos(yaw / 2)], 1)
        state = np.concatenate([pos, quat, action[:, :3], np.zeros((length, 2)), action[:, 3:]], 1)
        goal = (np.array([3.0, 1.0, 0.5]) - pos).astype(np.float32)
        rgb = rng.integers(0, 40, (length, size, size, 3), dtype=np.uint8)
        for k in range(length):
            c = (k * size) // length
            rgb[k, :, c:c + 4, e % 3] = 255  # a bar that sweeps across, its colour per episode
        gi = rng.integers(0, 255, (size, size, 3), dtype=np.uint8) if goal_image else None
        episodes.append(EpisodeData(rgb=rgb, state=state.astype(np.float32), action=action, goal=goal,
                                    goal_image=gi))
    return episodes


def env_obs(episode: EpisodeData, k: int) -> dict:
    """The AirPlayEnv-style observation dict of frame k."""
    obs = {"rgb": episode.rgb[k], "depth": np.zeros((*episode.rgb.shape[1:3], 1), np.float32),
           "state": episode.state[k], "goal": episode.goal[k]}
    if episode.goal_image is not None:
        obs["goal_image"] = episode.goal_image
    return obs
