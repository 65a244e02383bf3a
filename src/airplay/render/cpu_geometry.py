"""The CPU rasterizer's geometry kernels (:mod:`airplay.render.cpu_backend`, stages 1-4): cull,
depth sort, projection (EWA, conic, SH colour, opacity-aware box) and binning to tiles."""

from __future__ import annotations

import math

import numpy as np
from numba import get_num_threads, njit, prange

from airplay.render import numba_plain
from airplay.render.cpu_kernels import fast
from airplay.render.cpu_layout import (_F_A, _F_B, _F_C, _F_MX, _F_MY, _F_OP, _F_THR, _F_Z, _NR, _P_DX, _P_DY,
                                       _P_DZ, _P_NCH, _PB, _PIX_PAD, _R_PX0, _R_PX1, _R_PY0, _R_PY1, _THR_PAD)
from airplay.render.cpu_sh import _sh_colour

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

_SQRT2 = math.sqrt(2.0)
_LN2 = math.log(2.0)


def _make_log_f32(bits_of_f32):
    @njit(inline="always", error_model="numpy")
    def log_f32(x):
        """ln(x) in float64 for a positive, normal float32 ``x`` (absolute error ~1e-16), without
        branches or calls so that loops using it vectorize: x = 2^e m with m in [sqrt(1/2), sqrt(2)),
        ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, by its series to s^17. (The exponent
        and mantissa are read in float64 from the bits, converted as int32: exact.)"""
        f = np.float64(bits_of_f32(x))
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
    return log_f32


_log_f32 = _make_log_f32(fast.bits_of_f32)
_log_f32_plain = _make_log_f32(numba_plain.bits_of_f32)


def make_project(plain: bool):
    """:func:`_project` with the plain numba ln of :mod:`airplay.render.numba_plain` (``plain``)
    or :mod:`airplay.render.numba_llvm`'s: the same records, bit for bit."""

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
                thr = (_log_f32_plain(opacities[i]) if plain else _log_f32(opacities[i])) - log_min
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


    return _project


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


