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


class PooledImageEncoder(nn.Module):
    """Feature map -> global average pool -> linear ``out_dim`` vector, ReLU."""

    def __init__(self, encoder: ImageEncoder, out_dim: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.proj = nn.Sequential(nn.Linear(encoder.channels, out_dim), nn.ReLU())

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        lead = images.shape[:-3]
        feat = self.encoder(images.reshape(-1, *images.shape[-3:])).mean(dim=(-2, -1))
        return self.proj(feat).reshape(*lead, -1)
