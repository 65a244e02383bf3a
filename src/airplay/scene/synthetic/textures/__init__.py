"""Procedural materials: colour (albedo) and a view-dependent sheen amplitude per sample.

A material is a :class:`~airplay.scene.synthetic.builder.Material` (``kind`` + params);
each kind maps to a function ``f(TexIn, Material) -> (rgb (N, 3), sheen (N,))``.
"""

from __future__ import annotations

import numpy as np

from airplay.scene.synthetic.textures import interior, nature, street
from airplay.scene.synthetic.textures._util import TexIn

MATERIALS = {**interior.MATERIALS, **street.MATERIALS, **nature.MATERIALS}
FOLIAGE_KINDS = frozenset({"leaves"})
"""Kinds sampled as randomly oriented blobs instead of flat surface splats."""


def shade_materials(samples, materials: list, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Albedo (N, 3) in [0, 1] and sheen (N,) for every sample, material by material."""
    albedo = np.zeros((len(samples), 3))
    sheen = np.zeros(len(samples))
    filt = np.maximum(samples.su, samples.sv)
    for mid in np.unique(samples.material):
        idx = np.flatnonzero(samples.material == mid)
        mat = materials[mid]
        if mat.kind not in MATERIALS:
            raise ValueError(f"unknown synthetic material kind {mat.kind!r}")
        tex = TexIn(p=samples.p[idx], n=samples.n[idx], uv=samples.uv[idx], st=samples.st[idx],
                    extent=samples.extent[idx], filt=filt[idx], seed=seed)
        rgb, sh = MATERIALS[mat.kind](tex, mat)
        albedo[idx] = rgb
        sheen[idx] = sh
    return np.clip(albedo, 0.0, 1.0), sheen
