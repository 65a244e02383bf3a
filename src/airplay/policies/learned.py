"""What the learned policies (CNN-BC, ACT, DP) share: config fields, normalization, acting.

A :class:`LearnedPolicy` is a torch module and a :class:`~airplay.policies.base.Policy`:
``predict_action_chunk(obs)`` builds the batch of the last ``n_obs_steps`` observations
(:mod:`airplay.policies.observation`), normalizes it, runs :meth:`LearnedPolicy.generate`
(normalized actions (B, K, 4)) and unnormalizes the actions.

Batches at inference: :meth:`LearnedPolicy.predict_batch` on B observations gives each row
the bits a batch of one gives for it (:mod:`airplay.policies.batched` flies N episodes on
that). torch's CPU matrix products and oneDNN convolutions pick their kernel by the batch
size (a product: one row, two or three, four and more), and a row's result changes in the last
bits with the kernel (~1e-6 relative); so does DP's Mish on a (B, F) input, whose elements past
the last full SIMD vector take a scalar path. Normalizations, ReLU and attention do not. So
at inference those layers run one sample at a time (:func:`rows_apart`; the rest of the
model, the preprocessing and the adapters batched), and noise (DP) is drawn per row from each
episode's own generator.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from typing import ClassVar

import numpy as np
import torch
from torch import nn

from airplay.policies.base import Policy, PolicyConfig, check
from airplay.policies.normalize import MODES, Normalizer, compute_stats
from airplay.policies.observation import (ACTION, ACTION_DIM, GOAL, GOAL_DIM, GOAL_IMAGE, GOAL_KINDS, IMAGE, STATE,
                                          STATE_FEATURES, ObservationHistory, state_features)
from airplay.policies.vision import BACKBONES, POOLS
from airplay.policies.waypoints import ACTION_SPACES


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
    state_features: what the model reads of ``observation.state``: "none" (default; camera
        and goal only), "velocity" (heading-frame velocity and yaw rate) or "full" (all 13
        values); see :data:`airplay.policies.observation.STATE_FEATURES` for why.
    state_noise_std: Gaussian noise added to the state features in training (their units:
        m/s, rad/s, m), so that they cannot be copied exactly (0 = none).
    augment_shift_px: in training, shift each image by up to this many pixels (edge
        replicated), a small random crop (0 = none).
    augment_jitter: in training, scale each image's brightness and contrast by a random
        factor in [1 - j, 1 + j] (0 = none).
    image_pool: how CNN-BC and DP turn the image feature map into a vector (ACT keeps one
        token per cell): "spatial_softmax" (default), "flatten" or "avg" (global average,
        which loses where an obstacle is in the image); see :data:`airplay.policies.vision.POOLS`.
    actions: what each chunk holds: "velocity" (default; heading-frame velocity (m/s) and yaw
        rate (rad/s) commands) or "waypoint" (future poses relative to the current one, see
        :mod:`airplay.policies.waypoints`), which runs with the "tracker" adapter only.
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
    state_features: str = "none"
    state_noise_std: float = 0.0
    augment_shift_px: int = 0
    augment_jitter: float = 0.0
    image_pool: str = "spatial_softmax"
    actions: str = "velocity"

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
        check(self.state_features in STATE_FEATURES, "state_features",
              f"must be one of {', '.join(STATE_FEATURES)}, got {self.state_features!r}")
        check(self.state_noise_std >= 0, "state_noise_std", f"must be >= 0, got {self.state_noise_std!r}")
        check(isinstance(self.augment_shift_px, int) and 0 <= self.augment_shift_px < self.image_size // 2,
              "augment_shift_px", f"must be an integer in 0..{self.image_size // 2 - 1}, got {self.augment_shift_px!r}")
        check(self.image_pool in POOLS, "image_pool", f"must be one of {', '.join(POOLS)}, got {self.image_pool!r}")
        check(0 <= self.augment_jitter < 1, "augment_jitter", f"must be in [0, 1), got {self.augment_jitter!r}")
        check(self.actions in ACTION_SPACES, "actions",
              f"must be one of {', '.join(ACTION_SPACES)}, got {self.actions!r}")
        check((self.actions == "waypoint") == (self.adapter == "tracker"), "adapter",
              f"must be 'tracker' with waypoint actions and only with them (actions {self.actions!r}, "
              f"adapter {self.adapter!r})")
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
        self.state_dim = STATE_FEATURES[config.state_features]
        features = {ACTION: (ACTION_DIM, config.action_norm)}
        if self.state_dim:
            features[STATE] = (self.state_dim, config.state_norm)
        if config.goal == "point":
            features[GOAL] = (GOAL_DIM, config.goal_norm)
        self.normalizer = Normalizer(features)
        self.history = ObservationHistory(config.n_obs_steps, config.image_size, config.goal)
        self.generator = torch.Generator().manual_seed(config.seed)
        self._row_generators: list[torch.Generator] | None = None  # predict_batch's, while it runs

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

    def set_normalization(self, stats: dict[str, dict], states: np.ndarray | torch.Tensor) -> None:
        """Normalization statistics from a dataset: ``stats`` of the action (and goal) as
        :meth:`ChunkDataset.stats` gives them, the state's computed here on this policy's
        state features of the recorded (N, 13) ``states``."""
        stats = dict(stats)
        if self.state_dim:
            stats[STATE] = compute_stats(state_features(torch.as_tensor(states, dtype=torch.float32),
                                                        self.config.state_features).numpy())
        self.normalizer.set_stats(stats)

    def model_inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A raw batch (recorded 13-value states, images in [0, 1]) -> the normalized model
        inputs: the configured state features (none: no state key), and in training the
        state noise and image augmentation of the config."""
        out = dict(batch)
        c = self.config
        if self.state_dim:
            out[STATE] = state_features(batch[STATE], c.state_features)
            if self.training and c.state_noise_std > 0:
                out[STATE] = out[STATE] + c.state_noise_std * torch.randn_like(out[STATE])
        else:
            out.pop(STATE, None)
        if self.training:
            for key in (IMAGE, GOAL_IMAGE):
                if key in out:
                    out[key] = augment_images(out[key], c.augment_shift_px, c.augment_jitter)
        return self.normalizer.normalize(out)

    @torch.no_grad()
    def predict_batch(self, batch: dict[str, torch.Tensor],
                      generators: list[torch.Generator] | None = None, exact: bool = True) -> torch.Tensor:
        """Unnormalized (B, K, 4) commands for a batch of raw observations. ``exact``: row b is bit
        for bit what a batch of that one observation gives (module docstring; False: torch's
        batched kernels, equal to ~1e-6 relative). ``generators``: one per row, the inference
        noise of row b drawn from ``generators[b]`` (default: all rows from the policy's own
        generator, in row order)."""
        if generators is not None and len(generators) != next(iter(batch.values())).shape[0]:
            raise ValueError(f"generators: {len(generators)} for a batch of {next(iter(batch.values())).shape[0]}")
        self._row_generators = generators
        try:
            with rows_apart(self, exact):
                return self.normalizer.unnormalize(ACTION, self.generate(self.model_inputs(batch)))
        finally:
            self._row_generators = None

    def noise(self, b: int, *shape: int) -> torch.Tensor:
        """(b, *shape) standard normal inference noise: row i from the i-th generator given to
        :meth:`predict_batch`, else all from the policy's generator."""
        if self._row_generators is None:
            return torch.randn(b, *shape, generator=self.generator)
        return torch.cat([torch.randn(1, *shape, generator=g) for g in self._row_generators])

    def forward(self, batch: dict[str, torch.Tensor]):
        """(loss, info) on a raw training batch (normalized here)."""
        return self.compute_loss(self.model_inputs(batch))

    def generate(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def compute_loss(self, batch: dict[str, torch.Tensor]):
        raise NotImplementedError


APART = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.ConvTranspose1d, nn.Mish, nn.MultiheadAttention)
"""The layers :func:`rows_apart` applies one sample at a time: those whose CPU kernel (oneDNN
convolutions, BLAS products, attention's projections) is chosen by the batch size and sums in
another order with it, and Mish, whose vectorized tanh/softplus and scalar tail differ in the
last bit (a batch moves an element between them)."""


def _apart(forward):
    def apart(x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 2 or x.shape[0] == 1:
            return forward(x)
        return torch.cat([forward(x[i:i + 1]) for i in range(x.shape[0])])
    return apart


def _attention_apart(forward, batch_dim: int):
    def apart(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None, **kwargs):
        if query.shape[batch_dim] == 1 or (attn_mask is not None and attn_mask.dim() == 3):
            return forward(query, key, value, key_padding_mask=key_padding_mask, need_weights=need_weights,
                           attn_mask=attn_mask, **kwargs)
        outs, weights = [], []
        for i in range(query.shape[batch_dim]):
            q = query.narrow(batch_dim, i, 1)  # self-attention stays "query is key is value" (its own path)
            k = q if key is query else key.narrow(batch_dim, i, 1)
            one = (q, k, k if value is key else q if value is query else value.narrow(batch_dim, i, 1))
            mask = None if key_padding_mask is None else key_padding_mask[i:i + 1]
            out, w = forward(*one, key_padding_mask=mask, need_weights=need_weights, attn_mask=attn_mask, **kwargs)
            outs.append(out)
            weights.append(w)
        return torch.cat(outs, batch_dim), (None if weights[0] is None else torch.cat(weights))
    return apart


@contextmanager
def rows_apart(model: nn.Module, enabled: bool = True):
    """Within: every layer of :data:`APART` in ``model`` runs on one index of its input's first
    dimension at a time (an image, a sample, a row of a (B, F) input), so that its result for one
    does not depend on how many came with it (module docstring); ``enabled`` False: as is."""
    layers = model.__dict__.get("_apart_layers")  # found once per model (walking it costs ~0.1 ms a call)
    if layers is None:
        layers = [m for m in model.modules() if type(m) in APART]
        model.__dict__["_apart_layers"] = layers
    layers = layers if enabled else []
    for m in layers:
        m.forward = (_attention_apart(m.forward, 0 if m.batch_first else 1) if isinstance(m, nn.MultiheadAttention)
                     else _apart(m.forward))
    try:
        yield
    finally:
        for m in layers:
            del m.forward


def augment_images(images: torch.Tensor, shift_px: int, jitter: float) -> torch.Tensor:
    """Training augmentation of (..., 3, S, S) images in [0, 1], one draw per image of torch's
    global generator: a shift by up to ``shift_px`` pixels per axis (edges replicated) and
    brightness / contrast factors in [1 - jitter, 1 + jitter]."""
    if not shift_px and not jitter:
        return images
    lead, (ch, h, w) = images.shape[:-3], images.shape[-3:]
    x = images.reshape(-1, ch, h, w)
    n = x.shape[0]
    if shift_px:
        padded = torch.nn.functional.pad(x, (shift_px,) * 4, mode="replicate")
        dy, dx = torch.randint(0, 2 * shift_px + 1, (2, n))
        rows = (dy[:, None] + torch.arange(h))[:, None, :, None].expand(n, ch, h, w + 2 * shift_px)
        x = padded.gather(2, rows)
        cols = (dx[:, None] + torch.arange(w))[:, None, None, :].expand(n, ch, h, w)
        x = x.gather(3, cols)
    if jitter:
        bright = 1.0 + jitter * (2 * torch.rand(n, 1, 1, 1) - 1)
        contrast = 1.0 + jitter * (2 * torch.rand(n, 1, 1, 1) - 1)
        mean = x.mean(dim=(1, 2, 3), keepdim=True)
        x = ((x - mean) * contrast + mean * bright).clamp(0.0, 1.0)
    return x.reshape(*lead, ch, h, w)


def masked_mean(err: torch.Tensor, is_pad: torch.Tensor | None) -> torch.Tensor:
    """Mean of (B, K, D) ``err`` over the controls that are not padding."""
    if is_pad is None:
        return err.mean()
    keep = (~is_pad).unsqueeze(-1).to(err.dtype)
    return (err * keep).sum() / (keep.sum() * err.shape[-1]).clamp_min(1.0)
