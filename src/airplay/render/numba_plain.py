"""Plain numba versions of :mod:`airplay.render.numba_llvm`'s functions: the same names, arguments
and results (bit for bit), written with numba's public API only (no ``@intrinsic``, no LLVM IR,
nothing of ``numba.cpython.unsafe``). Slower; chosen with ``AIRPLAY_CPU_KERNELS=plain``, or by
default where numba_llvm's check fails (:mod:`airplay.render.cpu_kernels`)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from airplay.render.cpu_layout import _E, _LN2_HI, _LN2_LO, _ROUND, _SB, _SG, _SR, _ST, _STEP_CONSTANTS, _SZ

_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U63 = np.uint64(63)


@njit(inline="always")
def trailing_zeros(v):
    """Zero bits below the lowest set bit of the uint64 ``v`` (64 for 0)."""
    n = np.uint64(0)
    while n < np.uint64(64) and (v >> n) & _U1 == _U0:
        n += _U1
    return n


@njit(inline="always")
def leading_zeros(v):
    """Zero bits above the highest set bit of the uint64 ``v`` (64 for 0)."""
    n = np.uint64(0)
    while n < np.uint64(64) and (v >> (_U63 - n)) & _U1 == _U0:
        n += _U1
    return n


@njit(inline="always")
def bits_of_f32(x):
    """The int32 holding the IEEE-754 bits of a float32 ``x`` >= 0 (finite), from its exponent and
    mantissa (``math.frexp``; exact)."""
    v = np.float64(x)
    if v < 1.1754943508222875e-38:  # subnormal or 0: x / 2^-149
        return np.int32(v * 7.1362384635297994e44)
    m, e = math.frexp(v)  # x = m 2^e, m in [0.5, 1): biased exponent e + 126, mantissa bits (2m - 1) 2^23
    return np.int32((e + 126) * 8388608 + np.int64((2.0 * m - 1.0) * 8388608.0))


@njit(inline="always")
def prefetch(arr, flat_index):
    """Nothing (:func:`airplay.render.numba_llvm.prefetch` is a hint that changes no result)."""
    return None


def _index(x: float) -> int:
    return 8 * _STEP_CONSTANTS.index(float(np.float32(x)))


_K0, _K1, _K87, _KINVLN2, _KROUND, _KHI, _KLO = (_index(x) for x in (0.0, 1.0, 87.0, 1.0 / math.log(2.0), _ROUND,
                                                                      _LN2_HI, _LN2_LO))
_KE = tuple(_index(x) for x in _E)


def make_composite8(with_depth: bool):
    """:func:`airplay.render.numba_llvm.make_composite8`'s step, one lane after another: the same
    float32 operations in the same order (multiply-adds written as ``x * y + z``, which the
    rasterizer's ``contract`` lets LLVM fuse as it fuses the vector code's), so the same bits."""

    @njit(inline="always")
    def composite8(S, px, p, lx, mx, hca, bdy, hcdy2, op, thr, gr, gg, gb, gz, amax, amin, tmin, consts):
        zero = consts[_K0]
        one = consts[_K1]
        done = np.uint64(0)
        for i in range(8):
            q = p + np.uintp(i)
            dx = px[lx + np.uintp(i)] - mx
            power = dx * (hca * dx + bdy) + hcdy2
            x = power if power > zero else zero
            x = x if x < consts[_K87] else consts[_K87]
            n = (x * consts[_KINVLN2] + consts[_KROUND]) - consts[_KROUND]
            r = n * consts[_KLO] + (n * consts[_KHI] - x)
            r2 = r * r
            poly = (r2 * (r2 * (consts[_KE[5]] * r + consts[_KE[4]]) + (consts[_KE[3]] * r + consts[_KE[2]]))
                    + (consts[_KE[1]] * r + consts[_KE[0]]))
            scale = np.float32(math.ldexp(1.0, -int(n)))  # 2^-n, exact (n is an integer in [0, 126])
            e = ((poly * r2 + r) + one) * scale
            oe = op * e
            alpha = amax if amax < oe else oe
            tp = S[q + np.uintp(_ST)]
            hit = power <= thr and power >= zero and alpha >= amin and tp > zero
            next_t = tp * (one - alpha)
            last = hit and next_t <= tmin
            keep = hit and next_t > tmin
            w = alpha * tp if keep else zero
            S[q + np.uintp(_SR)] = w * gr + S[q + np.uintp(_SR)]
            S[q + np.uintp(_SG)] = w * gg + S[q + np.uintp(_SG)]
            S[q + np.uintp(_SB)] = w * gb + S[q + np.uintp(_SB)]
            if with_depth:
                S[q + np.uintp(_SZ)] = w * gz + S[q + np.uintp(_SZ)]
            S[q + np.uintp(_ST)] = next_t if keep else (zero - tp if last else tp)
            if last:
                done |= np.uint64(1) << np.uint64(i)
        return done

    return composite8
