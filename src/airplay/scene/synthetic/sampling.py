"""Surface sampling: where the Gaussians go.

Quads get a jittered grid (one sample per cell, cells about 1/sqrt(density) on a side),
triangles a stratified sample (the triangle cut into m^2 similar sub-triangles, one
uniform point in each), so that surfaces are covered evenly with no clumps or holes.
Every random number comes from the ``rng`` passed in, in a fixed order.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

JITTER = 0.35
"""Half-width of the jitter of a grid sample inside its cell, in cell units."""


@dataclass
class Samples:
    """Surface samples: position, frame (t1, t2, normal), cell size, texture coordinates."""

    p: np.ndarray        # (N, 3) metres, on the collision mesh
    n: np.ndarray        # (N, 3) unit outward normal
    t1: np.ndarray       # (N, 3) unit tangent (texture u direction)
    t2: np.ndarray       # (N, 3) unit tangent, n x t1
    su: np.ndarray       # (N,) cell size along t1, metres
    sv: np.ndarray       # (N,) cell size along t2, metres
    uv: np.ndarray       # (N, 2) texture coordinates, metres, anchored in the map frame
    st: np.ndarray       # (N, 2) position within its patch along (t1, t2), metres
    extent: np.ndarray   # (N, 2) size of its patch along (t1, t2), metres (0 for triangles)
    material: np.ndarray  # (N,) int
    part: np.ndarray     # (N,) int, the solid the sample lies on

    def __len__(self) -> int:
        return len(self.p)

    def select(self, mask: np.ndarray) -> "Samples":
        return Samples(**{f.name: getattr(self, f.name)[mask] for f in fields(self)})

    @staticmethod
    def concatenate(parts: list["Samples"]) -> "Samples":
        return Samples(**{f.name: np.concatenate([getattr(s, f.name) for s in parts]) for f in fields(Samples)})


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def sample_quads(q: dict[str, np.ndarray], density: float, rng: np.random.Generator) -> Samples:
    """Jittered-grid samples on parallelogram patches (origin, eu, ev)."""
    lu, lv = np.linalg.norm(q["eu"], axis=1), np.linalg.norm(q["ev"], axis=1)
    spacing = 1.0 / np.sqrt(density * q["detail"])
    nu = np.maximum(1, np.rint(lu / spacing)).astype(np.int64)
    nv = np.maximum(1, np.rint(lv / spacing)).astype(np.int64)
    counts = nu * nv
    idx = np.repeat(np.arange(len(counts)), counts)
    k = np.arange(len(idx)) - np.repeat(np.cumsum(counts) - counts, counts)
    iu, iv = k % nu[idx], k // nu[idx]
    jit = rng.uniform(-JITTER, JITTER, size=(len(idx), 2))
    fu = (iu + 0.5 + jit[:, 0]) / nu[idx]
    fv = (iv + 0.5 + jit[:, 1]) / nv[idx]
    eu, ev = q["eu"][idx], q["ev"][idx]
    p = q["origin"][idx] + fu[:, None] * eu + fv[:, None] * ev
    t1 = _unit(eu)
    n = _unit(np.cross(eu, ev))
    uv = np.column_stack([q["u0"][idx] + fu * lu[idx], q["v0"][idx] + fv * lv[idx]])
    st = np.column_stack([fu * lu[idx], fv * lv[idx]])
    return Samples(p=p, n=n, t1=t1, t2=np.cross(n, t1), su=(lu / nu)[idx], sv=(lv / nv)[idx], uv=uv,
                   st=st, extent=np.column_stack([lu, lv])[idx], material=q["material"][idx], part=q["part"][idx])


def _subtriangles(m: int) -> np.ndarray:
    """(m^2, 3, 2) barycentric (s, t) corners of the regular m x m split of a triangle."""
    out = []
    for i in range(m):
        for j in range(m - i):
            out.append([(i, j), (i + 1, j), (i, j + 1)])
            if i + j <= m - 2:
                out.append([(i + 1, j), (i + 1, j + 1), (i, j + 1)])
    return np.array(out, dtype=np.float64) / m


def sample_triangles(t: dict[str, np.ndarray], density: float, rng: np.random.Generator) -> Samples:
    """Stratified samples on triangles (a, b, c); about area x density each."""
    a, b, c = t["a"], t["b"], t["c"]
    cross = np.cross(b - a, c - a)
    area = 0.5 * np.linalg.norm(cross, axis=1)
    expected = area * density * t["detail"]
    m = np.rint(np.sqrt(expected)).astype(np.int64)
    lucky = rng.random(len(area)) < expected  # triangles expecting < 1 sample get 0 or 1
    m = np.where((m == 0) & lucky, 1, m)
    st_all, tri_all = [], []
    for mm in np.unique(m[m > 0]):
        tris = np.flatnonzero(m == mm)
        sub = _subtriangles(int(mm))
        r = rng.random((len(tris), len(sub), 2))
        flip = r.sum(axis=2) > 1
        r[flip] = 1 - r[flip]
        st = sub[None, :, 0] + r[..., :1] * (sub[None, :, 1] - sub[None, :, 0]) \
            + r[..., 1:] * (sub[None, :, 2] - sub[None, :, 0])
        st_all.append(st.reshape(-1, 2))
        tri_all.append(np.repeat(tris, len(sub)))
    if not st_all:
        return Samples(*(np.zeros((0, 3)),) * 4, np.zeros(0), np.zeros(0), *(np.zeros((0, 2)),) * 3,
                       np.zeros(0, np.int64), np.zeros(0, np.int64))
    st, idx = np.concatenate(st_all), np.concatenate(tri_all)
    p = a[idx] + st[:, :1] * (b - a)[idx] + st[:, 1:] * (c - a)[idx]
    n = _unit(cross)[idx]
    t1 = _unit((b - a)[idx])
    cell = np.sqrt(area / np.maximum(m, 1) ** 2)[idx]
    return Samples(p=p, n=n, t1=t1, t2=np.cross(n, t1), su=cell, sv=cell, uv=p[:, :2].copy(),
                   st=p[:, :2].copy(), extent=np.zeros((len(p), 2)), material=t["material"][idx], part=t["part"][idx])


def sample_surfaces(builder, density: float, rng: np.random.Generator) -> Samples:
    """All patches of ``builder`` sampled at ``density`` per m^2 (times each patch's detail)."""
    return Samples.concatenate([sample_quads(builder.quads(), density, rng),
                                sample_triangles(builder.triangles(), density, rng)])
