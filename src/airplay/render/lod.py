"""Level of detail for large splats: a tree of merged Gaussians and a per-view cut.

In the spirit of "A Hierarchical 3D Gaussian Representation for Real-Time Rendering of Very
Large Datasets" (Kerbl et al., SIGGRAPH 2024). At the small images the vehicle camera is
rendered at (64x64, focal ~32 px) nearly every Gaussian beyond a few metres is sub-pixel;
drawing one merged Gaussian for a cluster of them costs a fraction and looks the same.

**Hierarchy** (:func:`build_hierarchy`, once per splat, cached on disk by
:func:`hierarchy_for`): a binary k-d tree over the means (median split along the longest
axis of each cell's box), its ``2N - 1`` nodes numbered in depth-first preorder; the leaves
are the original Gaussians, and each internal node holds one Gaussian merged from its two
children by moment matching with weights ``w`` = coverage = opacity x mean projected area:

* ``w_p = w_a + w_b``; mean ``mu_p = (w_a mu_a + w_b mu_b) / w_p``;
* covariance ``Sigma_p = sum_c w_c (Sigma_c + (mu_c - mu_p)(mu_c - mu_p)^T) / w_p``;
* SH coefficients ``sh_p = sum_c w_c sh_c / w_p``;
* opacity chosen so that coverage is kept: ``o_p = min(OPACITY_CAP, w_p / A(Sigma_p))``.
  Above 1 is allowed (the renderer caps alpha at 0.99): a cluster of overlapping leaves is
  then drawn solid in its core; capping at 1 left see-through seams between neighbouring
  merged Gaussians (measured: 23 vs 33 dB at 2 px on the 64x64 vegetation scene).

Child weights are their subtrees' total weights, so a node's moments are exactly the
weighted moments of all the leaves under it. ``A`` is the mean over view directions of the
projected area of the ellipsoid of standard deviations (a, b, c), by Knud Thomsen's formula
for the surface area / 4: ``pi ((ab^p + ac^p + bc^p) / 3)^(1/p)``, p = 1.6 (flat disk:
pi ab / 2, sphere: pi r^2). The merged covariance is turned back into scales + a unit
quaternion by eigendecomposition. Each node also has a bounding sphere of the means under
it, the largest leaf scale under it (for culling) and a *size*: 2 x the largest standard
deviation of its merged Gaussian, or of any node below if larger (so sizes shrink going down).

**Cut** (per view, numba): from the root, a node whose bounding sphere (grown by its
leaves' 3-sigma extents and the renderer's pixel margins, conservatively) lies outside the
view frustum or the near/far range is skipped with all below it; a node whose size
projected at its nearest point, ``fx * size / (distance to its sphere)``, is at most
``lod_px`` pixels is drawn as its merged Gaussian; otherwise its children are visited.
Leaves reached are drawn. The selected Gaussians are gathered, leaves in splat order first
(depth ties then break as in the exact renderer), and rendered by the exact CPU pipeline,
whose own cull drops the few it would drop anyway. With ``lod_px`` tiny the cut is exactly
the Gaussians the exact renderer keeps and the image is the exact image, bit for bit.

**Pose cells** (:func:`render_lod_cell_cpu`; protocol.yaml ``render: lod_cell_m`` /
``lod_cell_deg``, 0.5 m x 15 deg as shipped, 0 = off): the vehicle camera is gimbal-stabilised (only position and heading change)
and moves a few cm per frame, so one cut can serve many frames. The cut is made per cell
(floor(x / c), floor(y / c), floor(z / c), floor(yaw / b)) and valid for every pose in it: the
traversal runs from the camera at the cell's centre and central heading, each node's sphere
grown, for the frustum test, by how far mapping any camera of the cell onto that one can move
a point (the cell's half-diagonal plus the mount offset's sweep, plus 2 sin(b / 4) x the
point's horizontal distance, for the heading), and the LOD test measures the distance from
the nearest point of the box of the cell's camera centres. No node is then coarser than
``lod_px`` from any pose of the cell (so the image may be finer than the per-view cut's, never
coarser) and nothing any of them would draw is culled; each frame draws the cell's cut from
its exact view through the exact pipeline. The cut depends on the cell alone, so the image is
a function of the pose, whatever was rendered before; each thread keeps the gathered cuts of
its last :data:`CELL_CACHE_SIZE` cells.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from airplay.render.api import ALPHA_MIN, EPS2D
from airplay.render.cpu_backend import _tan_limits
from airplay.scene.gaussians import Gaussians, quat_wxyz_to_matrix

CACHE_VERSION = 2
"""Bump when the hierarchy's construction changes: cached trees are rebuilt."""
OPACITY_CAP = 10.0
"""Upper bound on a merged Gaussian's opacity ``w_p / A(Sigma_p)`` (see the module docstring)."""
_KT_P = 1.6


def check_lod_px(lod_px) -> float:
    """``lod_px`` as a float: 0 (exact rendering) or a positive number of pixels; ValueError otherwise."""
    if lod_px is None:
        return 0.0
    if isinstance(lod_px, bool) or not isinstance(lod_px, (int, float, np.integer, np.floating)):
        raise ValueError(f"lod_px must be a number of pixels (0 or None = exact), got {lod_px!r}")
    value = float(lod_px)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"lod_px must be finite and >= 0 pixels (0 = exact), got {lod_px!r}")
    return value


@dataclass(frozen=True)
class GaussianHierarchy:
    """A LOD tree over a splat of ``n_leaves`` = N Gaussians (see the module docstring).

    Its ``2N - 1`` nodes are numbered in depth-first preorder (root 0; the left child of an
    internal node ``k`` is ``k + 1``, its right child ``right[k]``), so that a traversal reads
    memory front to back. Per node:

    right: int32, the right child's id, -1 for a leaf. leaf_index: int32, the leaf's index
    in the splat, -1 for an internal node. means, scales, quats_wxyz, opacities, sh: the
    node's Gaussian (float32, as :class:`Gaussians`; a leaf's is the original one); they
    are views of :attr:`rows`, the nodes' Gaussians interleaved, made on construction.
    weight: float64 coverage weight. bounds: (2N-1, 8) float32 ``cx, cy, cz, radius, ext,
    size, opmax, 0``: a sphere containing the means under the node, the largest |scale|
    under it, its LOD size (m) and the largest opacity of it and under it.
    key: the content key of the disk cache.
    """

    n_leaves: int
    right: np.ndarray
    leaf_index: np.ndarray
    means: np.ndarray
    scales: np.ndarray
    quats_wxyz: np.ndarray
    opacities: np.ndarray
    sh: np.ndarray
    weight: np.ndarray
    bounds: np.ndarray
    key: str = ""

    _ARRAYS = ("right", "leaf_index", "means", "scales", "quats_wxyz", "opacities", "sh", "weight", "bounds")

    def __post_init__(self) -> None:
        """Interleave the nodes' Gaussians into :attr:`rows`, and make the five attribute fields
        views of it (the separate arrays are dropped: the same memory, plus the padding)."""
        n = 2 * self.n_leaves - 1
        sh = np.asarray(self.sh)
        if sh.ndim != 3 or sh.shape[0] != n or sh.shape[2] != 3:
            raise ValueError(f"GaussianHierarchy: sh must be ({n}, K, 3) for {self.n_leaves} leaves, got {sh.shape}")
        nk = sh.shape[1]
        rows = np.zeros((n, row_width(nk)), np.float32)
        object.__setattr__(self, "rows", rows)
        for name, (col, width) in _row_fields(nk).items():
            a = np.asarray(getattr(self, name), dtype=np.float32)
            if a.shape[:1] != (n,) or a.size != n * width:
                raise ValueError(f"GaussianHierarchy: {name} must hold {width} float32 per node for {n} nodes, "
                                 f"got shape {a.shape}")
            view = rows[:, col:col + width]
            view[:] = a.reshape(n, width)
            shape = {"opacities": (n,), "sh": (n, nk, 3)}.get(name, (n, width))
            object.__setattr__(self, name, view.reshape(shape))  # a view: the last axis is only split

    @cached_property
    def leaf_node(self) -> np.ndarray:
        """(N,) int32: the node id of each splat index's leaf."""
        out = np.empty(self.n_leaves, dtype=np.int32)
        leaf = self.leaf_index >= 0
        out[self.leaf_index[leaf]] = np.flatnonzero(leaf).astype(np.int32)
        return out

    @property
    def n_nodes(self) -> int:
        return 2 * self.n_leaves - 1

    def children(self, node: int) -> tuple[int, int] | None:
        """(left, right) node ids, None for a leaf."""
        r = int(self.right[node])
        return None if r < 0 else (int(node) + 1, r)

    def leaves_under(self, node: int) -> np.ndarray:
        """Sorted splat indices of the leaves under ``node`` (a preorder subtree is a contiguous
        id range: ``node`` .. the last id before the next subtree)."""
        end = int(node)
        while self.right[end] >= 0:  # the rightmost descendant is the subtree's last id
            end = int(self.right[end])
        li = self.leaf_index[int(node): end + 1]
        return np.sort(li[li >= 0].astype(np.int64))

    def gaussians(self, nodes: np.ndarray, sh_rotation: np.ndarray) -> Gaussians:
        """The Gaussians of node ids ``nodes``, in that order."""
        nodes = np.asarray(nodes, dtype=np.int64)
        return Gaussians(means=self.means[nodes], scales=self.scales[nodes], quats_wxyz=self.quats_wxyz[nodes],
                         opacities=self.opacities[nodes], sh=self.sh[nodes], sh_rotation=sh_rotation)


ROW_FLOATS = 8
"""A node row of :attr:`GaussianHierarchy.rows` is padded to a multiple of this many float32 (32 bytes)."""

# First column of each field in a node row (the compiled gathers read them as constants).
_ROW_MEANS, _ROW_SCALES, _ROW_QUATS, _ROW_OPACITY, _ROW_SH = 0, 3, 6, 10, 11


def _row_fields(sh_coeffs: int) -> dict[str, tuple[int, int]]:
    """GaussianHierarchy field -> (first column, float32 per node) in a node row."""
    return {"means": (_ROW_MEANS, 3), "scales": (_ROW_SCALES, 3), "quats_wxyz": (_ROW_QUATS, 4),
            "opacities": (_ROW_OPACITY, 1), "sh": (_ROW_SH, 3 * int(sh_coeffs))}


def row_width(sh_coeffs: int) -> int:
    """float32 per node row: mean (3), scale (3), quaternion wxyz (4), opacity (1), SH (3 per
    coefficient), padded with zeros to a multiple of :data:`ROW_FLOATS`. One row is 1-2 cache
    lines where the five separate arrays took five: a new pose cell's gather reads about half
    the lines (0.88 -> 0.42-0.48 ms for a 6,000-node cut from a cold cache, SH degree 1)."""
    used = _ROW_SH + 3 * int(sh_coeffs)
    return -(-used // ROW_FLOATS) * ROW_FLOATS


# -- construction ---------------------------------------------------------------------------------


def area_proxy(scales: np.ndarray) -> np.ndarray:
    """Mean projected area over view directions of the ellipsoids of semi-axes ``scales`` (N, 3)
    (Knud Thomsen's surface-area formula / 4; exact for spheres, 0.5 % off for flat disks)."""
    s = np.abs(np.asarray(scales, dtype=np.float64))
    p = _KT_P
    ab, ac, bc = s[:, 0] * s[:, 1], s[:, 0] * s[:, 2], s[:, 1] * s[:, 2]
    return math.pi * ((ab**p + ac**p + bc**p) / 3.0) ** (1.0 / p)


def covariances(scales: np.ndarray, quats_wxyz: np.ndarray) -> np.ndarray:
    """(N, 3, 3) float64 covariances R S^2 R^T."""
    r = quat_wxyz_to_matrix(quats_wxyz)
    s2 = np.asarray(scales, dtype=np.float64) ** 2
    return np.einsum("nij,nj,nkj->nik", r, s2, r)


@njit(cache=True, nogil=True)
def _kd_tree(means):
    """Binary k-d tree by median split along the longest axis of each cell's box, numbered in
    preorder: (right child id or -1, leaf's splat index or -1) per node."""
    n = means.shape[0]
    nn = 2 * n - 1
    right = np.full(nn, -1, dtype=np.int32)
    leaf_index = np.full(nn, -1, dtype=np.int32)
    idx = np.arange(n).astype(np.int64)
    # stack of (lo, hi, parent id, side); a right child's id is written into its parent when popped
    st_lo = np.empty(2 * n + 2, dtype=np.int64)
    st_hi = np.empty(2 * n + 2, dtype=np.int64)
    st_par = np.empty(2 * n + 2, dtype=np.int64)
    st_lo[0], st_hi[0], st_par[0] = 0, n, -1
    sp = 1
    nxt = 0
    key = np.empty(n, dtype=np.float64)
    while sp > 0:
        sp -= 1
        lo, hi, par = st_lo[sp], st_hi[sp], st_par[sp]
        k = nxt
        nxt += 1
        if par >= 0:
            right[par] = k
        if hi - lo == 1:
            leaf_index[k] = idx[lo]
            continue
        best, axis = -1.0, 0
        for a in range(3):
            mn, mx = np.inf, -np.inf
            for j in range(lo, hi):
                v = means[idx[j], a]
                mn = min(mn, v)
                mx = max(mx, v)
            if mx - mn > best:
                best, axis = mx - mn, a
        m = hi - lo
        for j in range(m):
            key[j] = means[idx[lo + j], axis]
        order = np.argsort(key[:m], kind="mergesort")
        tmp = idx[lo:hi].copy()
        for j in range(m):
            idx[lo + j] = tmp[order[j]]
        mid = lo + m // 2
        # right pushed first: the left child is popped next and gets id k + 1
        st_lo[sp], st_hi[sp], st_par[sp] = mid, hi, k
        sp += 1
        st_lo[sp], st_hi[sp], st_par[sp] = lo, mid, -1
        sp += 1
    return right, leaf_index


@njit(cache=True, nogil=True)
def _sphere_union(ca, ra, cb, rb, out):
    """Smallest sphere containing spheres (ca, ra) and (cb, rb): centre into out[:3], returns radius."""
    d0, d1, d2 = cb[0] - ca[0], cb[1] - ca[1], cb[2] - ca[2]
    d = math.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
    if d + rb <= ra:
        out[0], out[1], out[2] = ca[0], ca[1], ca[2]
        return ra
    if d + ra <= rb:
        out[0], out[1], out[2] = cb[0], cb[1], cb[2]
        return rb
    r = 0.5 * (d + ra + rb)
    t = (r - ra) / d
    out[0], out[1], out[2] = ca[0] + t * d0, ca[1] + t * d1, ca[2] + t * d2
    return r


@njit(cache=True, nogil=True)
def _merge_up(right, w, mu, cov, sh, centre, radius, ext, opmax):
    """Moments, spheres, extents of every internal node from its children (ids in reverse
    preorder: children first). Leaf rows must be filled in."""
    nn = right.shape[0]
    nk = sh.shape[1]
    tmp = np.empty(3)
    for p in range(nn - 1, -1, -1):
        b = right[p]
        if b < 0:
            continue
        a = p + 1
        wa, wb = w[a], w[b]
        wp = wa + wb
        if wp > 0.0:
            fa, fb = wa / wp, wb / wp
        else:
            fa = fb = 0.5
        w[p] = wp
        for j in range(3):
            mu[p, j] = fa * mu[a, j] + fb * mu[b, j]
        for i in range(3):
            dai = mu[a, i] - mu[p, i]
            dbi = mu[b, i] - mu[p, i]
            for j in range(3):
                daj = mu[a, j] - mu[p, j]
                dbj = mu[b, j] - mu[p, j]
                cov[p, i, j] = fa * (cov[a, i, j] + dai * daj) + fb * (cov[b, i, j] + dbi * dbj)
        for c in range(nk):
            for ch in range(3):
                sh[p, c, ch] = fa * sh[a, c, ch] + fb * sh[b, c, ch]
        radius[p] = _sphere_union(centre[a], radius[a], centre[b], radius[b], tmp)
        centre[p, 0], centre[p, 1], centre[p, 2] = tmp[0], tmp[1], tmp[2]
        ext[p] = max(ext[a], ext[b])
        opmax[p] = max(opmax[a], opmax[b])


@njit(cache=True, nogil=True)
def _sizes_up(right, size, opmax):
    """size and opmax of a node = max(its own, its children's), children first."""
    for p in range(right.shape[0] - 1, -1, -1):
        b = right[p]
        if b >= 0:
            size[p] = max(size[p], size[p + 1], size[b])
            opmax[p] = max(opmax[p], opmax[p + 1], opmax[b])


def _rotation_to_quat_wxyz(m: np.ndarray) -> np.ndarray:
    """Unit quaternions (w, x, y, z), w >= 0, of rotation matrices (M, 3, 3), vectorised (Shepperd)."""
    tr = m[:, 0, 0] + m[:, 1, 1] + m[:, 2, 2]
    which = np.argmax(np.stack([tr, m[:, 0, 0], m[:, 1, 1], m[:, 2, 2]], axis=1), axis=1)
    q = np.empty((len(m), 4))
    for case in range(4):
        s = which == case
        if not s.any():
            continue
        mm = m[s]
        if case == 0:
            t = np.sqrt(1.0 + tr[s]) * 2
            q[s] = np.stack([0.25 * t, (mm[:, 2, 1] - mm[:, 1, 2]) / t, (mm[:, 0, 2] - mm[:, 2, 0]) / t,
                             (mm[:, 1, 0] - mm[:, 0, 1]) / t], axis=1)
        elif case == 1:
            t = np.sqrt(np.maximum(1.0 + mm[:, 0, 0] - mm[:, 1, 1] - mm[:, 2, 2], 1e-300)) * 2
            q[s] = np.stack([(mm[:, 2, 1] - mm[:, 1, 2]) / t, 0.25 * t, (mm[:, 0, 1] + mm[:, 1, 0]) / t,
                             (mm[:, 0, 2] + mm[:, 2, 0]) / t], axis=1)
        elif case == 2:
            t = np.sqrt(np.maximum(1.0 + mm[:, 1, 1] - mm[:, 0, 0] - mm[:, 2, 2], 1e-300)) * 2
            q[s] = np.stack([(mm[:, 0, 2] - mm[:, 2, 0]) / t, (mm[:, 0, 1] + mm[:, 1, 0]) / t, 0.25 * t,
                             (mm[:, 1, 2] + mm[:, 2, 1]) / t], axis=1)
        else:
            t = np.sqrt(np.maximum(1.0 + mm[:, 2, 2] - mm[:, 0, 0] - mm[:, 1, 1], 1e-300)) * 2
            q[s] = np.stack([(mm[:, 1, 0] - mm[:, 0, 1]) / t, (mm[:, 0, 2] + mm[:, 2, 0]) / t,
                             (mm[:, 1, 2] + mm[:, 2, 1]) / t, 0.25 * t], axis=1)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return q * np.where(q[:, :1] < 0, -1.0, 1.0)


def _round_up32(x: np.ndarray) -> np.ndarray:
    """float32 not below the float64 values."""
    y = x.astype(np.float32)
    low = y.astype(np.float64) < x
    y[low] = np.nextafter(y[low], np.float32(np.inf))
    return y


def build_hierarchy(g: Gaussians, key: str = "", opacity_cap: float = OPACITY_CAP) -> GaussianHierarchy:
    """Build the LOD tree of ``g`` (about a second per 1e5 Gaussians on one core)."""
    n = len(g)
    if n == 0:
        raise ValueError("build_hierarchy: the splat has no Gaussians")
    right, leaf_index = _kd_tree(np.ascontiguousarray(g.means, dtype=np.float64))
    nn = 2 * n - 1
    leaf = leaf_index >= 0
    li = leaf_index[leaf]
    scales = np.abs(np.asarray(g.scales, dtype=np.float64))
    op = np.asarray(g.opacities, dtype=np.float64)
    nk = g.sh.shape[1]
    w = np.zeros(nn)
    mu = np.zeros((nn, 3))
    cov = np.zeros((nn, 3, 3))
    sh = np.zeros((nn, nk, 3))
    centre = np.zeros((nn, 3))
    radius = np.zeros(nn)
    ext = np.zeros(nn)
    opmax = np.zeros(nn)
    w[leaf] = op[li] * area_proxy(scales[li])
    mu[leaf] = g.means[li]
    cov[leaf] = covariances(g.scales[li], g.quats_wxyz[li])
    sh[leaf] = g.sh[li]
    centre[leaf] = g.means[li]
    ext[leaf] = scales[li].max(axis=1)
    opmax[leaf] = op[li]
    _merge_up(right, w, mu, cov, sh, centre, radius, ext, opmax)
    inner = ~leaf
    evals, evecs = np.linalg.eigh(cov[inner])
    evals = np.maximum(evals, 0.0)
    evecs[np.linalg.det(evecs) < 0, :, 0] *= -1.0  # right-handed frames
    iscales = np.sqrt(evals)
    iscales = np.maximum(iscales, 1e-7 * np.maximum(iscales.max(axis=1, keepdims=True), 1e-12))
    means32 = np.empty((nn, 3), np.float32)
    scales32 = np.empty((nn, 3), np.float32)
    quats32 = np.empty((nn, 4), np.float32)
    op32 = np.empty(nn, np.float32)
    means32[leaf] = g.means[li]
    scales32[leaf] = g.scales[li]
    quats32[leaf] = g.quats_wxyz[li]
    op32[leaf] = g.opacities[li]
    means32[inner] = mu[inner]
    scales32[inner] = iscales
    quats32[inner] = _rotation_to_quat_wxyz(evecs)
    op32[inner] = np.minimum(opacity_cap, w[inner] / np.maximum(area_proxy(iscales), 1e-300))
    size = 2.0 * np.abs(scales32.astype(np.float64)).max(axis=1)
    opmax = np.maximum(opmax, op32)
    _sizes_up(right, size, opmax)
    bounds = np.zeros((nn, 8), np.float32)
    bounds[:, :3] = centre
    # The radius absorbs the float32 rounding of the centre (and of the leaves' float32 means).
    slack = 1e-6 * (np.abs(centre).max(axis=1) + radius) + 1e-9
    bounds[:, 3] = _round_up32(np.where(leaf, 0.0, radius + slack))
    bounds[:, 4] = _round_up32(ext)
    bounds[:, 5] = size.astype(np.float32)
    bounds[:, 6] = _round_up32(opmax)
    bounds[leaf, :3] = g.means[li]  # exact
    return GaussianHierarchy(n_leaves=n, right=right, leaf_index=leaf_index, means=means32, scales=scales32,
                             quats_wxyz=quats32, opacities=op32, sh=sh.astype(np.float32), weight=w,
                             bounds=bounds, key=key)


# -- on-disk cache ----------------------------------------------------------------------------------


def splat_key(g: Gaussians) -> str:
    """Content key of a splat for the cache: every attribute's bytes and the build version."""
    digest = hashlib.sha256()
    for a in (g.means, g.scales, g.quats_wxyz, g.opacities, g.sh):
        a = np.ascontiguousarray(a, dtype=np.float32)
        digest.update(str(a.shape).encode())
        digest.update(a.tobytes())
    digest.update(np.array([CACHE_VERSION], dtype=np.int64).tobytes())
    return digest.hexdigest()[:24]


_memo: dict[int, GaussianHierarchy] = {}
_memo_lock = threading.Lock()


def hierarchy_for(g: Gaussians, cache_dir: str | Path | None = None, progress: bool | None = None) -> GaussianHierarchy:
    """The hierarchy of ``g``: from this process's memo, else the disk cache
    (``lod-<key>.npz`` under ``cache_dir`` or :func:`airplay.config.cache_dir`, keyed
    by the splat's content), else built (and written atomically). ``progress``: print the
    build to stderr (default: when stderr is a terminal)."""
    with _memo_lock:
        h = _memo.get(id(g))
    if h is not None:
        return h
    from airplay import config

    key = splat_key(g)
    folder = Path(cache_dir) if cache_dir is not None else config.cache_dir()
    path = folder / f"lod-{key}.npz"
    h = None
    if path.is_file():
        try:
            with np.load(path) as data:
                if int(data["n_leaves"]) == len(g):
                    h = GaussianHierarchy(n_leaves=int(data["n_leaves"]), key=key,
                                          **{k: np.ascontiguousarray(data[k]) for k in GaussianHierarchy._ARRAYS})
        except (OSError, KeyError, ValueError):
            h = None  # unreadable cache entry: rebuild and overwrite it
    if h is None:
        show = sys.stderr.isatty() if progress is None else progress
        t = time.perf_counter()
        if show:
            print(f"airplay: building the LOD hierarchy of {len(g)} Gaussians ...", file=sys.stderr, flush=True)
        h = build_hierarchy(g, key)
        if show:
            print(f"airplay: LOD hierarchy built in {time.perf_counter() - t:.1f} s -> {path}", file=sys.stderr,
                  flush=True)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".lod-{key}.{os.getpid()}.{threading.get_ident()}.tmp.npz"
        try:
            np.savez(tmp, n_leaves=h.n_leaves, **{k: getattr(h, k) for k in GaussianHierarchy._ARRAYS})
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    with _memo_lock:
        _memo[id(g)] = h
    weakref.finalize(g, _forget, id(g))
    return h


def _forget(ident: int) -> None:
    with _memo_lock:
        _memo.pop(ident, None)


@intrinsic
def _prefetch(typingctx, arr, flat_index):
    """Ask the CPU to start loading the cache line of element ``flat_index`` of the C-contiguous
    array ``arr`` (LLVM's llvm.prefetch: a read, kept in every cache level). A hint only: it
    reads nothing and changes no result. The cut of a new pose cell reads a few thousand
    scattered rows of arrays of ~100 MB, mostly from DRAM; prefetching rows a few iterations
    ahead overlaps those misses."""
    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.void(arr, flat_index), codegen


# -- per-view cut --------------------------------------------------------------------------------------


@njit(cache=True, nogil=True)
def _select(right, leaf_index, bounds, viewmat, K, width, height, near, far, eps2d, alpha_min, lod_px, grow_m,
            yaw_chord, box, out, stack, stats):
    """Keys of the cut's nodes for one view into ``out`` (a leaf's splat index, N + id for an
    internal node), in preorder; returns their count.
    stats[0], stats[1] += internal nodes, leaves visited.

    ``grow_m``, ``yaw_chord``: 0 for one view. For a pose cell (:func:`cell_cut_arrays`),
    ``viewmat`` is the cell's reference view and the cut must hold for every camera whose centre
    is within ``grow_m`` of the reference one and whose heading differs by a rotation about the
    map z axis of at most h, ``yaw_chord`` = 2 sin(h / 2): mapping such a camera onto the
    reference one moves a point by at most ``grow_m + yaw_chord * (horizontal distance from the
    camera)``, so each node's sphere is grown by that for the frustum test; the LOD test uses
    the distance from ``box`` (lo x, y, z, hi x, y, z: a box holding every camera centre of the
    cell) to the node's sphere.

    A superset of what the renderer draws: the renderer's own cull then drops the selected
    Gaussians it would drop anyway (cheaper there, over a flat array, than here per node).
    """
    r00, r01, r02, t0 = viewmat[0, 0], viewmat[0, 1], viewmat[0, 2], viewmat[0, 3]
    r10, r11, r12, t1 = viewmat[1, 0], viewmat[1, 1], viewmat[1, 2], viewmat[1, 3]
    r20, r21, r22, t2 = viewmat[2, 0], viewmat[2, 1], viewmat[2, 2], viewmat[2, 3]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg = _tan_limits(fx, fy, cx, cy, width, height)
    thr2 = 2.0 * (-math.log(alpha_min))
    sq_thr2 = math.sqrt(thr2)
    # Camera centre -R^T t (world).
    ccx = -(r00 * t0 + r10 * t1 + r20 * t2)
    ccy = -(r01 * t0 + r11 * t1 + r21 * t2)
    ccz = -(r02 * t0 + r12 * t1 + r22 * t2)
    n0 = math.sqrt(r00 * r00 + r01 * r01 + r02 * r02)
    n1 = math.sqrt(r10 * r10 + r11 * r11 + r12 * r12)
    n2 = math.sqrt(r20 * r20 + r21 * r21 + r22 * r22)
    # A leaf the cull keeps satisfies x - t z <= k ext on each edge (right: t = (W - cx + margin)
    # / fx, and likewise left, bottom, top), k bounding sqrt(thr2) |row of J W| z / fx over
    # the clamp range; a node is skipped when no point of its sphere does.
    kx = sq_thr2 * (n0 + max(lim_x_pos, lim_x_neg) * n2) * (1.0 + 1e-6)
    ky = sq_thr2 * (n1 + max(lim_y_pos, lim_y_neg) * n2) * (1.0 + 1e-6)
    margin = math.sqrt(thr2 * eps2d) + 1.0 + 1e-3
    t_r = (width - cx + margin) / fx
    t_l = (cx + margin) / fx
    t_b = (height - cy + margin) / fy
    t_t = (cy + margin) / fy
    g_r = math.sqrt((r00 - t_r * r20) ** 2 + (r01 - t_r * r21) ** 2 + (r02 - t_r * r22) ** 2) * (1.0 + 1e-6)
    g_l = math.sqrt((r00 + t_l * r20) ** 2 + (r01 + t_l * r21) ** 2 + (r02 + t_l * r22) ** 2) * (1.0 + 1e-6)
    g_b = math.sqrt((r10 - t_b * r20) ** 2 + (r11 - t_b * r21) ** 2 + (r12 - t_b * r22) ** 2) * (1.0 + 1e-6)
    g_t = math.sqrt((r10 + t_t * r20) ** 2 + (r11 + t_t * r21) ** 2 + (r12 + t_t * r22) ** 2) * (1.0 + 1e-6)
    gz = n2 * (1.0 + 1e-6)
    f = max(fx, fy)
    n_leaves = (right.shape[0] + 1) // 2
    m = 0
    stack[0] = 0
    sp = 1
    n_int = 0
    n_leaf = 0
    while sp > 0:
        sp -= 1
        k = stack[sp]
        if not (bounds[k, 6] >= alpha_min):
            continue
        rk = right[k]
        if rk >= 0:
            n_int += 1
            c0 = np.float64(bounds[k, 0])
            c1 = np.float64(bounds[k, 1])
            c2 = np.float64(bounds[k, 2])
            rad0 = np.float64(bounds[k, 3])
            rad = rad0
            if grow_m > 0.0 or yaw_chord > 0.0:
                hx, hy = c0 - ccx, c1 - ccy
                rad = rad0 + grow_m + yaw_chord * (math.sqrt(hx * hx + hy * hy) + rad0 + grow_m)
            e = np.float64(bounds[k, 4]) + 1e-12
            z = r20 * c0 + r21 * c1 + r22 * c2 + t2
            if z + rad * gz < near or z - rad * gz > far:
                continue
            x = r00 * c0 + r01 * c1 + r02 * c2 + t0
            if x - t_r * z - rad * g_r > kx * e or -x - t_l * z - rad * g_l > kx * e:
                continue
            y = r10 * c0 + r11 * c1 + r12 * c2 + t1
            if y - t_b * z - rad * g_b > ky * e or -y - t_t * z - rad * g_t > ky * e:
                continue
            if lod_px > 0.0:
                dx, dy, dz = c0 - ccx, c1 - ccy, c2 - ccz
                if grow_m > 0.0:  # from the nearest point of the box of camera centres
                    dx = max(box[0] - c0, 0.0, c0 - box[3])
                    dy = max(box[1] - c1, 0.0, c1 - box[4])
                    dz = max(box[2] - c2, 0.0, c2 - box[5])
                dist = math.sqrt(dx * dx + dy * dy + dz * dz) - rad0
                if dist > 0.0 and f * np.float64(bounds[k, 5]) <= lod_px * dist:
                    pass  # draw the merged Gaussian (tested below like a leaf)
                else:
                    _prefetch(bounds, rk * bounds.shape[1])  # visited after the left subtree
                    stack[sp] = rk
                    stack[sp + 1] = k + 1
                    sp += 2
                    continue
            else:
                _prefetch(bounds, rk * bounds.shape[1])
                stack[sp] = rk
                stack[sp + 1] = k + 1
                sp += 2
                continue
        else:
            n_leaf += 1
        li = leaf_index[k]
        out[m] = li if li >= 0 else n_leaves + k
        m += 1
    stats[0] += n_int
    stats[1] += n_leaf
    return m


@njit(cache=True, nogil=True)
def _sort_keys(keys, m, tmp, hist):
    """Stable LSD radix sort of keys[:m] (non-negative int32), 11-bit digits, in place."""
    mx = 0
    for j in range(m):
        mx = max(mx, keys[j])
    shift = 0
    src, dst = keys, tmp
    swapped = False
    while (mx >> shift) > 0:
        for d in range(2048):
            hist[d] = 0
        for j in range(m):
            hist[(src[j] >> shift) & 2047] += 1
        tot = 0
        for d in range(2048):
            c = hist[d]
            hist[d] = tot
            tot += c
        for j in range(m):
            v = src[j]
            d = (v >> shift) & 2047
            dst[hist[d]] = v
            hist[d] += 1
        src, dst = dst, src
        swapped = not swapped
        shift += 11
    if swapped:
        for j in range(m):
            keys[j] = src[j]


@njit(cache=True, nogil=True)
def _keys_to_ids(keys, m, leaf_node):
    """Node ids of sorted cut keys, in place."""
    n = leaf_node.shape[0]
    for j in range(m):
        k = keys[j]
        keys[j] = leaf_node[k] if k < n else k - n


_PREFETCH_AHEAD = 16
"""How many rows ahead :func:`_gather` prefetches."""


@njit(cache=True, nogil=True, inline="always")
def _prefetch_row(rows, k):
    """Prefetch node row ``k`` of :attr:`GaussianHierarchy.rows`: every 64-byte line it touches
    (a row that starts mid-line ends in the next one)."""
    w = rows.shape[1]
    q = k * w
    for off in range(0, w, 16):  # 16 float32 = one 64-byte line
        _prefetch(rows, q + off)
    _prefetch(rows, q + w - 1)


@njit(cache=True, nogil=True)
def _gather(ids, m, rows, means, scales, quats, op, sh):
    """Node rows ``ids[:m]`` of :attr:`GaussianHierarchy.rows` into the cut's arrays, prefetching
    the rows :data:`_PREFETCH_AHEAD` ids ahead."""
    nk = sh.shape[1]
    for j in range(m):
        if j + _PREFETCH_AHEAD < m:
            _prefetch_row(rows, ids[j + _PREFETCH_AHEAD])
        k = ids[j]
        for a in range(3):
            means[j, a] = rows[k, _ROW_MEANS + a]
            scales[j, a] = rows[k, _ROW_SCALES + a]
        for a in range(4):
            quats[j, a] = rows[k, _ROW_QUATS + a]
        op[j] = rows[k, _ROW_OPACITY]
        for c in range(nk):
            for ch in range(3):
                sh[j, c, ch] = rows[k, _ROW_SH + 3 * c + ch]


class _CutWorkspace:
    def __init__(self) -> None:
        self.cap = -1
        self.nk = -1
        self.stats = np.zeros(2, dtype=np.int64)

    def ensure(self, n_nodes: int, nk: int) -> None:
        if n_nodes > self.cap or nk != self.nk:
            cap = max(n_nodes, 1)
            self.ids = np.empty(cap, dtype=np.int32)
            self.tmp = np.empty(cap, dtype=np.int32)
            self.hist = np.empty(2048, dtype=np.int64)
            self.zref = np.empty(cap, dtype=np.float64)  # a cell cut's depth order (_depth_order)
            self.perm = np.empty(cap, dtype=np.int32)
            self.stack = np.empty(cap + 64, dtype=np.int32)
            self.means = np.empty((cap, 3), np.float32)
            self.scales = np.empty((cap, 3), np.float32)
            self.quats = np.empty((cap, 4), np.float32)
            self.op = np.empty(cap, np.float32)
            self.sh = np.empty((cap, nk, 3), np.float32)
            self.cap, self.nk = n_nodes, nk


_local = threading.local()


def _cut_workspace() -> _CutWorkspace:
    ws = getattr(_local, "ws", None)
    if ws is None:
        ws = _local.ws = _CutWorkspace()
    return ws


_NO_BOX = np.zeros(6)


def _cut(h: GaussianHierarchy, viewmat, K, width, height, lod_px, near_m, far_m, grow_m=0.0, yaw_chord=0.0,
         box=_NO_BOX) -> int:
    ws = _cut_workspace()
    ws.ensure(h.n_nodes, h.sh.shape[1])
    m = _select(h.right, h.leaf_index, h.bounds, np.ascontiguousarray(viewmat, dtype=np.float64),
                np.ascontiguousarray(K, dtype=np.float64), int(width), int(height), float(near_m), float(far_m),
                EPS2D, ALPHA_MIN, float(lod_px), float(grow_m), float(yaw_chord),
                np.ascontiguousarray(box, dtype=np.float64), ws.ids, ws.stack, ws.stats)
    # Leaves in splat order first (depth ties then break as in the exact renderer), then merged nodes.
    _sort_keys(ws.ids, m, ws.tmp, ws.hist)
    _keys_to_ids(ws.ids, m, h.leaf_node)
    return m


def select(h: GaussianHierarchy, viewmat: np.ndarray, K: np.ndarray, width: int, height: int, lod_px: float,
           near_m: float, far_m: float, culled: bool = True) -> np.ndarray:
    """Node ids of one camera's cut (leaves in splat order, then merged nodes), a copy; with ``culled``, only those
    the CPU renderer's cull keeps (what it draws), else the traversal's superset."""
    from airplay.render.cpu_backend import _cull

    m = _cut(h, viewmat, K, width, height, check_lod_px(lod_px), near_m, far_m)
    ids = _cut_workspace().ids[:m].copy()
    if culled and m:
        valid = np.empty(m, np.uint8)
        depth = np.empty(m, np.float32)
        _cull(h.means[ids], h.scales[ids], h.opacities[ids], np.ascontiguousarray(viewmat, dtype=np.float64),
              np.ascontiguousarray(K, dtype=np.float64), int(width), int(height), float(near_m), float(far_m),
              EPS2D, ALPHA_MIN, valid, depth)
        ids = ids[valid.astype(bool)]
    return ids


def cut_arrays(h: GaussianHierarchy, viewmat, K, width, height, lod_px, near_m, far_m, sh_rotation):
    """(means, scales, quats, opacities, sh, sh_rotation) of one view's cut, as the CPU
    renderer takes them: views into a per-thread workspace, valid until the next call."""
    m = _cut(h, viewmat, K, width, height, lod_px, near_m, far_m)
    ws = _cut_workspace()
    _gather(ws.ids, m, h.rows, ws.means, ws.scales, ws.quats, ws.op, ws.sh)
    return (ws.means[:m], ws.scales[:m], ws.quats[:m], ws.op[:m], ws.sh[:m],
            np.ascontiguousarray(sh_rotation, dtype=np.float64))


def _check_leaves(hierarchy: GaussianHierarchy, gaussians: Gaussians) -> None:
    if hierarchy.n_leaves != len(gaussians):
        raise ValueError(f"the LOD hierarchy has {hierarchy.n_leaves} leaves, the splat {len(gaussians)} Gaussians")


def _outputs(c: int, width: int, height: int, background, profile: dict | None, depth: bool = True):
    """(background (3,), rgb (C, H, W, 3), depth (C, H, W) or None without ``depth``, alpha
    (C, H, W)) float32 for C cameras, and the profile keys (the renderer's stages plus ``cut``,
    ``cut_size``) at 0."""
    from airplay.render.cpu_backend import PROFILE_KEYS

    if profile is not None:
        for key in PROFILE_KEYS + ("cut", "cut_size"):
            profile.setdefault(key, 0.0)
    return (np.ascontiguousarray(background, dtype=np.float32).reshape(3),
            np.empty((c, height, width, 3), dtype=np.float32),
            np.empty((c, height, width), dtype=np.float32) if depth else None,
            np.empty((c, height, width), dtype=np.float32))


def render_lod_cpu(gaussians: Gaussians, hierarchy: GaussianHierarchy, viewmats, Ks, width: int, height: int,
                   background, near_m: float, far_m: float, lod_px: float, *, profile: dict | None = None):
    """:func:`airplay.render.cpu_backend.render_cpu` of each camera's cut (same arguments and
    outputs, plus the hierarchy and ``lod_px``); ``profile`` also gets ``cut`` seconds and
    ``cut_size`` (Gaussians selected), summed over the cameras."""
    from airplay.render.cpu_backend import _render_one

    viewmats = np.ascontiguousarray(viewmats, dtype=np.float64).reshape(-1, 4, 4)
    Ks = np.ascontiguousarray(np.broadcast_to(np.asarray(Ks, dtype=np.float64), (viewmats.shape[0], 3, 3)))
    width, height = int(width), int(height)
    if not 0.0 < near_m < far_m:
        raise ValueError(f"render_lod_cpu needs 0 < near_m < far_m, got near_m={near_m}, far_m={far_m}")
    _check_leaves(hierarchy, gaussians)
    c = viewmats.shape[0]
    bg, rgb, depth, alpha = _outputs(c, width, height, background, profile)
    for i in range(c):
        t = time.perf_counter()
        arrays = cut_arrays(hierarchy, viewmats[i], Ks[i], width, height, lod_px, near_m, far_m,
                            gaussians.sh_rotation)
        if profile is not None:
            profile["cut"] += time.perf_counter() - t
            profile["cut_size"] += len(arrays[0])
        _render_one(arrays, viewmats[i], Ks[i], width, height, bg, near_m, far_m, rgb[i], depth[i], alpha[i],
                    profile)
    return rgb, depth, alpha


# -- per-pose-cell cut, reused across frames ---------------------------------------------------------

CELL_CACHE_SIZE = 4
"""Cells whose gathered cuts each thread keeps (least recently used dropped first)."""


def check_cell(cell_m, cell_deg) -> tuple[float, float]:
    """(cell_m, cell_deg) as floats: both 0 (off) or cell_m > 0 and 0 < cell_deg <= 180; ValueError otherwise."""
    vals = []
    for name, v in (("cell_m", cell_m), ("cell_deg", cell_deg)):
        if v is None:
            v = 0.0
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {v!r}")
        vals.append(float(v))
    c, b = vals
    if c == 0.0 and b == 0.0:
        return 0.0, 0.0
    if not (c > 0.0 and 0.0 < b <= 180.0):
        raise ValueError(f"a pose cell needs cell_m > 0 and 0 < cell_deg <= 180 (both 0 = off), got {cell_m!r}, "
                         f"{cell_deg!r}")
    return c, b


def pose_cell(position, yaw_rad: float, cell_m: float, cell_deg: float) -> tuple[int, int, int, int]:
    """The cell of a gimbal-stabilised camera pose: (floor(x / c), floor(y / c), floor(z / c),
    floor(yaw / b)), yaw wrapped to [0, 2 pi)."""
    b = math.radians(cell_deg)
    yaw = math.fmod(float(yaw_rad), 2.0 * math.pi)
    if yaw < 0.0:
        yaw += 2.0 * math.pi
    return (math.floor(float(position[0]) / cell_m), math.floor(float(position[1]) / cell_m),
            math.floor(float(position[2]) / cell_m), math.floor(yaw / b))


def cell_view(cell, cell_m: float, cell_deg: float, mount) -> tuple[np.ndarray, float, float, np.ndarray]:
    """(reference viewmat, grow_m, yaw_chord, box) of a pose cell for :func:`_select`: the camera
    at the cell's centre and central heading; every camera of the cell has its centre within
    ``grow_m`` of the reference one (half the cell's diagonal, plus what the mount's horizontal
    offset sweeps over half a yaw bin) and in ``box`` (the cell shifted by the mount offset at
    the central heading, grown by that sweep), and a heading within half a bin, ``yaw_chord`` =
    2 sin(bin / 4)."""
    from airplay.scene.camera import map_from_base, viewmat_from_pose

    b = math.radians(cell_deg)
    i, j, k, y = cell
    vm = viewmat_from_pose(map_from_base((i + 0.5) * cell_m, (j + 0.5) * cell_m, (k + 0.5) * cell_m, (y + 0.5) * b),
                           mount)
    chord = 2.0 * math.sin(0.25 * b)
    off = math.hypot(float(mount.offset_m[0]), float(mount.offset_m[1]))
    sweep = off * chord * (1.0 + 1e-6) + 1e-6 * (1.0 + cell_m)
    grow = 0.5 * math.sqrt(3.0) * cell_m * (1.0 + 1e-6) + sweep
    yc = (y + 0.5) * b
    ox, oy = float(mount.offset_m[0]), float(mount.offset_m[1])
    shift = np.array([math.cos(yc) * ox - math.sin(yc) * oy, math.sin(yc) * ox + math.cos(yc) * oy,
                      float(mount.offset_m[2])])
    lo = np.array([i, j, k], dtype=np.float64) * cell_m + shift - sweep
    box = np.concatenate([lo, lo + cell_m + 2.0 * sweep])
    return vm, grow, chord * (1.0 + 1e-6), box


@njit(cache=True, nogil=True)
def _depth_order(ids, m, rows, viewmat, zref, hist, tmp, perm):
    """perm[:m] = the positions j < m of the nodes ids[j] in order of their optical z in the view
    ``viewmat``, binned (``hist.size`` bins over [0, max z]; z < 0 in the first; within a bin, in
    position order): an approximate depth order, in one counting pass. ids[:m] is permuted
    alike (``tmp``: scratch). The means are read from the node rows (:attr:`GaussianHierarchy.rows`,
    columns ``_ROW_MEANS`` ..); the whole rows are prefetched :data:`_PREFETCH_AHEAD` ids ahead, so that the
    gather that follows finds them in the cache."""
    r0, r1, r2, t = viewmat[2, 0], viewmat[2, 1], viewmat[2, 2], viewmat[2, 3]
    zmax = 0.0
    for j in range(m):
        if j + _PREFETCH_AHEAD < m:
            _prefetch_row(rows, ids[j + _PREFETCH_AHEAD])
        k = ids[j]
        z = max(r0 * np.float64(rows[k, _ROW_MEANS]) + r1 * np.float64(rows[k, _ROW_MEANS + 1])
                + r2 * np.float64(rows[k, _ROW_MEANS + 2]) + t, 0.0)
        zref[j] = z
        zmax = max(zmax, z)
    nb = hist.shape[0]
    scale = (nb - 1) / zmax if zmax > 0.0 else 0.0
    for b in range(nb):
        hist[b] = 0
    for j in range(m):
        hist[int(zref[j] * scale)] += 1
    total = 0
    for b in range(nb):
        c = hist[b]
        hist[b] = total
        total += c
    for j in range(m):
        b = int(zref[j] * scale)
        perm[hist[b]] = j
        hist[b] += 1
    for j in range(m):
        tmp[j] = ids[perm[j]]
    for j in range(m):
        ids[j] = tmp[j]


def _reference_order(h: GaussianHierarchy, m: int, viewmat: np.ndarray) -> np.ndarray:
    """Positions in the cut ``_cut_workspace().ids[:m]`` in approximate depth order in ``viewmat``
    (:func:`_depth_order`), and the node ids in that order in ``ids[:m]``. Views near ``viewmat``
    then draw the cut nearly in array order, so projecting reads the arrays almost sequentially
    instead of scattered over them (the exact order of each view is its own sort's)."""
    ws = _cut_workspace()
    _depth_order(ws.ids, m, h.rows, np.ascontiguousarray(viewmat, dtype=np.float64), ws.zref, ws.hist, ws.tmp,
                 ws.perm)
    return ws.perm[:m]


def _cell_cache():
    cache = getattr(_local, "cells", None)
    if cache is None:
        from collections import OrderedDict

        cache = _local.cells = OrderedDict()
    return cache


def clear_cell_cache() -> None:
    """Forget this thread's cached cell cuts."""
    _cell_cache().clear()


def cell_cut_arrays(h: GaussianHierarchy, cell, cell_m, cell_deg, mount, K, width, height, lod_px, near_m, far_m,
                    sh_rotation, profile: dict | None = None, order_view: np.ndarray | None = None):
    """((means, scales, quats, opacities, sh, sh_rotation), rank) of the cut of a pose cell (see
    :func:`cell_view`): valid for every camera pose in the cell - nothing the renderer would draw
    for one of them is culled, and no node is coarser than ``lod_px`` from any of them. The rows
    are in the depth order of ``order_view`` (world-to-camera 4x4; default the cell's reference
    view) when the cell's cut is made (:func:`_reference_order`); ``rank`` (int32) is each row's
    position in the cut's own order (leaves in splat order, then merged nodes), which the renderer
    keeps for Gaussians at equal depth (``_render_one(rank=)``), so the image is that of the
    unpermuted cut whatever the rows' order: the cut and every image are functions of the cell
    alone; the order only makes projecting faster. The last :data:`CELL_CACHE_SIZE` cells' arrays
    are kept per thread (owned copies: read-only for callers). ``profile`` gets ``cell_hits`` /
    ``cell_misses``."""
    K = np.ascontiguousarray(K, dtype=np.float64)
    prefix = _cell_key_prefix(h, cell_m, cell_deg, mount, K, width, height, lod_px, near_m, far_m)
    arrays, rank = _cell_arrays(h, prefix, tuple(int(c) for c in cell), cell_m, cell_deg, mount, K, width, height,
                                lod_px, near_m, far_m, profile, order_view)
    return arrays + (np.ascontiguousarray(sh_rotation, dtype=np.float64),), rank


def _cell_key_prefix(h: GaussianHierarchy, cell_m, cell_deg, mount, K: np.ndarray, width, height, lod_px, near_m,
                     far_m) -> tuple:
    """What a cell cache key holds besides the cell: the hierarchy and every setting the cut depends on."""
    return (id(h), h.n_leaves, float(cell_m), float(cell_deg), tuple(float(v) for v in mount.offset_m),
            float(mount.pitch_deg), K.tobytes(), int(width), int(height), float(lod_px), float(near_m), float(far_m))


def _cell_arrays(h: GaussianHierarchy, prefix: tuple, cell: tuple, cell_m, cell_deg, mount, K, width, height, lod_px,
                 near_m, far_m, profile, order_view):
    """:func:`cell_cut_arrays` without sh_rotation, for the key ``prefix`` (:func:`_cell_key_prefix`
    of the same settings) and ``cell`` (a tuple of four ints); ``K`` C-contiguous float64."""
    key = prefix + cell
    cache = _cell_cache()
    entry = cache.get(key)
    if entry is not None and entry[0] is h:
        cache.move_to_end(key)
        if profile is not None:
            profile["cell_hits"] = profile.get("cell_hits", 0) + 1
        arrays, rank = entry[1], entry[2]
    else:
        vm, grow, chord, box = cell_view(cell, cell_m, cell_deg, mount)
        m = _cut(h, vm, K, width, height, lod_px, near_m, far_m, grow, chord, box)
        rank = _reference_order(h, m, vm if order_view is None else order_view).copy()
        ws = _cut_workspace()
        arrays = (np.empty((m, 3), np.float32), np.empty((m, 3), np.float32), np.empty((m, 4), np.float32),
                  np.empty(m, np.float32), np.empty((m,) + h.sh.shape[1:], np.float32))
        _gather(ws.ids, m, h.rows, *arrays)
        cache[key] = (h, arrays, rank)
        cache.move_to_end(key)
        while len(cache) > CELL_CACHE_SIZE:
            cache.popitem(last=False)
        if profile is not None:
            profile["cell_misses"] = profile.get("cell_misses", 0) + 1
    return arrays, rank


def render_lod_cell_cpu(gaussians: Gaussians, hierarchy: GaussianHierarchy, positions, yaws, mount, K, width: int,
                        height: int, background, near_m: float, far_m: float, lod_px: float, cell_m: float,
                        cell_deg: float, *, profile: dict | None = None, depth: bool = True):
    """:func:`render_lod_cpu` for gimbal-stabilised camera poses (base_link ``positions`` (C, 3)
    in map, headings ``yaws`` (C,) rad, camera on ``mount``, intrinsics ``K``), each camera
    drawing the cut of its pose cell (:func:`pose_cell`, :func:`cell_cut_arrays`) from its exact
    view. The image is a function of the pose alone (the cell's cut does not depend on what was
    rendered before), never coarser than the per-view cut at ``lod_px``. With ``depth=False``
    the expected depth is not computed (a rasterizer compiled without it) and None is returned
    in its place."""
    positions = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
    yaws = np.asarray(yaws, dtype=np.float64).reshape(-1)
    if len(yaws) != len(positions):
        raise ValueError(f"{len(positions)} positions but {len(yaws)} yaws")
    renderer = CellRenderer(gaussians, hierarchy, mount, K, width, height, background, near_m, far_m, lod_px,
                            cell_m, cell_deg, depth=depth)
    c = len(positions)
    _, rgb, depth_out, alpha = _outputs(c, renderer.width, renderer.height, background, profile, depth)
    for i in range(c):
        p = positions[i]
        renderer.render_into(float(p[0]), float(p[1]), float(p[2]), float(yaws[i]), rgb[i],
                             None if depth_out is None else depth_out[i], alpha[i], profile)
    return rgb, depth_out, alpha


class CellRenderer:
    """:func:`render_lod_cell_cpu` for one pose at a time, with what does not depend on the pose
    checked and prepared once (settings, intrinsics, background, the cell cache key's settings
    part): a flight renders 50 frames a second from one camera, and the Python around
    the compiled stages ran cache-cold after each frame's kernels (45-105 us a frame of checks,
    conversions and small arrays; World.camera_images over 2,172 recorded poses went from
    1.24-1.34 to 1.14-1.28 ms a frame with this). Images are those of
    :func:`render_lod_cell_cpu`, bit for bit: the same viewmat, cell and cut for the same pose.
    Thread-safe as the module's cell cache is (per thread); outputs are new arrays."""

    def __init__(self, gaussians: Gaussians, hierarchy: GaussianHierarchy, mount, K, width: int, height: int,
                 background, near_m: float, far_m: float, lod_px: float, cell_m: float, cell_deg: float, *,
                 depth: bool = True) -> None:
        self.lod_px = check_lod_px(lod_px)
        self.cell_m, self.cell_deg = check_cell(cell_m, cell_deg)
        if self.lod_px <= 0.0 or self.cell_m <= 0.0:
            raise ValueError(f"render_lod_cell_cpu needs lod_px > 0 and a pose cell, got {lod_px}, {cell_m}, "
                             f"{cell_deg}")
        if not 0.0 < near_m < far_m:
            raise ValueError(f"render_lod_cell_cpu needs 0 < near_m < far_m, got near_m={near_m}, far_m={far_m}")
        _check_leaves(hierarchy, gaussians)
        self.hierarchy, self.mount, self.depth = hierarchy, mount, bool(depth)
        self.K = np.ascontiguousarray(K, dtype=np.float64).reshape(3, 3)
        self.width, self.height = int(width), int(height)
        self.near_m, self.far_m = float(near_m), float(far_m)
        self.background = np.ascontiguousarray(background, dtype=np.float32).reshape(3)
        self._sh_rotation = np.ascontiguousarray(gaussians.sh_rotation, dtype=np.float64)
        self._prefix = _cell_key_prefix(hierarchy, self.cell_m, self.cell_deg, mount, self.K, self.width, self.height,
                                        self.lod_px, self.near_m, self.far_m)

    def viewmat(self, x: float, y: float, z: float, yaw: float) -> np.ndarray:
        """World-to-camera 4x4 of base_link at (x, y, z) (map, m) with heading ``yaw`` (rad) and
        the camera on this renderer's mount."""
        from airplay.scene.camera import map_from_base, viewmat_from_pose

        return viewmat_from_pose(map_from_base(x, y, z, yaw), self.mount)

    def render_into(self, x: float, y: float, z: float, yaw: float, rgb: np.ndarray, depth: np.ndarray | None,
                    alpha: np.ndarray, profile: dict | None = None) -> None:
        """Render the pose into ``rgb`` (H, W, 3), ``depth`` (H, W; None without depth) and
        ``alpha`` (H, W) float32; ``profile`` (keys as :func:`_outputs` sets them) gets the stage times."""
        from airplay.render.cpu_backend import _render_one

        t = time.perf_counter()
        cell = pose_cell((x, y, z), yaw, self.cell_m, self.cell_deg)
        vm = self.viewmat(x, y, z, yaw)
        arrays, rank = _cell_arrays(self.hierarchy, self._prefix, cell, self.cell_m, self.cell_deg, self.mount, self.K,
                                    self.width, self.height, self.lod_px, self.near_m, self.far_m, profile, vm)
        if profile is not None:
            profile["cut"] += time.perf_counter() - t
            profile["cut_size"] += len(arrays[0])
        _render_one(arrays + (self._sh_rotation,), vm, self.K, self.width, self.height, self.background, self.near_m,
                    self.far_m, rgb, depth, alpha, profile, rank=rank)

    def rgb(self, position, yaw: float) -> np.ndarray:
        """(H, W, 3) float32 RGB of base_link at ``position`` (map, m) with heading ``yaw`` (rad)."""
        rgb = np.empty((self.height, self.width, 3), np.float32)
        alpha = np.empty((self.height, self.width), np.float32)
        depth = np.empty((self.height, self.width), np.float32) if self.depth else None
        self.render_into(float(position[0]), float(position[1]), float(position[2]), float(yaw), rgb, depth, alpha)
        return rgb
