"""Diffusion Policy (Chi et al. 2023), our own torch implementation (no ``diffusers``).

A conditional 1-D U-Net denoises a chunk of 32 future commands (0.64 s at 50 Hz), FiLM-
conditioned on the diffusion step and on the encoding of the last 2 observations (image
features, state, goal). Training: DDPM noise prediction at a random step of a
``num_train_timesteps`` squared-cosine schedule (loss: MSE, padding masked). Inference:
deterministic DDIM (eta = 0) in ``num_inference_steps`` steps from noise drawn with the
policy's generator (seeded at ``reset``; in a batch of episodes, each episode's own:
:meth:`~airplay.policies.learned.LearnedPolicy.noise`). Actions are min-max normalized to
[-1, 1] and the denoised chunk clipped to it. Executed with the prefix adapter, H = 16.
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
from airplay.policies.vision import ImageEncoder, PooledImageEncoder


@dataclasses.dataclass
class DiffusionConfig(LearnedConfig):
    """Diffusion Policy.

    down_dims: U-Net channel widths per level (the chunk length is halved between levels, so
        chunk_size must divide by 2 ** (len(down_dims) - 1)).
    kernel_size: 1-D convolution size. n_groups: GroupNorm groups (divides every width).
    image_features: pooled image feature size per frame. step_embed_dim: diffusion-step embedding.
    num_train_timesteps: DDPM steps. num_inference_steps: DDIM steps at inference.
    prediction_type: "epsilon" (the noise) or "sample" (the clean chunk).
    (chunk_size 32, n_obs_steps 2, prefix adapter, H = 16, min-max actions by default.)
    """

    type: ClassVar[str] = "dp"
    chunk_size: int = 32
    execution_horizon: int = 16
    adapter: str = "prefix"
    n_obs_steps: int = 2
    action_norm: str = "min_max"
    down_dims: tuple = (256, 512, 1024)
    kernel_size: int = 5
    n_groups: int = 8
    image_features: int = 256
    step_embed_dim: int = 128
    num_train_timesteps: int = 100
    num_inference_steps: int = 10
    prediction_type: str = "epsilon"

    def validate(self) -> None:
        super().validate()
        positive(self, "kernel_size", "n_groups", "image_features", "step_embed_dim", "num_train_timesteps",
                 "num_inference_steps")
        self.down_dims = tuple(self.down_dims)
        check(len(self.down_dims) >= 1 and all(isinstance(d, int) and d >= 1 for d in self.down_dims),
              "down_dims", f"must be positive integers, got {self.down_dims!r}")
        check(all(d % self.n_groups == 0 for d in self.down_dims), "n_groups",
              f"must divide every width of down_dims {self.down_dims}, got {self.n_groups}")
        check(self.chunk_size % 2 ** (len(self.down_dims) - 1) == 0, "chunk_size",
              f"must be a multiple of {2 ** (len(self.down_dims) - 1)} for {len(self.down_dims)} U-Net levels, "
              f"got {self.chunk_size}")
        check(self.num_inference_steps <= self.num_train_timesteps, "num_inference_steps",
              f"must be <= num_train_timesteps ({self.num_train_timesteps}), got {self.num_inference_steps}")
        check(self.prediction_type in ("epsilon", "sample"), "prediction_type",
              f"must be 'epsilon' or 'sample', got {self.prediction_type!r}")
        check(self.action_norm == "min_max", "action_norm", "must be 'min_max' (denoised chunks are clipped to [-1, 1])")


def squared_cosine_alphas_cumprod(steps: int, max_beta: float = 0.999) -> torch.Tensor:
    """alpha-bar_t of the squared-cosine beta schedule (Nichol & Dhariwal 2021), (steps,) float64."""
    f = lambda t: math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2  # noqa: E731
    betas = torch.tensor([min(1 - f((i + 1) / steps) / f(i / steps), max_beta) for i in range(steps)],
                         dtype=torch.float64)
    return torch.cumprod(1.0 - betas, 0)


class DDIMSampler:
    """DDPM forward noising and deterministic DDIM reverse steps over ``alphas_cumprod``."""

    def __init__(self, alphas_cumprod: torch.Tensor, prediction_type: str = "epsilon") -> None:
        self.ac = alphas_cumprod.float()
        self.prediction_type = prediction_type

    def add_noise(self, x0: torch.Tensor, noise: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = self.ac.to(x0.device)[t].view(-1, *([1] * (x0.ndim - 1)))
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def timesteps(self, n: int) -> list[int]:
        """n descending steps, evenly spaced and starting at the last training step ("trailing"
        spacing: the first step sees pure noise, as in training at t = T - 1)."""
        total = len(self.ac)
        return [int(round(total - i * total / n)) - 1 for i in range(n)]

    def step(self, model_out: torch.Tensor, t: int, t_prev: int, x: torch.Tensor, clip: float = 1.0) -> torch.Tensor:
        a_t = self.ac[t].item()
        a_prev = self.ac[t_prev].item() if t_prev >= 0 else 1.0
        if self.prediction_type == "epsilon":
            x0 = (x - math.sqrt(1 - a_t) * model_out) / math.sqrt(a_t)
        else:
            x0 = model_out
        x0 = x0.clamp(-clip, clip)
        eps = (x - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)
        return math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev) * eps


class StepEmbedding(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.Mish(), nn.Linear(4 * dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freq = torch.exp(torch.arange(half, device=t.device) * (-math.log(10000.0) / max(half - 1, 1)))
        arg = t.float()[:, None] * freq[None]
        return self.mlp(torch.cat([arg.sin(), arg.cos()], -1))


def conv_block(c_in: int, c_out: int, k: int, groups: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv1d(c_in, c_out, k, padding=k // 2), nn.GroupNorm(groups, c_out), nn.Mish())


class ResidualBlock(nn.Module):
    """Two convolution blocks; FiLM (per-channel scale and bias from the condition) between."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, k: int, groups: int) -> None:
        super().__init__()
        self.block1, self.block2 = conv_block(c_in, c_out, k, groups), conv_block(c_out, c_out, k, groups)
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        scale, bias = self.film(cond)[..., None].chunk(2, 1)
        return self.block2(self.block1(x) * scale + bias) + self.skip(x)


class ConditionalUnet1D(nn.Module):
    """(B, K, 4) noisy chunk, (B,) steps, (B, C) condition -> (B, K, 4)."""

    def __init__(self, cfg: DiffusionConfig, cond_dim: int) -> None:
        super().__init__()
        k, g = cfg.kernel_size, cfg.n_groups
        self.step = StepEmbedding(cfg.step_embed_dim)
        cond = cfg.step_embed_dim + cond_dim
        dims = (ACTION_DIM, *cfg.down_dims)
        self.down = nn.ModuleList()
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            last = i == len(cfg.down_dims) - 1
            self.down.append(nn.ModuleList([ResidualBlock(a, b, cond, k, g), ResidualBlock(b, b, cond, k, g),
                                            nn.Identity() if last else nn.Conv1d(b, b, 3, 2, 1)]))
        mid = cfg.down_dims[-1]
        self.mid = nn.ModuleList([ResidualBlock(mid, mid, cond, k, g), ResidualBlock(mid, mid, cond, k, g)])
        self.up = nn.ModuleList()
        rev = cfg.down_dims[::-1]
        for a, b in zip(rev[:-1], rev[1:]):
            self.up.append(nn.ModuleList([ResidualBlock(2 * a, b, cond, k, g), ResidualBlock(b, b, cond, k, g),
                                          nn.ConvTranspose1d(b, b, 4, 2, 1)]))
        self.out = nn.Sequential(conv_block(cfg.down_dims[0], cfg.down_dims[0], k, g),
                                 nn.Conv1d(cfg.down_dims[0], ACTION_DIM, 1))

    def forward(self, x: torch.Tensor, t: torch.Tensor, global_cond: torch.Tensor) -> torch.Tensor:
        cond = torch.cat([self.step(t), global_cond], -1)
        x = x.transpose(1, 2)
        skips = []
        for res1, res2, down in self.down:
            x = res2(res1(x, cond), cond)
            skips.append(x)
            x = down(x)
        for res in self.mid:
            x = res(x, cond)
        for res1, res2, up in self.up:
            x = up(res2(res1(torch.cat([x, skips.pop()], 1), cond), cond))
        return self.out(x).transpose(1, 2)


class DiffusionPolicy(LearnedPolicy):
    name = "dp"
    config_class = DiffusionConfig

    def __init__(self, config: DiffusionConfig | None = None) -> None:
        config = config or DiffusionConfig()
        super().__init__(config)
        c = config
        self.image = PooledImageEncoder(ImageEncoder(c.backbone, c.backbone_width, c.pretrained_backbone,
                                                     c.group_norm), c.image_features, c.image_pool, c.image_size)
        per_step = c.image_features + self.state_dim + (GOAL_DIM if c.goal == "point" else 0)
        cond_dim = per_step * c.n_obs_steps + (c.image_features if c.goal == "image" else 0)
        self.unet = ConditionalUnet1D(c, cond_dim)
        self.sampler = DDIMSampler(squared_cosine_alphas_cumprod(c.num_train_timesteps), c.prediction_type)

    def _condition(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        b = batch[IMAGE].shape[0]
        parts = [self.image(batch[IMAGE])] + ([batch[STATE]] if self.state_dim else [])
        if self.config.goal == "point":
            parts.append(batch[GOAL])
        cond = [torch.cat(parts, -1).reshape(b, -1)]
        if self.config.goal == "image":
            cond.append(self.image(batch[GOAL_IMAGE]))
        return torch.cat(cond, -1)

    def generate(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        cond = self._condition(batch)
        b = cond.shape[0]
        x = self.noise(b, self.config.chunk_size, ACTION_DIM).to(cond)
        steps = self.sampler.timesteps(self.config.num_inference_steps)
        for i, t in enumerate(steps):
            t_prev = steps[i + 1] if i + 1 < len(steps) else -1
            out = self.unet(x, torch.full((b,), t, device=cond.device, dtype=torch.long), cond)
            x = self.sampler.step(out, t, t_prev, x)
        return x

    def compute_loss(self, batch: dict[str, torch.Tensor]):
        cond = self._condition(batch)
        x0 = batch[ACTION]
        noise = torch.randn_like(x0)
        t = torch.randint(0, self.config.num_train_timesteps, (x0.shape[0],), device=x0.device)
        out = self.unet(self.sampler.add_noise(x0, noise, t), t, cond)
        target = noise if self.config.prediction_type == "epsilon" else x0
        loss = masked_mean((out - target) ** 2, batch.get(ACTION_IS_PAD))
        return loss, {"mse": float(loss.detach())}
