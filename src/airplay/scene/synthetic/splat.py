"""Turn lit surface samples into 3D Gaussians (SH degree 1) and bake in the lighting."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airplay.scene.gaussians import Gaussians, rgb_to_sh_dc
from airplay.scene.synthetic.sampling import Samples
from airplay.scene.synthetic.solids import sun_visibility

SH_C1 = 0.4886025119029199
NORMAL_SCALE_M = 0.0015
"""Standard deviation of a surface Gaussian across its surface, metres."""
TANGENT_SCALE = (0.7, 0.9)
"""Range of a surface Gaussian's tangent standard deviation, in units of its grid cell."""
BASE_SHEEN = 0.02
"""View-dependent amplitude every surface gets (a faint Fresnel-like brightening)."""


@dataclass(frozen=True)
class Lighting:
    """Baked lighting. ``sun`` (unit vector towards the sun) for outdoor scenes, else indoor.

    Outdoor: albedo x (sky ambient + sun x max(0, n . sun) x shadow). Indoor: albedo x a
    soft per-orientation factor, darkened near the floor and the ceiling (``ceiling_m``).
    """

    sun: tuple[float, float, float] | None = None
    ceiling_m: float = 3.0


def light(samples: Samples, albedo: np.ndarray, lighting: Lighting, solids: dict) -> np.ndarray:
    """Lit colour (N, 3) in [0, 1]."""
    n = samples.n
    if lighting.sun is not None:
        sun = np.asarray(lighting.sun, dtype=np.float64)
        vis = sun_visibility(samples.p, n, samples.part, sun, solids)
        lambert = np.clip(n @ sun, 0.0, 1.0) * vis
        ambient = (0.60 + 0.14 * n[:, 2])[:, None] * np.array([0.93, 0.97, 1.05])
        direct = (0.55 * lambert)[:, None] * np.array([1.06, 1.0, 0.90])
        return np.clip(albedo * (ambient + direct), 0.0, 1.0)
    z = samples.p[:, 2]
    factor = 0.93 + 0.07 * n[:, 2] + 0.04 * n[:, 0] - 0.03 * n[:, 1]
    wall = np.abs(n[:, 2]) < 0.5
    corner = 0.16 * np.exp(-np.maximum(z, 0) / 0.25) + 0.10 * np.exp(-np.maximum(lighting.ceiling_m - z, 0) / 0.3)
    factor = factor * np.where(wall, 1.0 - corner, 1.0)
    return np.clip(albedo * factor[:, None], 0.0, 1.0)


def matrices_to_quats_wxyz(r: np.ndarray) -> np.ndarray:
    """Unit quaternions (N, 4), (w, x, y, z), w >= 0, of rotation matrices (N, 3, 3)."""
    m00, m11, m22 = r[:, 0, 0], r[:, 1, 1], r[:, 2, 2]
    q = np.empty((len(r), 4))
    tr = m00 + m11 + m22
    cases = np.argmax(np.column_stack([tr, m00, m11, m22]), axis=1)
    for case in range(4):
        i = cases == case
        if not i.any():
            continue
        a = r[i]
        if case == 0:
            s = np.sqrt(tr[i] + 1.0) * 2
            q[i] = np.column_stack([0.25 * s, (a[:, 2, 1] - a[:, 1, 2]) / s, (a[:, 0, 2] - a[:, 2, 0]) / s, (a[:, 1, 0] - a[:, 0, 1]) / s])
        elif case == 1:
            s = np.sqrt(1.0 + a[:, 0, 0] - a[:, 1, 1] - a[:, 2, 2]) * 2
            q[i] = np.column_stack([(a[:, 2, 1] - a[:, 1, 2]) / s, 0.25 * s, (a[:, 0, 1] + a[:, 1, 0]) / s, (a[:, 0, 2] + a[:, 2, 0]) / s])
        elif case == 2:
            s = np.sqrt(1.0 + a[:, 1, 1] - a[:, 0, 0] - a[:, 2, 2]) * 2
            q[i] = np.column_stack([(a[:, 0, 2] - a[:, 2, 0]) / s, (a[:, 0, 1] + a[:, 1, 0]) / s, 0.25 * s, (a[:, 1, 2] + a[:, 2, 1]) / s])
        else:
            s = np.sqrt(1.0 + a[:, 2, 2] - a[:, 0, 0] - a[:, 1, 1]) * 2
            q[i] = np.column_stack([(a[:, 1, 0] - a[:, 0, 1]) / s, (a[:, 0, 2] + a[:, 2, 0]) / s, (a[:, 1, 2] + a[:, 2, 1]) / s, 0.25 * s])
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.where(q[:, :1] < 0, -q, q)


def to_gaussians(samples: Samples, color: np.ndarray, sheen: np.ndarray, foliage: np.ndarray,
                 rng: np.random.Generator) -> Gaussians:
    """Gaussians for the samples: flat discs on surfaces, random blobs for foliage.

    SH degree 1: the DC term is the lit colour; the degree-1 terms add
    ``sheen x tint x (d . n)`` for viewing direction d (camera -> Gaussian), i.e. surfaces
    look a little brighter at grazing angles and a little darker head-on.
    """
    n_pts = len(samples)
    cell = np.column_stack([samples.su, samples.sv])
    k = rng.uniform(*TANGENT_SCALE, size=(n_pts, 2))
    scales = np.column_stack([cell * k, np.full(n_pts, NORMAL_SCALE_M)])
    rot = np.stack([samples.t1, samples.t2, samples.n], axis=2)
    quats = matrices_to_quats_wxyz(rot)
    opacity = rng.uniform(0.90, 0.99, size=n_pts)
    means = samples.p.copy()

    leaf = np.flatnonzero(foliage)
    if len(leaf):
        size = cell[leaf].max(axis=1)
        scales[leaf] = size[:, None] * rng.uniform([0.8, 0.6, 0.25], [1.2, 0.9, 0.4], size=(len(leaf), 3))
        q = rng.normal(size=(len(leaf), 4))
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        quats[leaf] = np.where(q[:, :1] < 0, -q, q)
        opacity[leaf] = rng.uniform(0.75, 0.95, size=len(leaf))
        means[leaf] += samples.n[leaf] * rng.uniform(-0.03, 0.01, size=(len(leaf), 1))

    amp = (BASE_SHEEN + sheen) * rng.uniform(0.8, 1.2, size=n_pts)
    amp[leaf] = 0.0
    tint = np.array([0.95, 0.98, 1.0])
    dc = np.clip(color + 0.5 * amp[:, None] * tint, 0.0, 1.0)
    a = amp[:, None] * tint  # (N, 3) per channel
    nrm = samples.n
    sh = np.zeros((n_pts, 4, 3), dtype=np.float32)
    sh[:, 0] = rgb_to_sh_dc(dc)
    sh[:, 1] = -a * nrm[:, 1:2] / SH_C1
    sh[:, 2] = a * nrm[:, 2:3] / SH_C1
    sh[:, 3] = -a * nrm[:, 0:1] / SH_C1
    return Gaussians(
        means=means.astype(np.float32),
        scales=scales.astype(np.float32),
        quats_wxyz=quats.astype(np.float32),
        opacities=opacity.astype(np.float32),
        sh=sh,
    )
