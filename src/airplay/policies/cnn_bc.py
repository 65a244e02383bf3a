"""CNN-BC: an image encoder and a state/goal MLP regress the next command (AirPlayground's
CNN behaviour-cloning baseline): one control per step, executed directly (hold, H = 1)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch
from torch import nn

from airplay.policies.learned import LearnedConfig, LearnedPolicy, masked_mean, positive
from airplay.policies.observation import ACTION, ACTION_DIM, ACTION_IS_PAD, GOAL, GOAL_DIM, GOAL_IMAGE, IMAGE, STATE
from airplay.policies.vision import ImageEncoder, PooledImageEncoder


@dataclasses.dataclass
class CNNBCConfig(LearnedConfig):
    """CNN-BC.

    image_features: size of the pooled image feature vector.
    hidden_dim: width of the state/goal MLP and of the head.
    (chunk_size 1, hold, H = 1 by default; see LearnedConfig for the shared fields.)
    """

    type: ClassVar[str] = "cnn_bc"
    chunk_size: int = 1
    execution_horizon: int = 1
    adapter: str = "hold"
    image_features: int = 256
    hidden_dim: int = 256

    def validate(self) -> None:
        super().validate()
        positive(self, "image_features", "hidden_dim")


class CNNBCPolicy(LearnedPolicy):
    name = "cnn_bc"
    config_class = CNNBCConfig

    def __init__(self, config: CNNBCConfig | None = None) -> None:
        config = config or CNNBCConfig()
        super().__init__(config)
        c = config
        self.image = PooledImageEncoder(ImageEncoder(c.backbone, c.backbone_width, c.pretrained_backbone,
                                                     c.group_norm), c.image_features, c.image_pool, c.image_size)
        low_dim = self.state_dim + (GOAL_DIM if c.goal == "point" else 0)
        self.low = nn.Sequential(nn.Linear(low_dim * c.n_obs_steps, c.hidden_dim), nn.ReLU()) if low_dim else None
        n_images = c.n_obs_steps + (1 if c.goal == "image" else 0)
        low_out = c.hidden_dim if low_dim else 0
        self.head = nn.Sequential(nn.Linear(n_images * c.image_features + low_out, c.hidden_dim), nn.ReLU(),
                                  nn.Linear(c.hidden_dim, c.hidden_dim), nn.ReLU(),
                                  nn.Linear(c.hidden_dim, c.chunk_size * ACTION_DIM))

    def generate(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        b = batch[IMAGE].shape[0]
        feats = [self.image(batch[IMAGE]).reshape(b, -1)]
        if self.config.goal == "image":
            feats.append(self.image(batch[GOAL_IMAGE]))
        if self.low is not None:
            low = ([batch[STATE]] if self.state_dim else []) + ([batch[GOAL]] if self.config.goal == "point" else [])
            feats.append(self.low(torch.cat(low, -1).reshape(b, -1)))
        return self.head(torch.cat(feats, -1)).reshape(b, self.config.chunk_size, ACTION_DIM)

    def compute_loss(self, batch: dict[str, torch.Tensor]):
        pred = self.generate(batch)
        k = self.config.chunk_size
        loss = masked_mean((pred - batch[ACTION][:, :k]) ** 2, batch.get(ACTION_IS_PAD, None)[:, :k]
                           if ACTION_IS_PAD in batch else None)
        return loss, {"mse": float(loss.detach())}
