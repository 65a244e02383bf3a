"""Tiny configurations of the learned policies (CNN-BC, ACT, DP) for CPU tests, the chunk dataset
of the tiny demonstrations (:mod:`helpers.policy_data`) for each, and a rollout acting on an
episode's observations (test_policies_training, test_policy_inputs)."""

from __future__ import annotations

import numpy as np
from helpers.policy_data import env_obs, tiny_episodes

from airplay.policies.dataset import ChunkDataset
from airplay.policies.train import build_policy

SMALL = {"image_size": 32, "backbone": "small", "backbone_width": 8}
TINY = {
    "cnn_bc": {**SMALL, "image_features": 32, "hidden_dim": 64},
    "act": {**SMALL, "chunk_size": 8, "execution_horizon": 8, "dim_model": 32, "n_heads": 4, "dim_feedforward": 64,
            "n_encoder_layers": 1, "n_vae_encoder_layers": 1, "latent_dim": 8, "dropout": 0.0, "kl_weight": 1.0},
    "dp": {**SMALL, "chunk_size": 16, "execution_horizon": 8, "down_dims": (16, 32), "n_groups": 4,
           "image_features": 16, "step_embed_dim": 16, "num_train_timesteps": 50, "num_inference_steps": 5,
           "prediction_type": "sample"},
}
"""Tiny models. DP predicts the clean chunk here: with epsilon prediction (the paper's, the
default) it needs more than this CI budget to become conditional on the observation
(measured: loss 1.05 -> 0.074 in 300 updates, but commands no better than the mean); the
epsilon path of the sampler is checked exactly in test_ddim_recovers_the_chunk_from_an_oracle."""
POLICIES = tuple(TINY)


def dataset_for(kind: str, episodes=None) -> ChunkDataset:
    cfg = build_policy(kind, **TINY[kind]).config
    return ChunkDataset(episodes or tiny_episodes(), cfg.image_size, cfg.n_obs_steps, cfg.chunk_size, cfg.goal)


def rollout(policy, episode, steps: int) -> np.ndarray:
    """The commands ``policy`` gives (after ``reset``) for the first ``steps`` observations of ``episode``."""
    policy.reset()
    return np.stack([policy.select_action(env_obs(episode, k)) for k in range(steps)])
