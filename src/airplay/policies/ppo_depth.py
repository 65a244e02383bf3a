"""PPO-depth: a small CNN over the depth image and an MLP over the heading-frame goal, the actor
that ``examples/ppo_pointgoal.py`` trains with Stable-Baselines3's PPO on the vector environment.

The network is the PPO actor's, layer for layer: :class:`DepthGoalEncoder` (the features
extractor the actor and the critic share in training), ``pi`` (the actor's hidden layer, Tanh)
and ``action`` (the Gaussian's mean). Acting is greedy: the mean, clipped to [-1, 1] and scaled
to the vehicle's command limits (``action_low`` .. ``action_high``, the environment's action
space), one control per prediction, held for ``execution_horizon`` control periods (the ``hold``
adapter; by default ``action_repeat``, the environment's control periods per step in training,
so that the policy decides as often as it did in training; ``airplay eval --execution-horizon``
and the policy node's ``execution_horizon`` override it). The checkpoint is an ordinary one
(:mod:`airplay.policies.checkpoint`): ``airplay eval --policy ppo_depth --checkpoint DIR`` and
the policy node load it. No Stable-Baselines3 here.

Inputs: ``depth`` (H, W, 1) float32 m, clipped at ``depth_clip_m``, scaled to [0, 1] and
average-pooled to ``image_size`` x ``image_size`` (any camera size); ``goal`` (3,) the goal in
the heading frame (m), fed as its direction and its distance clipped at ``goal_clip_m``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from airplay.policies.base import Policy, PolicyConfig, check
from airplay.policies.observation import ACTION_DIM, GOAL_DIM


@dataclasses.dataclass
class PPODepthConfig(PolicyConfig):
    """PPO-depth.

    image_size: side S of the square depth image the network reads (the camera's is pooled to it).
    depth_clip_m: depth beyond this reads as this far (m).
    goal_clip_m: goal distances beyond this read as this far (m).
    image_features: width of the CNN's output layer.
    goal_features: width of the goal MLP's output layer.
    hidden_dim: width of the actor's hidden layer.
    action_low, action_high: the commands [vx, vy, vz, yaw_rate] that -1 and +1 map to.
    action_repeat: control periods (50 Hz) per environment step in training (the vector
        environment's ``action_repeat``): each decision's command was applied that long.
    execution_horizon: control periods each command is held when flown (the ``hold`` adapter;
        None, the default, takes ``action_repeat``).
    (chunk_size 1, hold.)
    """

    type: ClassVar[str] = "ppo_depth"
    chunk_size: int = 1
    execution_horizon: int | None = None
    adapter: str = "hold"
    image_size: int = 64
    depth_clip_m: float = 10.0
    goal_clip_m: float = 20.0
    image_features: int = 128
    goal_features: int = 64
    hidden_dim: int = 64
    action_low: tuple = (-2.0, -2.0, -1.0, -1.0)
    action_high: tuple = (2.0, 2.0, 1.0, 1.0)
    action_repeat: int = 1

    def __post_init__(self) -> None:
        check(isinstance(self.action_repeat, int) and not isinstance(self.action_repeat, bool)
              and self.action_repeat >= 1, "action_repeat",
              f"must be an integer >= 1 (control periods per environment step), got {self.action_repeat!r}")
        if self.execution_horizon is None:  # decide as often as in training
            self.execution_horizon = self.action_repeat
        super().__post_init__()

    def validate(self) -> None:
        super().validate()
        for name in ("image_size", "image_features", "goal_features", "hidden_dim"):
            value = getattr(self, name)
            check(isinstance(value, int) and not isinstance(value, bool) and value >= 1, name,
                  f"must be an integer >= 1, got {value!r}")
        check(self.image_size >= 8, "image_size", f"must be >= 8 pixels, got {self.image_size!r}")
        for name in ("depth_clip_m", "goal_clip_m"):
            value = getattr(self, name)
            check(isinstance(value, (int, float)) and np.isfinite(value) and value > 0, name,
                  f"must be a number > 0 (m), got {value!r}")
        for name in ("action_low", "action_high"):
            value = getattr(self, name)
            check(isinstance(value, (tuple, list)) and len(value) == ACTION_DIM
                  and all(isinstance(v, (int, float)) and np.isfinite(v) for v in value), name,
                  f"must be {ACTION_DIM} finite numbers, got {value!r}")
        check(all(lo < hi for lo, hi in zip(self.action_low, self.action_high)), "action_high",
              f"must exceed action_low everywhere, got {self.action_low!r} .. {self.action_high!r}")


class DepthGoalEncoder(nn.Module):
    """(depth (B, H, W, 1) m, goal (B, 3) m) -> features (B, image_features + goal_features)."""

    def __init__(self, config: PPODepthConfig) -> None:
        super().__init__()
        c = self.config = config
        self.cnn = nn.Sequential(nn.Conv2d(1, 16, 5, stride=2, padding=2), nn.ReLU(),
                                 nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                 nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten())
        side = c.image_size
        for _ in range(3):
            side = (side - 1) // 2 + 1
        self.image = nn.Sequential(nn.Linear(32 * side * side, c.image_features), nn.ReLU())
        self.goal = nn.Sequential(nn.Linear(GOAL_DIM + 1, c.goal_features), nn.ReLU())
        self.features_dim = c.image_features + c.goal_features

    def forward(self, depth: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        c = self.config
        if depth.ndim != 4 or depth.shape[-1] != 1:
            raise ValueError(f"depth must be (B, H, W, 1), got {tuple(depth.shape)}")
        if goal.ndim != 2 or goal.shape[-1] != GOAL_DIM:
            raise ValueError(f"goal must be (B, {GOAL_DIM}), got {tuple(goal.shape)}")
        d = depth.float().permute(0, 3, 1, 2).clamp(0.0, c.depth_clip_m) / c.depth_clip_m
        if d.shape[-2:] != (c.image_size, c.image_size):
            d = F.adaptive_avg_pool2d(d, (c.image_size, c.image_size))
        g = goal.float()
        dist = g.norm(dim=-1, keepdim=True)
        g = torch.cat([g / dist.clamp_min(1e-6), (dist / c.goal_clip_m).clamp(max=1.0)], dim=-1)
        return torch.cat([self.image(self.cnn(d)), self.goal(g)], dim=-1)


class PPODepthPolicy(nn.Module, Policy):
    name = "ppo_depth"
    config_class = PPODepthConfig

    def __init__(self, config: PPODepthConfig | None = None) -> None:
        config = config or PPODepthConfig()
        nn.Module.__init__(self)
        Policy.__init__(self, config)
        self.encoder = DepthGoalEncoder(config)
        self.pi = nn.Sequential(nn.Linear(self.encoder.features_dim, config.hidden_dim), nn.Tanh())
        self.action = nn.Linear(config.hidden_dim, ACTION_DIM)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def mean(self, depth: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """The actor's mean action (B, 4), in the normalized [-1, 1] units PPO trains in (unclipped)."""
        return self.action(self.pi(self.encoder(depth, goal)))

    def commands(self, depth: torch.Tensor, goal: torch.Tensor) -> torch.Tensor:
        """Greedy commands (B, 4): the mean clipped to [-1, 1], scaled to action_low .. action_high."""
        lo = torch.as_tensor(self.config.action_low, dtype=torch.float32, device=depth.device)
        hi = torch.as_tensor(self.config.action_high, dtype=torch.float32, device=depth.device)
        return lo + (self.mean(depth, goal).clamp(-1.0, 1.0) + 1.0) * 0.5 * (hi - lo)

    @torch.no_grad()
    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        for key in ("depth", "goal"):
            if key not in obs:
                raise ValueError(f"ppo_depth reads the observation's {key!r}, which is missing "
                                 f"(keys: {', '.join(sorted(obs))})")
        self.eval()
        depth = np.asarray(obs["depth"], np.float32)
        depth = torch.as_tensor(depth[..., None] if depth.ndim == 2 else depth, device=self.device)[None]
        goal = torch.as_tensor(np.asarray(obs["goal"], np.float32).reshape(1, GOAL_DIM), device=self.device)
        return self.commands(depth, goal).cpu().numpy().astype(np.float32)
