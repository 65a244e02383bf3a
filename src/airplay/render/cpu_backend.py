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
            code written as LLVM IR, :func:`airplay.render.numba_llvm.make_composite8`),
            per-pixel early termination, a bit mask of each row's unfinished pixels (each
            8-pixel run starts at an unfinished pixel: runs over finished ones are skipped),
            and the tile stops once every pixel is finished.

Stages 1-4 are in :mod:`airplay.render.cpu_geometry` (colour: :mod:`airplay.render.cpu_sh`), stage
5 in :mod:`airplay.render.cpu_raster`, their shared layouts in :mod:`airplay.render.cpu_layout`;
this module runs them. Each kernel comes in two variants, the same images bit for bit: with the
LLVM pieces of :mod:`airplay.render.numba_llvm` or the plain numba of
:mod:`airplay.render.numba_plain`, chosen per frame by ``AIRPLAY_CPU_KERNELS``
(:mod:`airplay.render.cpu_kernels`).

Batches of cameras are rendered one after another (each stage is already parallel).
Scratch buffers are kept per calling thread and reused across frames. Few parallel regions
per frame on purpose: when another process holds a core, each region can wait a scheduler
time slice for its last thread.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from numba import get_num_threads, set_parallel_chunksize

from airplay.render.constants import ALPHA_MAX, ALPHA_MIN, EPS2D, TRANSMITTANCE_MIN
from airplay.render.cpu_geometry import _count_tiles, _cull, _fill_tiles, _sort_visible, make_project, tile_size
from airplay.render.cpu_kernels import use_plain
from airplay.render.cpu_layout import _NR, _PB, _STEP_CONSTANTS_ARRAY, _aligned_empty
from airplay.render.cpu_raster import RASTERIZERS
from airplay.scene.gaussians import Gaussians

DEPTH_ALPHA_MIN = 1.0e-3
"""Below this accumulated alpha the expected depth is ``inf``."""


_PROJECT = {False: make_project(False), True: make_project(True)}
"""Projection by plain numba or not (:func:`airplay.render.cpu_kernels.use_plain`)."""

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
    plain = use_plain()
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
        _PROJECT[plain](ws.order, m, means, scales, quats, opac, sh, viewmat, K, sh_rot, width, height,
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
        RASTERIZERS[depth is not None, plain](
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
