"""Tiny synthetic demonstrations for the policy tests (no scene, no rendering): a few short
episodes of 32x32 images whose content moves with time, a state that integrates the
commands, and smooth commands that differ per episode."""

from __future__ import annotations

from pathlib import Path

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


TINY_SET = {
    "cnn_bc": ["backbone=small", "backbone_width=8", "image_features=32", "hidden_dim=64"],
    "act": ["backbone=small", "backbone_width=8", "chunk_size=8", "execution_horizon=8", "dim_model=32", "n_heads=4",
            "dim_feedforward=64", "n_encoder_layers=1", "n_vae_encoder_layers=1", "latent_dim=8"],
    "dp": ["backbone=small", "backbone_width=8", "chunk_size=16", "execution_horizon=8", "down_dims=[16,32]",
           "n_groups=4", "image_features=16", "step_embed_dim=16", "num_train_timesteps=50", "num_inference_steps=5"],
}
"""policy -> ``airplay train --set`` fields of a tiny model (fast to train, flies badly)."""


def write_tiny_dataset(root: Path) -> Path:
    """A LeRobot dataset at ``root`` of :func:`tiny_episodes` (2 episodes, 32x32)."""
    from airplay.data.lerobot import LeRobotWriter

    with LeRobotWriter(root, image_shape=(32, 32)) as writer:
        for ep in tiny_episodes(2):
            writer.add_episode(ep.rgb, ep.state, ep.action, goal=ep.goal)
    return root


def tiny_train_args(kind: str, dataset: Path, out: Path) -> list[str]:
    """``airplay train`` arguments (after ``airplay``) for :data:`TINY_SET`'s ``kind``: 30 steps on ``dataset``
    into ``out``, one torch thread."""
    args = ["train", "--policy", kind, "--dataset", str(dataset), "--out", str(out), "--steps", "30",
            "--batch-size", "8", "--image-size", "32x32", "--threads", "1", "--log-every", "10", "--no-progress"]
    for item in TINY_SET[kind]:
        args += ["--set", item]
    return args


def env_obs(episode: EpisodeData, k: int) -> dict:
    """The AirPlayEnv-style observation dict of frame k."""
    obs = {"rgb": episode.rgb[k], "depth": np.zeros((*episode.rgb.shape[1:3], 1), np.float32),
           "state": episode.state[k], "goal": episode.goal[k]}
    if episode.goal_image is not None:
        obs["goal_image"] = episode.goal_image
    return obs
