"""Memory layouts shared by the CPU rasterizer's kernels (:mod:`airplay.render.cpu_backend`).

The per-Gaussian record that projection writes and the rasterizer reads, the blocks of
Gaussians a parallel iteration takes, the per-tile-row pixel state of the rasterizer, and the
float32 constants of its 8-pixel step (:mod:`airplay.render.numba_llvm`,
:mod:`airplay.render.numba_plain`). No kernel lives here.
"""

from __future__ import annotations

import math

import numpy as np

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



_PB = 128
"""Gaussians per parallel iteration of _cull and _project (one vectorized loop each)."""

# Scratch of one block of _PB Gaussians in _project, float64, one run of _PB values per channel:
# the unit view direction in the SH frame, then the colour's sums. Constant channel offsets:
# LLVM sees that they do not overlap.
_P_DX, _P_DY, _P_DZ, _P_R = (_PB * k for k in range(4))
_P_NCH = 6


# Per-tile pixel state of the rasterizer, float32, one block of _ROW values per tile row:
# transmittance (negative once the pixel is finished: -T), then sum w*r, w*g, w*b, w*z.
# Each channel holds _LANES values: a tile row (at most 64 pixels) plus the up to 7 lanes an
# 8-wide run may read past its end, which start finished.
_LANES = 72
_ST, _SR, _SG, _SB, _SZ = (k * _LANES for k in range(5))
_ROW = 5 * _LANES

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
    constants from it (see :func:`airplay.render.numba_llvm.make_composite8`)."""
    k = len(_STEP_CONSTANTS)
    buf = np.empty(8 * k + 8, dtype=np.float32)
    start = (-buf.ctypes.data // 4) % 8
    out = buf[start:start + 8 * k]
    out[:] = np.repeat(np.array(_STEP_CONSTANTS, dtype=np.float32), 8)
    return out


_STEP_CONSTANTS_ARRAY = _step_constants()

