"""The CUDA backend: nerfstudio's gsplat rasterizer (``pip install -e '.[gpu]'``).

Uses the same conventions as the CPU backend (classic rasterize mode, eps2d = 0.3, OpenCV
cameras, expected depth). View-dependent colour is evaluated here with gsplat's
``spherical_harmonics`` in the splat's SH frame (``Gaussians.sh_rotation``), so aligned
real captures keep correct view-dependent colour.
"""

from __future__ import annotations

import numpy as np

from airplay.render.constants import EPS2D
from airplay.scene.gaussians import SH_C0, Gaussians

_DEVICE_CACHE: dict[int, tuple[Gaussians, dict]] = {}


def _to_device(gaussians: Gaussians, device) -> dict:
    """Upload once per Gaussians object (cached by identity) as float32 CUDA tensors."""
    import torch

    key = id(gaussians)
    hit = _DEVICE_CACHE.get(key)
    if hit is not None and hit[0] is gaussians:
        return hit[1]
    t = {
        "means": torch.as_tensor(gaussians.means, dtype=torch.float32, device=device),
        "quats": torch.as_tensor(gaussians.quats_wxyz, dtype=torch.float32, device=device),
        "scales": torch.as_tensor(gaussians.scales, dtype=torch.float32, device=device),
        "opacities": torch.as_tensor(gaussians.opacities, dtype=torch.float32, device=device),
        "sh": torch.as_tensor(gaussians.sh, dtype=torch.float32, device=device),
        "sh_rotation": torch.as_tensor(gaussians.sh_rotation, dtype=torch.float32, device=device),
    }
    _DEVICE_CACHE.clear()
    _DEVICE_CACHE[key] = (gaussians, t)
    return t


def render_gsplat(
    gaussians: Gaussians,
    viewmats: np.ndarray,
    Ks: np.ndarray,
    width: int,
    height: int,
    background: np.ndarray,
    near_m: float,
    far_m: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rgb (C,H,W,3), expected depth (C,H,W), alpha (C,H,W)) as float32 numpy arrays."""
    import torch
    from gsplat import rasterization, spherical_harmonics

    device = torch.device("cuda")
    t = _to_device(gaussians, device)
    vm = torch.as_tensor(viewmats, dtype=torch.float32, device=device)
    ks = torch.as_tensor(Ks, dtype=torch.float32, device=device)
    n_cams = vm.shape[0]
    degree = gaussians.sh_degree
    if degree == 0:
        colors = torch.clamp_min(t["sh"][:, 0, :] * SH_C0 + 0.5, 0.0)
    else:
        # Per-camera colours with view directions rotated into the SH frame.
        cam_centres = torch.linalg.inv(vm)[:, :3, 3]  # (C, 3)
        dirs = t["means"][None, :, :] - cam_centres[:, None, :]  # (C, N, 3) in map
        dirs_src = dirs @ t["sh_rotation"].T
        coeffs = t["sh"][None].expand(n_cams, -1, -1, -1)
        colors = torch.clamp_min(spherical_harmonics(degree, dirs_src, coeffs) + 0.5, 0.0)
    bg = torch.as_tensor(background, dtype=torch.float32, device=device)[None].expand(n_cams, 3)
    out, alphas, _ = rasterization(
        means=t["means"],
        quats=t["quats"],
        scales=t["scales"],
        opacities=t["opacities"],
        colors=colors,
        viewmats=vm,
        Ks=ks,
        width=width,
        height=height,
        near_plane=near_m,
        far_plane=far_m,
        eps2d=EPS2D,
        render_mode="RGB+ED",
        rasterize_mode="classic",
        backgrounds=bg,
    )
    rgb = out[..., :3].clamp(0.0, 1.0)
    alpha = alphas[..., 0]
    depth = out[..., 3]
    depth = torch.where(alpha > 1e-3, depth, torch.full_like(depth, float("inf")))
    return (
        rgb.float().cpu().numpy(),
        depth.float().cpu().numpy(),
        alpha.float().cpu().numpy(),
    )
