"""Image encoders shared by the learned policies: ResNet-18 (torchvision) or a small CNN.

Input: (N, 3, S, S) float32 in [0, 1]; output: a feature map (N, C, S', S'). ResNet-18 is
built with ``weights=None``; ImageNet weights come only from a local file (``.safetensors``,
or a torchvision ``.pth`` read with ``torch.load(weights_only=True)``), never downloaded.
From scratch, BatchNorm is replaced by GroupNorm (small batches, identical train/eval maths).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

BACKBONES = ("resnet18", "small")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(max(1, channels // 16), channels)


def load_state_dict_file(path: str | Path) -> dict[str, torch.Tensor]:
    """Tensors of a ``.safetensors`` file or a weights-only torch file (no code execution)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pretrained weights file {path} does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(path, map_location="cpu", weights_only=True)


def resnet18_trunk(pretrained: str = "", group_norm: bool = True) -> nn.Module:
    """ResNet-18 up to layer4 (512 channels, stride 32)."""
    import torchvision

    model = torchvision.models.resnet18(weights=None, norm_layer=_group_norm if group_norm else None)
    if pretrained:
        model.load_state_dict(load_state_dict_file(pretrained))
    return nn.Sequential(*list(model.children())[:-2])


def small_trunk(width: int) -> nn.Module:
    """Three stride-2 convolutions (width, 2 width, 4 width channels), GroupNorm, ReLU."""
    layers, c_in = [], 3
    for c in (width, 2 * width, 4 * width):
        layers += [nn.Conv2d(c_in, c, 3, stride=2, padding=1), _group_norm(c), nn.ReLU(inplace=True)]
        c_in = c
    return nn.Sequential(*layers)


class ImageEncoder(nn.Module):
    """ImageNet-normalized image -> feature map; ``channels`` gives C."""

    def __init__(self, backbone: str = "resnet18", width: int = 32, pretrained: str = "",
                 group_norm: bool = True) -> None:
        super().__init__()
        if backbone == "resnet18":
            self.trunk, self.channels = resnet18_trunk(pretrained, group_norm), 512
        elif backbone == "small":
            self.trunk, self.channels = small_trunk(width), 4 * width
        else:
            raise ValueError(f"backbone must be one of {', '.join(BACKBONES)}, got {backbone!r}")
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.trunk((images - self.mean) / self.std)


POOLS = ("spatial_softmax", "flatten", "avg")
"""How a feature map becomes a vector: ``spatial_softmax`` (per channel the expected image
coordinates of its softmax, Levine et al. 2016, as robomimic and Diffusion Policy use),
``flatten`` (every cell, through the linear layer) or ``avg`` (global average: where in the
image a feature lies is lost; what checkpoints without the field used)."""


class SpatialSoftmax(nn.Module):
    """(N, C, h, w) -> (N, 2C): per channel the softmax-weighted mean (x, y) in [-1, 1]."""

    def __init__(self, h: int, w: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.linspace(-1, 1, h), torch.linspace(-1, 1, w), indexing="ij")
        self.register_buffer("grid", torch.stack([xs.reshape(-1), ys.reshape(-1)], 1), persistent=False)

    def forward(self, fmap: torch.Tensor) -> torch.Tensor:
        n, c = fmap.shape[:2]
        attention = torch.softmax(fmap.reshape(n, c, -1), -1)
        return (attention @ self.grid).reshape(n, 2 * c)


class PooledImageEncoder(nn.Module):
    """Feature map -> ``pool`` (:data:`POOLS`) -> linear ``out_dim`` vector, ReLU.

    ``image_size``: the side S of the input images (pixels), which fixes the map's size for
    ``spatial_softmax`` and ``flatten``."""

    def __init__(self, encoder: ImageEncoder, out_dim: int, pool: str = "avg", image_size: int = 224) -> None:
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"image pool must be one of {', '.join(POOLS)}, got {pool!r}")
        self.encoder, self.pool = encoder, pool
        if pool == "avg":
            self.reduce, width = None, encoder.channels
        else:
            training = encoder.training
            with torch.no_grad():  # in eval mode: BatchNorm statistics stay as loaded
                h, w = encoder.eval()(torch.zeros(1, 3, image_size, image_size)).shape[-2:]
            encoder.train(training)
            if pool == "spatial_softmax":
                self.reduce, width = SpatialSoftmax(h, w), 2 * encoder.channels
            else:
                self.reduce, width = nn.Flatten(), encoder.channels * h * w
        self.proj = nn.Sequential(nn.Linear(width, out_dim), nn.ReLU())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        lead = images.shape[:-3]
        fmap = self.encoder(images.reshape(-1, *images.shape[-3:]))
        feat = fmap.mean(dim=(-2, -1)) if self.reduce is None else self.reduce(fmap)
        return self.proj(feat).reshape(*lead, -1)
