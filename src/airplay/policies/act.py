"""ACT (Action Chunking with Transformers, Zhao et al. 2023), our own torch implementation.

A ResNet-18 feature map (one token per cell, 2-D sinusoidal positions), the state, the goal
and a latent style variable z are encoded by a transformer encoder; a transformer decoder
turns ``chunk_size`` learned queries into a chunk of commands (50 controls = 1.0 s at 50 Hz,
executed with the prefix adapter, H = 50, or with temporal ensembling). In training a CVAE
encoder reads the state and the true chunk and gives z ~ N(mu, sigma); the loss is the L1
error of the chunk (padding masked) plus ``kl_weight`` times KL(q(z) || N(0, I)). At
inference z = 0 (the prior's mean).
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import torch
from torch import nn

from airplay.policies.base import check
from airplay.policies.learned import LearnedConfig, LearnedPolicy, masked_mean, positive
from airplay.policies.observation import ACTION, ACTION_DIM, ACTION_IS_PAD, GOAL, GOAL_DIM, GOAL_IMAGE, IMAGE, STATE
from airplay.policies.vision import ImageEncoder


@dataclasses.dataclass
class ACTConfig(LearnedConfig):
    """ACT.

    dim_model: transformer width. n_heads: attention heads (divides dim_model).
    dim_feedforward: feed-forward width. n_encoder_layers / n_decoder_layers / n_vae_encoder_layers:
    layer counts. latent_dim: size of z. use_vae: train with the CVAE (else z = 0 always).
    kl_weight: weight of the KL term. dropout: in the transformer layers.
    (chunk_size 50, prefix adapter, H = 50 by default; adapter "ensemble" for temporal ensembling.)
    """

    type: ClassVar[str] = "act"
    chunk_size: int = 50
    execution_horizon: int = 50
    adapter: str = "prefix"
    dim_model: int = 512
    n_heads: int = 8
    dim_feedforward: int = 3200
    n_encoder_layers: int = 4
    n_decoder_layers: int = 1
    n_vae_encoder_layers: int = 4
    latent_dim: int = 32
    use_vae: bool = True
    kl_weight: float = 10.0
    dropout: float = 0.1

    def validate(self) -> None:
        super().validate()
        positive(self, "dim_model", "n_heads", "dim_feedforward", "n_encoder_layers", "n_decoder_layers",
                 "n_vae_encoder_layers", "latent_dim")
        check(self.dim_model % self.n_heads == 0, "n_heads",
              f"must divide dim_model ({self.dim_model}), got {self.n_heads}")
        check(self.dim_model % 4 == 0, "dim_model", f"must be a multiple of 4 (2-D positions), got {self.dim_model}")
        check(self.kl_weight >= 0, "kl_weight", f"must be >= 0, got {self.kl_weight!r}")
        check(0 <= self.dropout < 1, "dropout", f"must be in [0, 1), got {self.dropout!r}")
        check(self.n_obs_steps == 1, "n_obs_steps", f"ACT reads the current observation only (1), got {self.n_obs_steps}")


def sine_1d(n: int, dim: int) -> torch.Tensor:
    """(n, dim) sinusoidal position table."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(n, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table


def sine_2d(h: int, w: int, dim: int) -> torch.Tensor:
    """(h * w, dim) positions of a feature map: half the channels for rows, half for columns."""
    rows, cols = sine_1d(h, dim // 2), sine_1d(w, dim // 2)
    return torch.cat([rows[:, None].expand(h, w, -1), cols[None].expand(h, w, -1)], -1).reshape(h * w, dim)


def _encoder(cfg: ACTConfig, layers: int) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(cfg.dim_model, cfg.n_heads, cfg.dim_feedforward, cfg.dropout,
                                       batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class ACTPolicy(LearnedPolicy):
    name = "act"
    config_class = ACTConfig

    def __init__(self, config: ACTConfig | None = None) -> None:
        config = config or ACTConfig()
        super().__init__(config)
        c, d = config, config.dim_model
        self.backbone = ImageEncoder(c.backbone, c.backbone_width, c.pretrained_backbone, c.group_norm)
        self.image_proj = nn.Conv2d(self.backbone.channels, d, 1)
        self.state_proj = nn.Linear(self.state_dim, d) if self.state_dim else None
        self.goal_proj = nn.Linear(GOAL_DIM, d) if c.goal == "point" else None
        self.latent_proj = nn.Linear(c.latent_dim, d)
        n_low = 1 + (self.state_proj is not None) + (self.goal_proj is not None)  # latent, state, goal
        self.low_pos = nn.Parameter(torch.zeros(n_low, d))
        self.goal_image_embed = nn.Parameter(torch.zeros(1, 1, d)) if c.goal == "image" else None
        self.encoder = _encoder(c, c.n_encoder_layers)
        dec = nn.TransformerDecoderLayer(d, c.n_heads, c.dim_feedforward, c.dropout, batch_first=True)
        self.decoder = nn.TransformerDecoder(dec, c.n_decoder_layers)
        self.queries = nn.Parameter(torch.zeros(c.chunk_size, d))
        nn.init.normal_(self.queries, std=0.02)
        self.head = nn.Linear(d, ACTION_DIM)
        if c.use_vae:
            self.vae_cls = nn.Parameter(torch.zeros(1, 1, d))
            self.vae_state = nn.Linear(self.state_dim, d) if self.state_dim else None
            self.vae_action = nn.Linear(ACTION_DIM, d)
            self.vae_encoder = _encoder(c, c.n_vae_encoder_layers)
            self.vae_out = nn.Linear(d, 2 * c.latent_dim)
            self.vae_prefix = 2 if self.state_dim else 1  # [CLS] (and the state) before the chunk
            self.register_buffer("vae_pos", sine_1d(c.chunk_size + self.vae_prefix, d), persistent=False)

    def _image_tokens(self, images: torch.Tensor) -> torch.Tensor:
        fmap = self.image_proj(self.backbone(images))  # (B, d, h, w)
        b, d, h, w = fmap.shape
        return fmap.flatten(2).transpose(1, 2) + sine_2d(h, w, d).to(fmap)

    def _latent(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(z, mu, log_var): from the CVAE encoder in training, zeros otherwise."""
        b = batch[IMAGE].shape[0]
        if not (self.config.use_vae and self.training and ACTION in batch):
            return torch.zeros(b, self.config.latent_dim, device=batch[IMAGE].device), None, None
        first = [self.vae_cls.expand(b, -1, -1)]
        if self.vae_state is not None:
            first.append(self.vae_state(batch[STATE][:, -1])[:, None])
        tokens = torch.cat([*first, self.vae_action(batch[ACTION])], 1) + self.vae_pos
        pad = batch.get(ACTION_IS_PAD)
        mask = None if pad is None else torch.cat(
            [torch.zeros(b, self.vae_prefix, dtype=torch.bool, device=pad.device), pad], 1)
        out = self.vae_out(self.vae_encoder(tokens, src_key_padding_mask=mask)[:, 0])
        mu, log_var = out.chunk(2, -1)
        z = mu + torch.randn_like(mu) * (0.5 * log_var).exp()
        return z, mu, log_var

    def _decode(self, batch: dict[str, torch.Tensor], z: torch.Tensor) -> torch.Tensor:
        b = z.shape[0]
        low = [self.latent_proj(z)]
        if self.state_proj is not None:
            low.append(self.state_proj(batch[STATE][:, -1]))
        if self.goal_proj is not None:
            low.append(self.goal_proj(batch[GOAL][:, -1]))
        tokens = [torch.stack(low, 1) + self.low_pos, self._image_tokens(batch[IMAGE][:, -1])]
        if self.goal_image_embed is not None:
            tokens.append(self._image_tokens(batch[GOAL_IMAGE]) + self.goal_image_embed)
        memory = self.encoder(torch.cat(tokens, 1))
        return self.head(self.decoder(self.queries.expand(b, -1, -1), memory))

    def generate(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        z, _, _ = self._latent(batch)
        return self._decode(batch, z)

    def compute_loss(self, batch: dict[str, torch.Tensor]):
        z, mu, log_var = self._latent(batch)
        pred = self._decode(batch, z)
        l1 = masked_mean((pred - batch[ACTION]).abs(), batch.get(ACTION_IS_PAD))
        info = {"l1": float(l1.detach())}
        loss = l1
        if mu is not None:
            kl = (-0.5 * (1 + log_var - mu.pow(2) - log_var.exp())).sum(-1).mean()
            loss = loss + self.config.kl_weight * kl
            info["kl"] = float(kl.detach())
        return loss, info
