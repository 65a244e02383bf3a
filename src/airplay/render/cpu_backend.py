"""airplay's CPU 3DGS rasterizer: tiled, compiled with numba, exact w.r.t. a dense composite.

Follows the INRIA/gsplat conventions documented in :mod:`airplay.render.api`:

* EWA splatting: 2D covariance ``J W Sigma W^T J^T`` with the perspective Jacobian ``J``
  at the mean, whose x/z and y/z are clamped to 1.3x the image half-extent (gsplat's
  ``persp_proj``), plus ``EPS2D`` on the diagonal; conic = its inverse.
* Pixel (i, j) has its centre at (j + 0.5, i + 0.5); power = 0.5 d^T conic d;
  alpha = min(ALPHA_MAX, opacity * exp(-power)); fragments with alpha < ALPHA_MIN skipped.
  (exp is Cephes expf's polynomial, relative error < 1e-7, in 8-wide vector code.)
* Front-to-back over Gaussians sorted by optical depth (ties: lower index first); a pixel
  stops at the first fragment whose transmittance *after* it would be <= TRANSMITTANCE_MIN
  (that fragment is not composited), as gsplat does.
* Colour: real SH up to degree 3 (INRIA constants) in the direction from the camera centre
  to the mean, rotated into the SH frame by ``gaussians.sh_rotation``; max(SH + 0.5, 0)
  (no upper clamp, as INRIA/gsplat).
* Expected depth sum(w z) / sum(w) with z the mean's optical depth; ``inf`` where the
  accumulated alpha < 1e-3. RGB is composited over the background.

Each Gaussian is binned to tiles with an *opacity-aware* bounding box: the pixels where
``power <= ln(255 * opacity)``, the only ones where alpha can reach ALPHA_MIN. Hence the
tiled image equals the dense all-Gaussians composite exactly, whatever the tile size.

Pipeline per camera, each stage a numba kernel (``profile=`` of :func:`render_cpu` times
them; a 224x224 view of a 1e5-Gaussian capture takes ~20 ms on 2 cores, half rasterizing):

1. cull     (parallel over blocks of Gaussians, branch-free 4-wide SIMD): opacity, near/far,
            and a conservative on-screen box;
2. sort     (sequential, stable LSD radix sort on the float32 depth bits) of the survivors,
            giving their indices in depth order;
3. project  (parallel over blocks of the survivors in depth order, gathered; branch-free 4-wide
            SIMD): EWA, conic, SH colour and the exact opacity-aware box, one 64-byte record
            per row in depth order;
4. bin      (parallel counting sort by tile, stable): each tile gets a contiguous run of
            copied records, in depth order;
5. raster   (parallel over tiles, handed out one at a time): exact per-row ellipse spans
            for wide footprints, each row walked in branch-free 8-pixel runs (8-wide vector
            code written as LLVM IR, :func:`_make_composite8`),
            per-pixel early termination, a bit mask of each row's unfinished pixels (each
            8-pixel run starts at an unfinished pixel: runs over finished ones are skipped),
            and the tile stops once every pixel is finished.

Batches of cameras are rendered one after another (each stage is already parallel).
Scratch buffers are kept per calling thread and reused across frames. Few parallel regions
per frame on purpose: when another process holds a core, each region can wait a scheduler
time slice for its last thread.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
from llvmlite import ir
from numba import get_num_threads, njit, prange, set_parallel_chunksize, types
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros
from numba.extending import intrinsic

from airplay.render.api import ALPHA_MAX, ALPHA_MIN, EPS2D, TRANSMITTANCE_MIN
from airplay.scene.gaussians import SH_C0, Gaussians

DEPTH_ALPHA_MIN = 1.0e-3
"""Below this accumulated alpha the expected depth is ``inf``."""

SH_C1 = 0.4886025119029199
SH_C2 = np.array(
    [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396]
)
SH_C3 = np.array(
    [
        -0.5900435899266435,
        2.890611442640554,
        -0.4570457994644658,
        0.3731763325901154,
        -0.4570457994644658,
        1.445305721320277,
        -0.5900435899266435,
    ]
)

# Per-Gaussian float32 record, in depth order, read by the rasterizer ...
_F_MX, _F_MY, _F_A, _F_B, _F_C, _F_OP, _F_R, _F_G, _F_BL, _F_Z, _F_THR = range(11)
_NF = 11
# ... followed by the opacity-aware pixel box, inclusive, as float32 (empty when x0 > x1):
# 16 float32 = 64 bytes, one cache line per record (per Gaussian, and per (tile, Gaussian)).
_R_PX0, _R_PX1, _R_PY0, _R_PY1 = range(_NF, _NF + 4)
_NR = 16


def _aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """np.empty whose data starts on an ``align``-byte boundary (records = cache lines)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    buf = np.empty(nbytes + align, dtype=np.uint8)
    offset = (-buf.ctypes.data) % align
    return buf[offset : offset + nbytes].view(dtype).reshape(shape)


# Padding that makes the opacity-aware boxes and row spans conservative against rounding;
# the exact per-pixel alpha test decides, so padding never changes the image.
_THR_PAD = 1.0e-4
_PIX_PAD = 1.0e-3
_NARROW = 16
"""Footprints at least this many pixels wide (within a tile) are walked by exact row spans."""


def tile_size(width: int, height: int, threads: int | None = None) -> int:
    """Tile edge for an image: one thread takes 64 px tiles (fewer (tile, Gaussian) pairs to bin;
    a 64x64 image is one tile); more threads 32 px when that still gives >= 8 tiles per thread,
    else 16. The image does not depend on it, bit for bit."""
    threads = get_num_threads() if threads is None else threads
    if threads == 1:
        return 64
    n32 = ((width + 31) // 32) * ((height + 31) // 32)
    return 32 if n32 >= 8 * threads else 16


@njit(inline="always")
def _tan_limits(fx, fy, cx, cy, width, height):
    """Clamp of x/z and y/z for the perspective Jacobian (1.3x the image half-extent, as gsplat's
    ``persp_proj``): (+x, -x, +y, -y) limits, unitless."""
    return ((width - cx) / fx + 0.3 * (0.5 * width / fx), cx / fx + 0.3 * (0.5 * width / fx),
            (height - cy) / fy + 0.3 * (0.5 * height / fy), cy / fy + 0.3 * (0.5 * height / fy))


_PB = 128
"""Gaussians per parallel iteration of _cull and _project (one vectorized loop each)."""


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def _cull(means, scales, opacities, viewmat, K, width, height, near, far, eps2d, alpha_min, valid, depth):
    """valid[i] = 1 for Gaussians that may touch the image (a superset), else 0; depth[i] =
    optical z (float32; meaningless where not valid).

    Blocks of _PB Gaussians per parallel iteration, each a branch-free loop that LLVM vectorizes
    (4-wide float64; flat inputs, unsigned indices, no zero-division checks: see :func:`_project`).
    """
    n = means.shape[0]
    mf = means.reshape(means.size)
    sf = scales.reshape(scales.size)
    r00, r01, r02, t0 = viewmat[0, 0], viewmat[0, 1], viewmat[0, 2], viewmat[0, 3]
    r10, r11, r12, t1 = viewmat[1, 0], viewmat[1, 1], viewmat[1, 2], viewmat[1, 3]
    r20, r21, r22, t2 = viewmat[2, 0], viewmat[2, 1], viewmat[2, 2], viewmat[2, 3]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg = _tan_limits(fx, fy, cx, cy, width, height)
    thr2 = 2.0 * (-math.log(alpha_min))  # 2 ln(255) >= 2 ln(255 * opacity)
    for b in prange((n + _PB - 1) // _PB):
        for k in range(b * _PB, min(b * _PB + _PB, n)):
            i = np.uintp(k)
            mxw = np.float64(mf[np.uintp(3 * i)])
            myw = np.float64(mf[np.uintp(3 * i + 1)])
            mzw = np.float64(mf[np.uintp(3 * i + 2)])
            z = r20 * mxw + r21 * myw + r22 * mzw + t2
            x = r00 * mxw + r01 * myw + r02 * mzw + t0
            y = r10 * mxw + r11 * myw + r12 * mzw + t1
            smax = max(abs(np.float64(sf[np.uintp(3 * i)])), abs(np.float64(sf[np.uintp(3 * i + 1)])),
                       abs(np.float64(sf[np.uintp(3 * i + 2)])))
            rz = 1.0 / z
            tx = min(lim_x_pos, max(-lim_x_neg, x * rz))
            ty = min(lim_y_pos, max(-lim_y_neg, y * rz))
            # Rows of J W; |row . (Rg S)| <= |row| * max scale, so these bound the 2D sigmas.
            ax = r00 - tx * r20
            ay = r01 - tx * r21
            az = r02 - tx * r22
            bx = r10 - ty * r20
            by = r11 - ty * r21
            bz = r12 - ty * r22
            sxx = (fx * rz) ** 2 * (ax * ax + ay * ay + az * az) * smax * smax + eps2d
            syy = (fy * rz) ** 2 * (bx * bx + by * by + bz * bz) * smax * smax + eps2d
            ex = math.sqrt(thr2 * sxx) + 1.0
            ey = math.sqrt(thr2 * syy) + 1.0
            u = fx * x * rz + cx
            v = fy * y * rz + cy
            ok = ((opacities[i] >= alpha_min) & (z >= near) & (z <= far)
                  & ~((u + ex < 0.0) | (u - ex > width) | (v + ey < 0.0) | (v - ey > height)))
            depth[i] = z
            valid[i] = np.uint8(ok)


@njit(cache=True, nogil=True)
def _sort_visible(valid, depth, max_digit_bits, keys_a, keys_b, idx_a, idx_b, hist, order, rank):
    """Stable sort of the valid Gaussians by depth: order[:m] = their indices in depth order.
    Returns their count m.

    LSD radix sort on the bit patterns of the positive float32 depths (integer order ==
    numeric order) minus their minimum, in as few passes of at most ``max_digit_bits`` as
    the spread of the keys needs; ties keep index order, or, where ``rank`` is not empty,
    the order of ``rank`` (distinct int32 per Gaussian: the arrays are a permutation of an
    order whose ties the image must keep, :func:`_order_ties`). Sequential on purpose: ~1 ms
    for 1e5 keys, and no parallel region (each one costs a scheduler time slice when another
    process holds a core).
    """
    n = valid.shape[0]
    bits = depth.view(np.uint32)
    m = 0
    kmin = np.uint32(0xFFFFFFFF)
    kmax = np.uint32(0)
    for i in range(n):
        if valid[i]:
            k = bits[i]
            keys_a[m] = k
            idx_a[m] = i
            m += 1
            kmin = min(kmin, k)
            kmax = max(kmax, k)
    span = np.int64(kmax) - np.int64(kmin) if m > 1 else 0
    span_bits = 0
    while span > 0:
        span_bits += 1
        span >>= 1
    passes = (span_bits + max_digit_bits - 1) // max_digit_bits
    if passes == 0:  # one depth for all: a single tie
        for j in range(m):
            order[j] = idx_a[j]
            keys_a[j] = 0
        if rank.shape[0] > 0:
            _order_ties(keys_a, order, m, rank)
        return m
    digit = (span_bits + passes - 1) // passes
    mask = (1 << digit) - 1
    for j in range(m):
        keys_a[j] -= kmin  # uint32, no wrap: kmin is the minimum
    for ps in range(passes):
        shift = ps * digit
        if ps % 2 == 0:
            src_k, src_i, dst_k, dst_i = keys_a, idx_a, keys_b, idx_b
        else:
            src_k, src_i, dst_k, dst_i = keys_b, idx_b, keys_a, idx_a
        for d in range(mask + 1):
            hist[d] = 0
        for j in range(m):
            hist[(np.int64(src_k[j]) >> shift) & mask] += 1
        total = 0
        for d in range(mask + 1):
            c = hist[d]
            hist[d] = total
            total += c
        if ps == passes - 1:
            dst_i = order
        for j in range(m):
            k = src_k[j]
            d = (np.int64(k) >> shift) & mask
            p = hist[d]
            hist[d] = p + 1
            dst_k[p] = k
            dst_i[p] = src_i[j]
    if rank.shape[0] > 0:
        _order_ties(keys_b if passes % 2 == 1 else keys_a, order, m, rank)
    return m


@njit(cache=True, nogil=True)
def _order_ties(keys, order, m, rank):
    """Within each run of equal ``keys[:m]`` (sorted), put ``order`` in increasing ``rank``
    (runs are rare and short: insertion sort; long ones, as in made-up scenes, np.argsort)."""
    j = 1
    while j < m:
        if keys[j] != keys[j - 1]:
            j += 1
            continue
        s = j - 1
        e = j + 1
        while e < m and keys[e] == keys[s]:
            e += 1
        if e - s > 32:
            run = order[s:e].copy()
            by_rank = np.argsort(rank[run])
            for k in range(e - s):
                order[s + k] = run[by_rank[k]]
            j = e + 1
            continue
        for a in range(s + 1, e):
            v = order[a]
            rv = rank[v]
            b = a - 1
            while b >= s and rank[order[b]] > rv:
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = v
        j = e + 1


# Scratch of one block of _PB Gaussians in _project, float64, one run of _PB values per channel:
# the unit view direction in the SH frame, then the colour's sums. Constant channel offsets:
# LLVM sees that they do not overlap.
_P_DX, _P_DY, _P_DZ, _P_R = (_PB * k for k in range(4))
_P_NCH = 6

_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)


@intrinsic
def _bits_of_f32(typingctx, x):
    """The int32 holding the IEEE-754 bits of the float32 ``x`` (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int32))
    return types.int32(types.float32), codegen


@njit(inline="always", error_model="numpy")
def _log_f32(x):
    """ln(x) in float64 for a positive, normal float32 ``x`` (absolute error ~1e-16), without
    branches or calls so that loops using it vectorize: x = 2^e m with m in [sqrt(1/2), sqrt(2)),
    ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series to s^17. (The exponent
    and mantissa are read in float64 from the bits, converted as int32: exact.)"""
    f = np.float64(_bits_of_f32(x))
    e = np.float64(np.int32(f * (1.0 / 8388608.0)))  # biased exponent (f >= 0: truncation is floor)
    m = 1.0 + (f - e * 8388608.0) * (1.0 / 8388608.0)  # mantissa in [1, 2)
    big = m > _SQRT2
    m = 0.5 * m if big else m
    e = e - 126.0 if big else e - 127.0
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    q = 1.0 / 17.0
    q = q * z + 1.0 / 15.0
    q = q * z + 1.0 / 13.0
    q = q * z + 1.0 / 11.0
    q = q * z + 1.0 / 9.0
    q = q * z + 1.0 / 7.0
    q = q * z + 1.0 / 5.0
    q = q * z + 1.0 / 3.0
    q = q * z + 1.0
    return e * _LN2 + 2.0 * s * q


@njit(inline="always")
def _view_dir(S, k):
    """(dx, dy, dz, dx^2, dy^2, dz^2) of row k's unit view direction in the SH frame, from ``S``."""
    dx = S[np.uintp(k + _P_DX)]
    dy = S[np.uintp(k + _P_DY)]
    dz = S[np.uintp(k + _P_DZ)]
    return dx, dy, dz, dx * dx, dy * dy, dz * dz


@njit(inline="always")
def _sh_colour(S, shf, order, j0, cnt, nk, gf):
    """RGB of the Gaussians order[j0 + k], k < cnt, from their SH (INRIA constants and signs),
    max(SH + 0.5, 0), into records j0 + k of the flat record array ``gf``, from the unit view
    directions in the SH frame in ``S`` (_P_DX ..): one branch-free loop per SH degree, so that
    each vectorizes (the nk coefficients of Gaussian i are shf[3 nk i ..], gathered)."""
    nk3 = np.uintp(3 * nk)
    for k in range(cnt):
        base = nk3 * np.uintp(order[np.uintp(j0 + k)])
        for ch in range(3):
            S[np.uintp(k + _P_R + ch * _PB)] = SH_C0 * shf[base + np.uintp(ch)]
    if nk > 1:
        for k in range(cnt):
            base = nk3 * np.uintp(order[np.uintp(j0 + k)])
            b1 = -SH_C1 * S[np.uintp(k + _P_DY)]
            b2 = SH_C1 * S[np.uintp(k + _P_DZ)]
            b3 = -SH_C1 * S[np.uintp(k + _P_DX)]
            for ch in range(3):
                c = np.uintp(ch)
                S[np.uintp(k + _P_R + ch * _PB)] += (b1 * shf[base + c + np.uintp(3)] + b2 * shf[base + c + np.uintp(6)]
                                                     + b3 * shf[base + c + np.uintp(9)])
    if nk > 4:
        c20, c21, c22, c23, c24 = SH_C2[0], SH_C2[1], SH_C2[2], SH_C2[3], SH_C2[4]
        for k in range(cnt):
            base = nk3 * np.uintp(order[np.uintp(j0 + k)]) + np.uintp(12)
            dx, dy, dz, xx, yy, zz = _view_dir(S, k)
            b4 = c20 * dx * dy
            b5 = c21 * dy * dz
            b6 = c22 * (2.0 * zz - xx - yy)
            b7 = c23 * dx * dz
            b8 = c24 * (xx - yy)
            for ch in range(3):
                c = np.uintp(ch)
                S[np.uintp(k + _P_R + ch * _PB)] += (
                    b4 * shf[base + c] + b5 * shf[base + c + np.uintp(3)] + b6 * shf[base + c + np.uintp(6)]
                    + b7 * shf[base + c + np.uintp(9)] + b8 * shf[base + c + np.uintp(12)])
    if nk > 9:
        c30, c31, c32, c33, c34, c35, c36 = SH_C3[0], SH_C3[1], SH_C3[2], SH_C3[3], SH_C3[4], SH_C3[5], SH_C3[6]
        for k in range(cnt):
            base = nk3 * np.uintp(order[np.uintp(j0 + k)]) + np.uintp(27)
            dx, dy, dz, xx, yy, zz = _view_dir(S, k)
            b9 = c30 * dy * (3.0 * xx - yy)
            b10 = c31 * dx * dy * dz
            b11 = c32 * dy * (4.0 * zz - xx - yy)
            b12 = c33 * dz * (2.0 * zz - 3.0 * xx - 3.0 * yy)
            b13 = c34 * dx * (4.0 * zz - xx - yy)
            b14 = c35 * dz * (xx - yy)
            b15 = c36 * dx * (xx - 3.0 * yy)
            for ch in range(3):
                c = np.uintp(ch)
                S[np.uintp(k + _P_R + ch * _PB)] += (
                    b9 * shf[base + c] + b10 * shf[base + c + np.uintp(3)] + b11 * shf[base + c + np.uintp(6)]
                    + b12 * shf[base + c + np.uintp(9)] + b13 * shf[base + c + np.uintp(12)]
                    + b14 * shf[base + c + np.uintp(15)] + b15 * shf[base + c + np.uintp(18)])
    for k in range(cnt):
        for ch in range(3):
            gf[np.uintp(_NR * (j0 + k) + _F_R + ch)] = np.float32(max(S[np.uintp(k + _P_R + ch * _PB)] + 0.5, 0.0))


@njit(parallel=True, cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _project(order, m, means, scales, quats, opacities, sh, viewmat, K, sh_rot, width, height,
             eps2d, alpha_min, grec):
    """Screen-space record of Gaussian order[j] into row j of ``grec``, j < m (empty box if
    culled): pixel-space mean and conic, opacity, SH colour, optical z (m) and pixel box.

    Per block of _PB rows (one per parallel iteration), branch-free loops over their Gaussians,
    gathered, that LLVM vectorizes (4-wide float64): the geometry, then the colour, one loop per
    SH degree (:func:`_sh_colour`). Inputs and records are indexed as flat arrays (constant
    strides) with unsigned indices (no negative-index wraparound code). ``error_model="numpy"``:
    no zero-division checks, so culled rows may hold inf or nan besides their empty box;
    ``contract`` lets LLVM fuse multiply-adds (no other fast-math assumption).
    """
    mf = means.reshape(means.size)
    sf = scales.reshape(scales.size)
    qf = quats.reshape(quats.size)
    gf = grec.reshape(grec.size)
    shf = sh.reshape(sh.size)
    nk = sh.shape[1]
    r00, r01, r02, t0 = viewmat[0, 0], viewmat[0, 1], viewmat[0, 2], viewmat[0, 3]
    r10, r11, r12, t1 = viewmat[1, 0], viewmat[1, 1], viewmat[1, 2], viewmat[1, 3]
    r20, r21, r22, t2 = viewmat[2, 0], viewmat[2, 1], viewmat[2, 2], viewmat[2, 3]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    h00, h01, h02 = sh_rot[0, 0], sh_rot[0, 1], sh_rot[0, 2]
    h10, h11, h12 = sh_rot[1, 0], sh_rot[1, 1], sh_rot[1, 2]
    h20, h21, h22 = sh_rot[2, 0], sh_rot[2, 1], sh_rot[2, 2]
    # Camera centre in the frame of the means: -R^T t.
    ccx = -(r00 * t0 + r10 * t1 + r20 * t2)
    ccy = -(r01 * t0 + r11 * t1 + r21 * t2)
    ccz = -(r02 * t0 + r12 * t1 + r22 * t2)
    lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg = _tan_limits(fx, fy, cx, cy, width, height)
    log_min = math.log(alpha_min)
    xmax = width - 1.0
    ymax = height - 1.0
    for b in prange((m + _PB - 1) // _PB):
        j0 = b * _PB
        cnt = min(_PB, m - j0)
        S = np.empty(_P_NCH * _PB, dtype=np.float64)
        for k in range(cnt):
            i = np.uintp(order[np.uintp(j0 + k)])
            op = np.float64(opacities[i])
            mxw = np.float64(mf[np.uintp(3 * i)])
            myw = np.float64(mf[np.uintp(3 * i + 1)])
            mzw = np.float64(mf[np.uintp(3 * i + 2)])
            x = r00 * mxw + r01 * myw + r02 * mzw + t0
            y = r10 * mxw + r11 * myw + r12 * mzw + t1
            z = r20 * mxw + r21 * myw + r22 * mzw + t2
            # Rotation of the Gaussian from its (w, x, y, z) quaternion, normalised.
            qw = np.float64(qf[np.uintp(4 * i)])
            qx = np.float64(qf[np.uintp(4 * i + 1)])
            qy = np.float64(qf[np.uintp(4 * i + 2)])
            qz = np.float64(qf[np.uintp(4 * i + 3)])
            qn = math.sqrt(qw * qw + qx * qx + qy * qy + qz * qz)
            inv_qn = 1.0 / qn
            qw *= inv_qn
            qx *= inv_qn
            qy *= inv_qn
            qz *= inv_qn
            m00 = 1.0 - 2.0 * (qy * qy + qz * qz)
            m01 = 2.0 * (qx * qy - qw * qz)
            m02 = 2.0 * (qx * qz + qw * qy)
            m10 = 2.0 * (qx * qy + qw * qz)
            m11 = 1.0 - 2.0 * (qx * qx + qz * qz)
            m12 = 2.0 * (qy * qz - qw * qx)
            m20 = 2.0 * (qx * qz - qw * qy)
            m21 = 2.0 * (qy * qz + qw * qx)
            m22 = 1.0 - 2.0 * (qx * qx + qy * qy)
            sx = np.float64(sf[np.uintp(3 * i)])
            sy = np.float64(sf[np.uintp(3 * i + 1)])
            sz = np.float64(sf[np.uintp(3 * i + 2)])
            # Perspective Jacobian with clamped x/z, y/z (gsplat persp_proj):
            # J = [[fx/z, 0, -fx tx/z], [0, fy/z, -fy ty/z]] with tx, ty the clamped ratios.
            rz = 1.0 / z
            tx = min(lim_x_pos, max(-lim_x_neg, x * rz))
            ty = min(lim_y_pos, max(-lim_y_neg, y * rz))
            # Rows of J W (2x3).
            w00 = fx * rz * (r00 - tx * r20)
            w01 = fx * rz * (r01 - tx * r21)
            w02 = fx * rz * (r02 - tx * r22)
            w10 = fy * rz * (r10 - ty * r20)
            w11 = fy * rz * (r11 - ty * r21)
            w12 = fy * rz * (r12 - ty * r22)
            # B = (J W) Rg S (2x3); cov2d = B B^T = J W Rg S S^T Rg^T W^T J^T.
            b00 = (w00 * m00 + w01 * m10 + w02 * m20) * sx
            b01 = (w00 * m01 + w01 * m11 + w02 * m21) * sy
            b02 = (w00 * m02 + w01 * m12 + w02 * m22) * sz
            b10 = (w10 * m00 + w11 * m10 + w12 * m20) * sx
            b11 = (w10 * m01 + w11 * m11 + w12 * m21) * sy
            b12 = (w10 * m02 + w11 * m12 + w12 * m22) * sz
            cxx = b00 * b00 + b01 * b01 + b02 * b02 + eps2d
            cxy = b00 * b10 + b01 * b11 + b02 * b12
            cyy = b10 * b10 + b11 * b11 + b12 * b12 + eps2d
            det = cxx * cyy - cxy * cxy
            inv_det = 1.0 / det
            u = fx * x * rz + cx
            v = fy * y * rz + cy
            # Opacity-aware extent: alpha >= alpha_min only where power <= ln(op / alpha_min).
            thr = _log_f32(opacities[i]) - log_min
            thr_p = thr * (1.0 + _THR_PAD) + 1e-6
            ex = math.sqrt(2.0 * thr_p * cxx) + _PIX_PAD
            ey = math.sqrt(2.0 * thr_p * cyy) + _PIX_PAD
            # Pixel j is covered when its centre j + 0.5 lies in [u - ex, u + ex].
            fx0 = np.ceil(u - ex - 0.5)
            fx1 = np.floor(u + ex - 0.5)
            fy0 = np.ceil(v - ey - 0.5)
            fy1 = np.floor(v + ey - 0.5)
            ok = ((qn > 0.0) & (det > 0.0) & (thr >= 0.0)
                  & ~((fx1 < 0.0) | (fy1 < 0.0) | (fx0 > xmax) | (fy0 > ymax) | (fx0 > fx1) | (fy0 > fy1)))
            # View direction (camera centre to mean), unit, in the SH frame.
            dxw = mxw - ccx
            dyw = myw - ccy
            dzw = mzw - ccz
            dn2 = dxw * dxw + dyw * dyw + dzw * dzw
            inv_dn = 1.0 / math.sqrt(dn2) if dn2 > 0.0 else 1.0
            dxw *= inv_dn
            dyw *= inv_dn
            dzw *= inv_dn
            gf[np.uintp(_NR * (j0 + k) + _F_MX)] = np.float32(u)
            gf[np.uintp(_NR * (j0 + k) + _F_MY)] = np.float32(v)
            gf[np.uintp(_NR * (j0 + k) + _F_A)] = np.float32(cyy * inv_det)
            gf[np.uintp(_NR * (j0 + k) + _F_B)] = np.float32(-cxy * inv_det)
            gf[np.uintp(_NR * (j0 + k) + _F_C)] = np.float32(cxx * inv_det)
            gf[np.uintp(_NR * (j0 + k) + _F_OP)] = np.float32(op)
            gf[np.uintp(_NR * (j0 + k) + _F_Z)] = np.float32(z)
            gf[np.uintp(_NR * (j0 + k) + _F_THR)] = np.float32(thr_p)
            # Culled: the empty box (1, 0) in x and y.
            gf[np.uintp(_NR * (j0 + k) + _R_PX0)] = np.float32(max(fx0, 0.0) if ok else 1.0)
            gf[np.uintp(_NR * (j0 + k) + _R_PX1)] = np.float32(min(fx1, xmax) if ok else 0.0)
            gf[np.uintp(_NR * (j0 + k) + _R_PY0)] = np.float32(max(fy0, 0.0) if ok else 1.0)
            gf[np.uintp(_NR * (j0 + k) + _R_PY1)] = np.float32(min(fy1, ymax) if ok else 0.0)
            S[np.uintp(k + _P_DX)] = h00 * dxw + h01 * dyw + h02 * dzw
            S[np.uintp(k + _P_DY)] = h10 * dxw + h11 * dyw + h12 * dzw
            S[np.uintp(k + _P_DZ)] = h20 * dxw + h21 * dyw + h22 * dzw
        _sh_colour(S, shf, order, j0, cnt, nk, gf)


@njit(parallel=True, cache=True, nogil=True)
def _count_tiles(grec, m, ntx, nty, tile_shift, nchunks, starts, offsets):
    """Tile-list offsets (CSR) and per-chunk write cursors; returns the number of pairs."""
    nt = ntx * nty
    for c in prange(nchunks):
        lo = c * m // nchunks
        hi = (c + 1) * m // nchunks
        for t in range(nt):
            starts[c, t] = 0
        for r in range(lo, hi):
            if grec[r, _R_PX0] > grec[r, _R_PX1]:
                continue
            for ty in range(int(grec[r, _R_PY0]) >> tile_shift, (int(grec[r, _R_PY1]) >> tile_shift) + 1):
                for tx in range(int(grec[r, _R_PX0]) >> tile_shift, (int(grec[r, _R_PX1]) >> tile_shift) + 1):
                    starts[c, ty * ntx + tx] += 1
    total = 0
    for t in range(nt):
        offsets[t] = total
        for c in range(nchunks):
            k = starts[c, t]
            starts[c, t] = total
            total += k
    offsets[nt] = total
    return total


@njit(parallel=True, cache=True, nogil=True)
def _fill_tiles(grec, m, ntx, tile_shift, nchunks, starts, rec):
    """Per-tile records, contiguous per tile and in depth order within each tile: row k of
    ``rec`` holds the float record and (as float32) the pixel box of one (tile, Gaussian)."""
    for c in prange(nchunks):
        lo = c * m // nchunks
        hi = (c + 1) * m // nchunks
        for r in range(lo, hi):
            if grec[r, _R_PX0] > grec[r, _R_PX1]:
                continue
            for ty in range(int(grec[r, _R_PY0]) >> tile_shift, (int(grec[r, _R_PY1]) >> tile_shift) + 1):
                for tx in range(int(grec[r, _R_PX0]) >> tile_shift, (int(grec[r, _R_PX1]) >> tile_shift) + 1):
                    t = ty * ntx + tx
                    k = starts[c, t]
                    starts[c, t] = k + 1
                    for f in range(_NR):
                        rec[k, f] = grec[r, f]


# Per-tile pixel state of the rasterizer, float32, one block of _ROW values per tile row:
# transmittance (negative once the pixel is finished: -T), then sum w*r, w*g, w*b, w*z.
# Each channel holds _LANES values: a tile row (at most 64 pixels) plus the up to 7 lanes an
# 8-wide run may read past its end, which start finished.
_LANES = 72
_ST, _SR, _SG, _SB, _SZ = (k * _LANES for k in range(5))
_ROW = 5 * _LANES

_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_V8 = ir.VectorType(_F32, 8)
_V8I = ir.VectorType(_I32, 8)
# exp(r) = 1 + r + r^2 (E0 + E1 r + ... + E5 r^5) on [-ln2/2, ln2/2]: Cephes expf's polynomial
_E = (5.0000001201e-1, 1.6666665459e-1, 4.1665795894e-2, 8.3334519073e-3, 1.3981999507e-3, 1.9875691500e-4)
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = _LN2_HI + _LN2_LO (Cody-Waite)
_ROUND = 12582912.0  # 1.5 * 2^23: (x + _ROUND) - _ROUND rounds a float32 |x| < 2^22 to an integer


_STEP_CONSTANTS = tuple(float(np.float32(x)) for x in (0.0, 1.0, 87.0, 1.0 / math.log(2.0), _ROUND, _LN2_HI, _LN2_LO,
                                                         *_E, 127.0, 8388608.0))
"""The constants of the 8-pixel step, float32, in the order of :func:`_step_constants`."""


def _step_constants() -> np.ndarray:
    """:data:`_STEP_CONSTANTS`, each 8 times (one <8 x float> per constant), in a float32 array that
    starts on a 32-byte boundary: the rasterizer takes it as an argument and the step reads its
    constants from it (see :func:`_make_composite8`)."""
    k = len(_STEP_CONSTANTS)
    buf = np.empty(8 * k + 8, dtype=np.float32)
    start = (-buf.ctypes.data // 4) % 8
    out = buf[start:start + 8 * k]
    out[:] = np.repeat(np.array(_STEP_CONSTANTS, dtype=np.float32), 8)
    return out


_STEP_CONSTANTS_ARRAY = _step_constants()


def _make_composite8(with_depth: bool):
    """The rasterizer's step for 8 consecutive pixels of a tile row and one Gaussian, as an intrinsic
    that emits LLVM <8 x float> code (AVX2 on x86-64), with or without the expected depth.

    ``composite8(S, px, p, lx, mx, hca, bdy, hcdy2, op, thr, r, g, b, z, alpha_max, alpha_min,
    t_min, consts)`` updates the tile state ``S`` (float32, channels at _ST, _SR, ...) at elements
    p .. p+7 (unsigned offsets; pixel centres x in px[lx ..], float32) and returns the pixels it
    finished (uint64, bit i for lane i). ``consts`` is :func:`_step_constants`' array: the step
    loads its vector constants from it (one plain vector load each) instead of from LLVM's constant pool,
    which numba's large code model reaches through a 64-bit address load and a broadcast per
    constant (28 of 92 instructions per step; 12 % less rasterizing time). It must be an argument
    of the kernel: numba freezes a global array into the code, and LLVM folds it back into pool
    constants. Per lane: power = dx (hca dx + bdy) + hcdy2 with dx = x - mx; alpha = min(alpha_max,
    op exp(-power)); the fragment is composited where 0 <= power <= thr, alpha >= alpha_min and the
    pixel is unfinished (T > 0); a fragment that would leave T <= t_min is dropped and finishes the
    pixel (T := -T). exp is Cephes expf (range reduction by ln 2 in two parts, its degree-5
    polynomial evaluated by Estrin's scheme; relative error < 1e-7, tested) without branches or calls.

    Written as vector IR because LLVM's loop vectorizer, on the equivalent loop, adds per-row
    runtime alias checks and spills around the 1-2 iterations a footprint row takes.
    """

    @intrinsic
    def composite8(typingctx, S, px, p, lx, mx, hca, bdy, hcdy2, op, thr, gr, gg, gb, gz, amax, amin, tmin, consts):
        sig = types.uint64(S, px, p, lx, mx, hca, bdy, hcdy2, op, thr, gr, gg, gb, gz, amax, amin, tmin, consts)

        def codegen(context, builder, signature, args):
            b = builder

            def splat(x):
                v = b.insert_element(ir.Constant(_V8, ir.Undefined), x, ir.Constant(_I32, 0))
                zeros = ir.Constant(_V8I, [ir.Constant(_I32, 0)] * 8)
                return b.shuffle_vector(v, ir.Constant(_V8, ir.Undefined), zeros)

            def vmin(x, y):
                return b.select(b.fcmp_ordered("<", x, y), x, y)

            def vmax(x, y):
                return b.select(b.fcmp_ordered(">", x, y), x, y)

            def mul_add(x, y, z):  # x * y + z (LLVM may fuse it under ``contract``)
                return b.fadd(b.fmul(x, y), z)

            s_data = context.make_array(signature.args[0])(context, b, args[0]).data
            px_data = context.make_array(signature.args[1])(context, b, args[1]).data
            p = args[2]
            mx, hca, bdy, hcdy2, op, thr, gr, gg, gb, gz, amax, amin, tmin = (splat(a) for a in args[4:17])
            c_data = context.make_array(signature.args[17])(context, b, args[17]).data

            def _v8(x):  # the constant x, read from ``consts``
                i = _STEP_CONSTANTS.index(float(np.float32(x)))
                ptr = b.gep(c_data, [ir.Constant(ir.IntType(64), 8 * i)], inbounds=True)
                return b.load(b.bitcast(ptr, _V8.as_pointer()), align=4)  # (aligned to 32 in fact)

            def at(channel):
                ptr = b.gep(s_data, [b.add(p, ir.Constant(p.type, channel))], inbounds=True)
                return b.bitcast(ptr, _V8.as_pointer())

            zero, one = _v8(0.0), _v8(1.0)
            dx = b.fsub(b.load(b.bitcast(b.gep(px_data, [args[3]], inbounds=True), _V8.as_pointer()), align=4), mx)
            power = mul_add(dx, mul_add(hca, dx, bdy), hcdy2)
            x = vmin(vmax(power, zero), _v8(87.0))
            # exp(-x) = 2^-n exp(r), n = round(x / ln 2), r = n ln 2 - x in [-ln2/2, ln2/2]
            n = b.fsub(mul_add(x, _v8(1.0 / math.log(2.0)), _v8(_ROUND)), _v8(_ROUND))
            r = mul_add(n, _v8(_LN2_LO), b.fsub(b.fmul(n, _v8(_LN2_HI)), x))
            r2 = b.fmul(r, r)
            q = mul_add(r2, mul_add(r2, mul_add(_v8(_E[5]), r, _v8(_E[4])), mul_add(_v8(_E[3]), r, _v8(_E[2]))),
                        mul_add(_v8(_E[1]), r, _v8(_E[0])))
            scale = b.bitcast(b.fptosi(b.fmul(b.fsub(_v8(127.0), n), _v8(8388608.0)), _V8I), _V8)  # 2^-n
            e = b.fmul(b.fadd(mul_add(q, r2, r), one), scale)
            alpha = vmin(amax, b.fmul(op, e))
            t_ptr = at(_ST)
            tp = b.load(t_ptr, align=4)
            hit = b.and_(b.and_(b.fcmp_ordered("<=", power, thr), b.fcmp_ordered(">=", power, zero)),
                         b.and_(b.fcmp_ordered(">=", alpha, amin), b.fcmp_ordered(">", tp, zero)))
            next_t = b.fmul(tp, b.fsub(one, alpha))
            last = b.and_(hit, b.fcmp_ordered("<=", next_t, tmin))
            keep = b.and_(hit, b.fcmp_ordered(">", next_t, tmin))
            w = b.select(keep, b.fmul(alpha, tp), zero)
            for channel, value in ((_SR, gr), (_SG, gg), (_SB, gb)) + (((_SZ, gz),) if with_depth else ()):
                ptr = at(channel)
                b.store(mul_add(w, value, b.load(ptr, align=4)), ptr, align=4)
            b.store(b.select(keep, next_t, b.select(last, b.fsub(zero, tp), tp)), t_ptr, align=4)
            return b.zext(b.bitcast(last, ir.IntType(8)), ir.IntType(64))

        return sig, codegen

    return composite8


_composite8_z = _make_composite8(True)
_composite8 = _make_composite8(False)


_NONE = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(inline="always")
def _lane_span(lo, hi):
    """uint64 with bits lo .. hi set, for 0 <= lo, hi <= 63 (none when lo > hi)."""
    return (_ALL >> np.uint64(63 - hi)) & (_ALL << np.uint64(lo))


def _make_rasterize(with_depth: bool):
    """The rasterizer kernel, compiled with or without the expected depth (``with_depth`` is
    a constant of each compile: without it, nothing of the depth is accumulated or written, and
    ``depth_out`` is not touched: 4-7 % less time on 500 recorded 64x64 frames)."""

    @njit(parallel=True, cache=True, nogil=True, fastmath={"contract"})
    def rasterize(rec, offsets, width, height, ntx, nty, tile, background,
                  alpha_max, alpha_min, t_min, depth_alpha_min, rgb_out, depth_out, alpha_out, consts):
        """Composite each tile's depth-ordered records; one tile per parallel iteration.

        Each record's rows are walked in runs of 8 pixels, every pixel of a run tested without
        branches (:func:`_make_composite8`, 8-wide vector code): the run's pixels outside the
        footprint fail the exact power test, finished ones are skipped by their negative
        transmittance, so the image is the one a per-pixel loop gives. (``contract`` lets LLVM
        fuse multiply-adds; no other fast-math assumption is made.) ``consts``: the step's
        constants, :data:`_STEP_CONSTANTS_ARRAY`.
        """
        nt = ntx * nty
        alpha_max32 = np.float32(alpha_max)
        alpha_min32 = np.float32(alpha_min)
        t_min32 = np.float32(t_min)
        half = np.float32(0.5)
        one = np.float32(1.0)
        for t in prange(nt):
            ty = t // ntx
            tx = t - ty * ntx
            x0 = tx * tile
            y0 = ty * tile
            x1 = min(x0 + tile, width) - 1
            y1 = min(y0 + tile, height) - 1
            tw = x1 - x0 + 1
            th = y1 - y0 + 1
            S = np.zeros(th * _ROW, dtype=np.float32)
            px = np.empty(_LANES, dtype=np.float32)  # pixel centres, image x
            for lx in range(_LANES):
                px[lx] = np.float32(x0 + lx) + half
                for ly in range(th):
                    S[ly * _ROW + _ST + lx] = one if lx < tw else -one
            # Bit lx of alive[ly] is set while pixel (lx, ly) of the tile is unfinished; unfinished
            # rows lie in [ylo, yhi]. A footprint row is walked in runs of 8 that each start at an
            # unfinished pixel of it (nothing would change where none is).
            alive = np.full(th, _lane_span(0, tw - 1), dtype=np.uint64)
            ylo = 0
            yhi = th - 1
            for r in range(offsets[t], offsets[t + 1]):
                gy0 = max(int(rec[r, _R_PY0]) - y0, ylo)
                gy1 = min(int(rec[r, _R_PY1]) - y0, yhi)
                if gy0 > gy1:
                    continue
                gx0 = max(int(rec[r, _R_PX0]), x0) - x0
                gx1 = min(int(rec[r, _R_PX1]), x1) - x0
                if gx0 > gx1:
                    continue
                span = _lane_span(gx0, gx1)
                # Offsets from the mean in image pixel coordinates (not tile-local ones, which would
                # round differently per tile size): the image does not depend on the tiling.
                mx = rec[r, _F_MX]
                my = rec[r, _F_MY]
                ca = rec[r, _F_A]
                cb = rec[r, _F_B]
                cc = rec[r, _F_C]
                op = rec[r, _F_OP]
                gr = rec[r, _F_R]
                gg = rec[r, _F_G]
                gb = rec[r, _F_BL]
                gz = rec[r, _F_Z]
                thr = rec[r, _F_THR]
                hca = half * ca
                hcc = half * cc
                # Wide footprints: visit only each row's exact ellipse span (float64 maths).
                wide = gx1 - gx0 >= _NARROW
                a64 = 0.0
                b64 = 0.0
                mx64 = 0.0
                thr2 = 0.0
                inv_a = 0.0
                qdet = 0.0
                if wide:
                    a64 = np.float64(ca)
                    b64 = np.float64(cb)
                    mx64 = np.float64(mx) - x0  # tile-local, exact in float64: only bounds the span
                    thr2 = 2.0 * np.float64(thr)
                    inv_a = 1.0 / a64
                    qdet = a64 * np.float64(cc) - b64 * b64
                emptied = False
                for ly in range(gy0, gy1 + 1):
                    live = alive[ly] & span
                    if live == _NONE:
                        continue
                    dy = np.float32(y0 + ly) + half - my
                    if wide:
                        # a dx^2 + 2 b dy dx + c dy^2 <= 2 thr on this row.
                        sx0 = np.int64(trailing_zeros(live))
                        sx1 = 63 - np.int64(leading_zeros(live))
                        dy64 = np.float64(dy)
                        disc = a64 * thr2 - qdet * dy64 * dy64
                        if disc < 0.0:
                            continue
                        sq = math.sqrt(disc)
                        lo = mx64 - 0.5 + (-b64 * dy64 - sq) * inv_a - _PIX_PAD
                        hi = mx64 - 0.5 + (-b64 * dy64 + sq) * inv_a + _PIX_PAD
                        sx0 = max(sx0, int(math.ceil(max(lo, sx0 - 1.0))))
                        sx1 = min(sx1, int(math.floor(min(hi, sx1 + 1.0))))
                        if sx0 > sx1:
                            continue
                        live &= _lane_span(sx0, sx1)
                        if live == _NONE:
                            continue
                    bdy = cb * dy
                    hcdy2 = hcc * dy * dy
                    row = ly * _ROW
                    # Runs of 8 from each unfinished pixel that the run before does not reach.
                    lx = np.int64(trailing_zeros(live))
                    while True:
                        # (module globals, not closure variables: numba caches a kernel only so)
                        if with_depth:
                            done = _composite8_z(S, px, np.uintp(row + lx), np.uintp(lx), mx, hca, bdy, hcdy2,
                                                 op, thr, gr, gg, gb, gz, alpha_max32, alpha_min32, t_min32, consts)
                        else:
                            done = _composite8(S, px, np.uintp(row + lx), np.uintp(lx), mx, hca, bdy, hcdy2,
                                               op, thr, gr, gg, gb, gz, alpha_max32, alpha_min32, t_min32, consts)
                        if done != _NONE:
                            alive[ly] &= ~(done << np.uint64(lx))
                            emptied |= alive[ly] == _NONE
                        lx += 8
                        if lx >= 64:
                            break
                        rest = live >> np.uint64(lx)
                        if rest == _NONE:
                            break
                        lx += np.int64(trailing_zeros(rest))
                if emptied:
                    while ylo <= yhi and alive[ylo] == _NONE:
                        ylo += 1
                    while yhi >= ylo and alive[yhi] == _NONE:
                        yhi -= 1
                    if ylo > yhi:
                        break
            for ly in range(th):
                for lx in range(tw):
                    p = ly * _ROW + lx
                    tp = abs(S[p + _ST])
                    a = one - tp
                    rgb_out[y0 + ly, x0 + lx, 0] = S[p + _SR] + tp * background[0]
                    rgb_out[y0 + ly, x0 + lx, 1] = S[p + _SG] + tp * background[1]
                    rgb_out[y0 + ly, x0 + lx, 2] = S[p + _SB] + tp * background[2]
                    alpha_out[y0 + ly, x0 + lx] = a
                    if not with_depth:
                        continue
                    if a < depth_alpha_min:
                        depth_out[y0 + ly, x0 + lx] = np.inf
                    else:
                        depth_out[y0 + ly, x0 + lx] = S[p + _SZ] / a

    return rasterize


_rasterize = _make_rasterize(True)
_rasterize_rgb = _make_rasterize(False)
""":func:`_rasterize` without the expected depth."""


class _Workspace:
    """Scratch buffers reused across frames (one per calling thread): fresh multi-MB
    arrays every frame cost page faults comparable to a whole pipeline stage."""

    def __init__(self) -> None:
        self.n = -1
        self.key = None
        self.rec = _aligned_empty((0, _NR), np.float32)

    def ensure(self, n: int, nt: int, nchunks: int) -> None:
        if n > self.n:
            cap = max(n, 1)
            self.valid = np.empty(cap, dtype=np.uint8)
            self.depth = np.empty(cap, dtype=np.float32)
            self.keys_a = np.empty(cap, dtype=np.uint32)
            self.keys_b = np.empty(cap, dtype=np.uint32)
            self.idx_a = np.empty(cap, dtype=np.int32)
            self.idx_b = np.empty(cap, dtype=np.int32)
            self.order = np.empty(cap, dtype=np.int32)
            self.hist = np.empty(1 << _MAX_DIGIT_BITS, dtype=np.int64)
            self.grec = _aligned_empty((cap, _NR), np.float32)
            self.n = n
        if (nt, nchunks) != self.key:
            self.offsets = np.empty(nt + 1, dtype=np.int64)
            self.starts = np.empty((nchunks, nt), dtype=np.int64)
            self.key = (nt, nchunks)

    def ensure_pairs(self, pairs: int) -> np.ndarray:
        if pairs > self.rec.shape[0]:
            self.rec = _aligned_empty((int(pairs * 1.25) + 1024, _NR), np.float32)
        return self.rec


_MAX_DIGIT_BITS = 11
_GAUSSIAN_BLOCK = 4096
_local = threading.local()


def _workspace() -> _Workspace:
    ws = getattr(_local, "ws", None)
    if ws is None:
        ws = _local.ws = _Workspace()
    return ws


def _gaussian_arrays(g: Gaussians):
    return (
        np.ascontiguousarray(g.means, dtype=np.float32),
        np.ascontiguousarray(g.scales, dtype=np.float32),
        np.ascontiguousarray(g.quats_wxyz, dtype=np.float32),
        np.ascontiguousarray(g.opacities, dtype=np.float32),
        np.ascontiguousarray(g.sh, dtype=np.float32),
        np.ascontiguousarray(g.sh_rotation, dtype=np.float64),
    )


_NO_DEPTH = np.empty((1, 1), dtype=np.float32)
"""Stands for ``depth_out`` when no depth is wanted (never written)."""


_NO_RANK = np.empty(0, dtype=np.int32)
"""Depth ties keep the order of the arrays."""


def _render_one(arrays, viewmat, K, width, height, background, near_m, far_m, rgb, depth, alpha, times=None,
                rank=None):
    """Render one camera into ``rgb`` (H, W, 3), ``depth`` (H, W) and ``alpha`` (H, W);
    ``depth`` None: no expected depth (the rasterizer compiled without it). ``rank`` (int32 per
    Gaussian, distinct): Gaussians at the same depth are drawn in its order, not the arrays'
    (arrays permuted for locality draw the image of the unpermuted ones)."""
    means, scales, quats, opac, sh, sh_rot = arrays
    n = means.shape[0]
    threads = get_num_threads()
    tile = tile_size(width, height, threads)
    ntx = (width + tile - 1) // tile
    nty = (height + tile - 1) // tile
    nchunks = min(64, 4 * threads)
    ws = _workspace()
    ws.ensure(n, ntx * nty, nchunks)
    near_m, far_m = float(near_m), float(far_m)
    # Dynamic scheduling everywhere (a thread that loses its core to another process does
    # not hold up the others): runs of _GAUSSIAN_BLOCK Gaussians, single bin chunks and single tiles.
    # (One thread: nothing to schedule, and each call costs a few microseconds.)
    parallel = threads > 1
    old_chunk = set_parallel_chunksize(_GAUSSIAN_BLOCK // _PB) if parallel else 0
    try:
        t0 = time.perf_counter()
        _cull(means, scales, opac, viewmat, K, width, height, near_m, far_m, EPS2D, ALPHA_MIN, ws.valid, ws.depth)
        t1 = time.perf_counter()
        m = _sort_visible(ws.valid[:n], ws.depth, _MAX_DIGIT_BITS, ws.keys_a, ws.keys_b, ws.idx_a, ws.idx_b,
                          ws.hist, ws.order, _NO_RANK if rank is None else rank)
        t2 = time.perf_counter()
        _project(ws.order, m, means, scales, quats, opac, sh, viewmat, K, sh_rot, width, height,
                 EPS2D, ALPHA_MIN, ws.grec)
        t3 = time.perf_counter()
        if parallel:
            set_parallel_chunksize(1)
        if ntx * nty == 1:  # one tile: the depth-ordered records are its list (empty boxes are skipped)
            ws.offsets[0], ws.offsets[1] = 0, m
            pairs, rec = m, ws.grec
        else:
            shift = tile.bit_length() - 1
            pairs = _count_tiles(ws.grec, m, ntx, nty, shift, nchunks, ws.starts, ws.offsets)
            rec = ws.ensure_pairs(pairs)
            _fill_tiles(ws.grec, m, ntx, shift, nchunks, ws.starts, rec)
        t4 = time.perf_counter()
        (_rasterize if depth is not None else _rasterize_rgb)(
            rec, ws.offsets, width, height, ntx, nty, tile, background, ALPHA_MAX, ALPHA_MIN, TRANSMITTANCE_MIN,
            DEPTH_ALPHA_MIN, rgb, _NO_DEPTH if depth is None else depth, alpha, _STEP_CONSTANTS_ARRAY)
        t5 = time.perf_counter()
    finally:
        if parallel:
            set_parallel_chunksize(old_chunk)
    if times is not None:
        times["cull"] += t1 - t0
        times["sort"] += t2 - t1
        times["project"] += t3 - t2
        times["bin"] += t4 - t3
        times["rasterize"] += t5 - t4
        times["visible"] += m
        times["tile_pairs"] += pairs


PROFILE_KEYS = ("cull", "sort", "project", "bin", "rasterize", "visible", "tile_pairs")
"""Keys that ``render_cpu(..., profile=d)`` adds to ``d``: seconds per stage, then counts."""


def render_cpu(gaussians: Gaussians, viewmats: np.ndarray, Ks: np.ndarray, width: int, height: int,
               background: np.ndarray, near_m: float, far_m: float, *, profile: dict | None = None):
    """Render C cameras on the CPU; see :mod:`airplay.render.api` for the semantics.

    Args:
        gaussians: the splat.
        viewmats: (C, 4, 4) float64 world-to-camera (OpenCV optical frame).
        Ks: (C, 3, 3) float64 intrinsics, pixels.
        width, height: image size, pixels.
        background: (3,) float32 RGB.
        near_m, far_m: culling distances along the optical axis, metres.
        profile: optional dict; seconds per stage and counts (:data:`PROFILE_KEYS`), summed
            over the cameras, are added to it.

    Returns:
        rgb (C, H, W, 3) float32, depth (C, H, W) float32, alpha (C, H, W) float32.
    """
    viewmats = np.ascontiguousarray(viewmats, dtype=np.float64).reshape(-1, 4, 4)
    Ks = np.ascontiguousarray(np.broadcast_to(np.asarray(Ks, dtype=np.float64), (viewmats.shape[0], 3, 3)))
    width, height = int(width), int(height)
    if not 0.0 < near_m < far_m:
        raise ValueError(f"render_cpu needs 0 < near_m < far_m, got near_m={near_m}, far_m={far_m}")
    c = viewmats.shape[0]
    bg = np.ascontiguousarray(background, dtype=np.float32).reshape(3)
    rgb = np.empty((c, height, width, 3), dtype=np.float32)
    depth = np.empty((c, height, width), dtype=np.float32)
    alpha = np.empty((c, height, width), dtype=np.float32)
    if profile is not None:
        for key in PROFILE_KEYS:
            profile.setdefault(key, 0.0)
    arrays = _gaussian_arrays(gaussians)
    for i in range(c):
        _render_one(arrays, viewmats[i], Ks[i], width, height, bg, near_m, far_m, rgb[i], depth[i], alpha[i], profile)
    return rgb, depth, alpha
