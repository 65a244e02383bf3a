"""The level-of-detail hierarchy of a splat (:mod:`airplay.render.lod`): a k-d tree over the
means whose internal nodes are moment-matched merges of their children, built once per splat and
cached on disk."""

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
from numba import njit

from airplay.scene.gaussians import Gaussians, quat_wxyz_to_matrix

CACHE_VERSION = 2
"""Bump when the hierarchy's construction changes: cached trees are rebuilt."""
OPACITY_CAP = 10.0
"""Upper bound on a merged Gaussian's opacity ``w_p / A(Sigma_p)`` (see the module docstring)."""
_KT_P = 1.6


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
    lines, so a new pose cell's gather reads a node in 1-2 lines rather than one line per field."""
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

