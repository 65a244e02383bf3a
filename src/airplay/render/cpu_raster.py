"""The CPU rasterizer's last stage (:mod:`airplay.render.cpu_backend`, stage 5): each tile's
depth-ordered records composited front to back, 8 pixels at a time."""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from airplay.render import numba_plain as _plain
from airplay.render.cpu_kernels import fast
from airplay.render.cpu_layout import (_F_A, _F_B, _F_BL, _F_C, _F_G, _F_MX, _F_MY, _F_OP, _F_R, _F_THR, _F_Z,
                                       _LANES, _NARROW, _PIX_PAD, _R_PX0, _R_PX1, _R_PY0, _R_PY1, _ROW, _SB, _SG,
                                       _SR, _ST, _SZ)

_composite8_z = fast.make_composite8(True)
_composite8 = fast.make_composite8(False)
_composite8_z_plain = _plain.make_composite8(True)
_composite8_plain = _plain.make_composite8(False)


_NONE = np.uint64(0)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@njit(inline="always")
def _lane_span(lo, hi):
    """uint64 with bits lo .. hi set, for 0 <= lo, hi <= 63 (none when lo > hi)."""
    return (_ALL >> np.uint64(63 - hi)) & (_ALL << np.uint64(lo))


def make_rasterize(with_depth: bool, plain: bool = False):
    """The rasterizer kernel, compiled with or without the expected depth (``with_depth`` is
    a constant of each compile: without it, nothing of the depth is accumulated or written, and
    ``depth_out`` is not touched), with the 8-pixel
    step and bit scans of :mod:`airplay.render.numba_plain` (``plain``) or of
    :mod:`airplay.render.numba_llvm`: the same image, bit for bit."""

    @njit(parallel=True, cache=True, nogil=True, fastmath={"contract"})
    def rasterize(rec, offsets, width, height, ntx, nty, tile, background,
                  alpha_max, alpha_min, t_min, depth_alpha_min, rgb_out, depth_out, alpha_out, consts):
        """Composite each tile's depth-ordered records; one tile per parallel iteration.

        Each record's rows are walked in runs of 8 pixels, every pixel of a run tested without
        branches (:func:`airplay.render.numba_llvm.make_composite8`, 8-wide vector code): the run's pixels outside the
        footprint fail the exact power test, finished ones are skipped by their negative
        transmittance, so the image is the one a per-pixel loop gives. (``contract`` lets LLVM
        fuse multiply-adds; no other fast-math assumption is made.) ``consts``: the step's
        constants, :data:`airplay.render.cpu_layout._STEP_CONSTANTS_ARRAY`.
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
                        sx0 = np.int64(_plain.trailing_zeros(live) if plain else fast.trailing_zeros(live))
                        sx1 = 63 - np.int64(_plain.leading_zeros(live) if plain else fast.leading_zeros(live))
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
                    lx = np.int64(_plain.trailing_zeros(live) if plain else fast.trailing_zeros(live))
                    while True:
                        # (module globals, not closure variables: numba caches a kernel only so)
                        if plain and with_depth:
                            done = _composite8_z_plain(S, px, np.uintp(row + lx), np.uintp(lx), mx, hca, bdy, hcdy2,
                                                       op, thr, gr, gg, gb, gz, alpha_max32, alpha_min32, t_min32,
                                                       consts)
                        elif plain:
                            done = _composite8_plain(S, px, np.uintp(row + lx), np.uintp(lx), mx, hca, bdy, hcdy2,
                                                     op, thr, gr, gg, gb, gz, alpha_max32, alpha_min32, t_min32, consts)
                        elif with_depth:
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
                        lx += np.int64(_plain.trailing_zeros(rest) if plain else fast.trailing_zeros(rest))
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


RASTERIZERS = {(with_depth, plain): make_rasterize(with_depth, plain) for with_depth in (True, False)
               for plain in (False, True)}
"""The rasterizer by (with the expected depth, plain numba): compiled on first use."""
