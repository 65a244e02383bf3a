"""What the learned policies (CNN-BC, ACT, DP) share: config fields, normalization, acting.

A :class:`LearnedPolicy` is a torch module and a :class:`~airplay.policies.base.Policy`:
``predict_action_chunk(obs)`` builds the batch of the last ``n_obs_steps`` observations
(:mod:`airplay.policies.observation`), normalizes it, runs :meth:`LearnedPolicy.generate`
(normalized actions (B, K, 4)) and unnormalizes the actions.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from airplay.policies.base import Policy, PolicyConfig, check
from airplay.policies.normalize import MODES, Normalizer
from airplay.policies.observation import (ACTION, ACTION_DIM, GOAL, GOAL_DIM, GOAL_KINDS, STATE, STATE_DIM,
                                          ObservationHistory)
from airplay.policies.vision import BACKBONES


@dataclasses.dataclass
class LearnedConfig(PolicyConfig):
    """Fields of every learned policy.

    goal: what the policy is told of the goal: "point" (``observation.goal``, PointGoal),
        "image" (``observation.images.goal`` through the same image encoder, ImageGoal) or
        "none" (goal-free).
    image_size: side S of the square image the camera frame is resized to (pixels).
    n_obs_steps: observations fed to the model, the current one last (DP: 2).
    backbone: image encoder, "resnet18" (torchvision) or "small" (three convolutions).
    backbone_width: channels of the first "small" convolution.
    pretrained_backbone: local file of ImageNet ResNet-18 weights ("" = from scratch).
    group_norm: replace BatchNorm by GroupNorm in ResNet-18 (must be False with pretrained
        weights, which carry BatchNorm statistics).
    state_norm, goal_norm, action_norm: normalization mode per feature, "mean_std" or "min_max".
    seed: seed of the inference noise (DP) at each ``reset``.
    """

    type: ClassVar[str] = "learned"
    goal: str = "point"
    image_size: int = 224
    n_obs_steps: int = 1
    backbone: str = "resnet18"
    backbone_width: int = 32
    pretrained_backbone: str = ""
    group_norm: bool = True
    state_norm: str = "mean_std"
    goal_norm: str = "mean_std"
    action_norm: str = "mean_std"
    seed: int = 0

    def validate(self) -> None:
        super().validate()
        check(self.goal in GOAL_KINDS, "goal", f"must be one of {', '.join(GOAL_KINDS)}, got {self.goal!r}")
        check(isinstance(self.image_size, int) and 16 <= self.image_size <= 1024, "image_size",
              f"must be an integer in 16..1024 pixels, got {self.image_size!r}")
        check(isinstance(self.n_obs_steps, int) and self.n_obs_steps >= 1, "n_obs_steps",
              f"must be an integer >= 1, got {self.n_obs_steps!r}")
        check(self.backbone in BACKBONES, "backbone", f"must be one of {', '.join(BACKBONES)}, got {self.backbone!r}")
        check(isinstance(self.backbone_width, int) and self.backbone_width >= 4, "backbone_width",
              f"must be an integer >= 4, got {self.backbone_width!r}")
        check(not (self.pretrained_backbone and self.group_norm), "group_norm",
              "must be False when pretrained_backbone is set (ImageNet weights use BatchNorm)")
        check(not (self.pretrained_backbone and self.backbone != "resnet18"), "pretrained_backbone",
              "is only for backbone 'resnet18'")
        for name in ("state_norm", "goal_norm", "action_norm"):
            check(getattr(self, name) in MODES, name, f"must be one of {', '.join(MODES)}, got {getattr(self, name)!r}")


def positive(cfg: PolicyConfig, *names: str) -> None:
    """Check that each named field is an integer >= 1."""
    for name in names:
        value = getattr(cfg, name)
        check(isinstance(value, int) and not isinstance(value, bool) and value >= 1, name,
              f"must be an integer >= 1, got {value!r}")


class LearnedPolicy(nn.Module, Policy):
    """Base of the torch policies; subclasses build the model and implement
    :meth:`generate` and :meth:`compute_loss` on normalized batches."""

    config_class: ClassVar[type[LearnedConfig]] = LearnedConfig

    def __init__(self, config: LearnedConfig) -> None:
        nn.Module.__init__(self)
        Policy.__init__(self, config)
        features = {STATE: (STATE_DIM, config.state_norm), ACTION: (ACTION_DIM, config.action_norm)}
        if config.goal == "point":
            features[GOAL] = (GOAL_DIM, config.goal_norm)
        self.normalizer = Normalizer(features)
        self.history = ObservationHistory(config.n_obs_steps, config.image_size, config.goal)
        self.generator = torch.Generator().manual_seed(config.seed)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def reset(self, task=None) -> None:
        Policy.reset(self, task)
        self.history.reset()
        self.generator.manual_seed(self.config.seed)

    def observe(self, obs: dict) -> None:
        self.history.append(obs)

    @torch.no_grad()
    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        if not len(self.history):
            self.observe(obs)
        self.eval()
        actions = self.predict_batch(self.history.batch(self.device))
        return actions[0].float().cpu().numpy()

    @torch.no_grad()
    def predict_batch(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Unnormalized (B, K, 4) commands for a batch of raw observations."""
        return self.normalizer.unnormalize(ACTION, self.generate(self.normalizer.normalize(batch)))

    def forward(self, batch: dict[str, torch.Tensor]):
        """(loss, info) on a raw training batch (normalized here)."""
        return self.compute_loss(self.normalizer.normalize(batch))

    def generate(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def compute_loss(self, batch: dict[str, torch.Tensor]):
        raise NotImplementedError


def masked_mean(err: torch.Tensor, is_pad: torch.Tensor | None) -> torch.Tensor:
    """Mean of (B, K, D) ``err`` over the controls that are not padding."""
    if is_pad is None:
        return err.mean()
    keep = (~is_pad).unsqueeze(-1).to(err.dtype)
    return (err * keep).sum() / (keep.sum() * err.shape[-1]).clamp_min(1.0)
