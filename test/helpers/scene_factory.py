"""Tiny valid scenes written by tests, to be broken one field at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from airplay.scene.gaussians import Gaussians, rgb_to_sh_dc
from airplay.scene.ply_io import write_gaussians_ply


def box_gaussians(rng: np.random.Generator, n: int = 400, half: float = 2.0, sh_degree: int = 0) -> Gaussians:
    """Gaussians on the surface of an axis-aligned cube of half-size ``half`` centred at (0, 0, half)."""
    face = rng.integers(0, 6, n)
    uv = rng.uniform(-half, half, (n, 2))
    means = np.zeros((n, 3))
    axis, sign = face // 2, np.where(face % 2 == 0, -1.0, 1.0)
    for i in range(n):
        others = [a for a in range(3) if a != axis[i]]
        means[i, axis[i]] = sign[i] * half
        means[i, others] = uv[i]
    means[:, 2] += half
    k = (sh_degree + 1) ** 2
    sh = np.zeros((n, k, 3), np.float32)
    sh[:, 0] = rgb_to_sh_dc(rng.uniform(0.1, 0.9, (n, 3)))
    if k > 1:
        sh[:, 1:] = rng.normal(0, 0.1, (n, k - 1, 3))
    q = rng.normal(size=(n, 4))
    return Gaussians(
        means=means.astype(np.float32),
        scales=rng.uniform(0.05, 0.2, (n, 3)).astype(np.float32),
        quats_wxyz=(q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32),
        opacities=rng.uniform(0.5, 0.99, n).astype(np.float32),
        sh=sh,
    )


def scene_yaml_dict(**overrides) -> dict:
    data = {
        "format_version": 1,
        "name": "tiny",
        "category": "indoor",
        "split": "seen",
        "splat": {"file": "splat.ply", "convention": "z_up"},
        "collision": {"file": "collision.ply"},
        "navigable": {"polygon": [[-6, -6], [6, -6], [6, 6], [-6, 6]], "z_min": 0.5, "z_max": 3.0},
        "camera": {"width": 64, "height": 48, "hfov_deg": 90.0},
    }
    data.update(overrides)
    return data


def write_tiny_scene(folder: Path, seed: int = 0, sh_degree: int = 0) -> Path:
    """A valid scene: a 4 m cube (mesh) with Gaussians on its faces."""
    import trimesh

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    write_gaussians_ply(folder / "splat.ply", box_gaussians(rng, sh_degree=sh_degree))
    mesh = trimesh.creation.box(extents=(4.0, 4.0, 4.0))
    mesh.apply_translation((0, 0, 2.0))
    mesh.export(folder / "collision.ply")
    (folder / "scene.yaml").write_text(yaml.safe_dump(scene_yaml_dict(), sort_keys=False))
    return folder
