"""The per-view cut of a level-of-detail hierarchy (:mod:`airplay.render.lod`): which nodes one
camera draws, gathered into arrays the CPU renderer takes, and :func:`render_lod_cpu`."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
from numba import njit

from airplay.render import numba_plain as _pf
from airplay.render.constants import ALPHA_MIN, EPS2D
from airplay.render.cpu_backend import PROFILE_KEYS, _render_one
from airplay.render.cpu_geometry import _cull, _tan_limits
from airplay.render.cpu_kernels import fast, use_plain
from airplay.render.lod.hierarchy import (_ROW_MEANS, _ROW_OPACITY, _ROW_QUATS, _ROW_SCALES, _ROW_SH,
                                          GaussianHierarchy)
from airplay.scene.gaussians import Gaussians

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


def _make_select(plain: bool):
    """:func:`_select` prefetching ahead (``plain``: without, :mod:`airplay.render.numba_plain`):
    the same result."""

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
                        # visited after the left subtree
                        if plain:
                            _pf.prefetch(bounds, rk * bounds.shape[1])
                        else:
                            fast.prefetch(bounds, rk * bounds.shape[1])
                        stack[sp] = rk
                        stack[sp + 1] = k + 1
                        sp += 2
                        continue
                else:
                    if plain:
                        _pf.prefetch(bounds, rk * bounds.shape[1])
                    else:
                        fast.prefetch(bounds, rk * bounds.shape[1])
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
    return _select


SELECT = {plain: _make_select(plain) for plain in (False, True)}


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


def _make_prefetch_row(prefetch):
    @njit(nogil=True, inline="always")
    def prefetch_row(rows, k):
        """Prefetch node row ``k`` of :attr:`GaussianHierarchy.rows`: every 64-byte line it touches
        (a row that starts mid-line ends in the next one)."""
        w = rows.shape[1]
        q = k * w
        for off in range(0, w, 16):  # 16 float32 = one 64-byte line
            prefetch(rows, q + off)
        prefetch(rows, q + w - 1)
    return prefetch_row


_prefetch_row = _make_prefetch_row(fast.prefetch)
_prefetch_row_plain = _make_prefetch_row(_pf.prefetch)


def _make_gather(plain: bool):
    """:func:`_gather` prefetching ahead (``plain``: without, :mod:`airplay.render.numba_plain`):
    the same result."""

    @njit(cache=True, nogil=True)
    def _gather(ids, m, rows, means, scales, quats, op, sh):
        """Node rows ``ids[:m]`` of :attr:`GaussianHierarchy.rows` into the cut's arrays, prefetching
        the rows :data:`_PREFETCH_AHEAD` ids ahead."""
        nk = sh.shape[1]
        for j in range(m):
            if j + _PREFETCH_AHEAD < m:
                if plain:
                    _prefetch_row_plain(rows, ids[j + _PREFETCH_AHEAD])
                else:
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
    return _gather


GATHER = {plain: _make_gather(plain) for plain in (False, True)}
"""The cut's kernels by plain numba or not (:func:`airplay.render.cpu_kernels.use_plain`)."""



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
    m = SELECT[use_plain()](h.right, h.leaf_index, h.bounds, np.ascontiguousarray(viewmat, dtype=np.float64),
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
    GATHER[use_plain()](ws.ids, m, h.rows, ws.means, ws.scales, ws.quats, ws.op, ws.sh)
    return (ws.means[:m], ws.scales[:m], ws.quats[:m], ws.op[:m], ws.sh[:m],
            np.ascontiguousarray(sh_rotation, dtype=np.float64))


def _check_leaves(hierarchy: GaussianHierarchy, gaussians: Gaussians) -> None:
    if hierarchy.n_leaves != len(gaussians):
        raise ValueError(f"the LOD hierarchy has {hierarchy.n_leaves} leaves, the splat {len(gaussians)} Gaussians")


def _outputs(c: int, width: int, height: int, background, profile: dict | None, depth: bool = True):
    """(background (3,), rgb (C, H, W, 3), depth (C, H, W) or None without ``depth``, alpha
    (C, H, W)) float32 for C cameras, and the profile keys (the renderer's stages plus ``cut``,
    ``cut_size``) at 0."""
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


