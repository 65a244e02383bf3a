"""Pose cells (:mod:`airplay.render.lod`): one cut per cell of gimbal-stabilised camera poses,
valid for every pose in it and kept per thread across frames; :func:`render_lod_cell_cpu` and
:class:`CellRenderer`."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from airplay.render.cpu_backend import _render_one
from airplay.render.cpu_kernels import use_plain
from airplay.render.lod.cut import (_PREFETCH_AHEAD, GATHER, _check_leaves, _cut, _cut_workspace, _outputs,
                                    _prefetch_row, _prefetch_row_plain, check_lod_px)
from airplay.render.lod.hierarchy import _ROW_MEANS, GaussianHierarchy
from airplay.scene.gaussians import Gaussians

_local = threading.local()

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


def _make_depth_order(plain: bool):
    """:func:`_depth_order` prefetching ahead (``plain``: without, :mod:`airplay.render.numba_plain`):
    the same result."""

    @njit(cache=True, nogil=True)
    def _depth_order(ids, m, rows, viewmat, zref, hist, tmp, perm):
        """perm[:m] = the positions j < m of the nodes ids[j] in order of their optical z in the view
        ``viewmat``, binned (``hist.size`` bins over [0, max z]; z < 0 in the first; within a bin, in
        position order): an approximate depth order, in one counting pass. ids[:m] is permuted
        alike (``tmp``: scratch). The means are read from the node rows
        (:attr:`GaussianHierarchy.rows`, columns ``_ROW_MEANS`` ..); the whole rows are prefetched
        :data:`_PREFETCH_AHEAD` ids ahead, so that the gather that follows finds them in the cache."""
        r0, r1, r2, t = viewmat[2, 0], viewmat[2, 1], viewmat[2, 2], viewmat[2, 3]
        zmax = 0.0
        for j in range(m):
            if j + _PREFETCH_AHEAD < m:
                if plain:
                    _prefetch_row_plain(rows, ids[j + _PREFETCH_AHEAD])
                else:
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
    return _depth_order


DEPTH_ORDER = {plain: _make_depth_order(plain) for plain in (False, True)}


def _reference_order(h: GaussianHierarchy, m: int, viewmat: np.ndarray) -> np.ndarray:
    """Positions in the cut ``_cut_workspace().ids[:m]`` in approximate depth order in ``viewmat``
    (:func:`_depth_order`), and the node ids in that order in ``ids[:m]``. Views near ``viewmat``
    then draw the cut nearly in array order, so projecting reads the arrays almost sequentially
    instead of scattered over them (the exact order of each view is its own sort's)."""
    ws = _cut_workspace()
    DEPTH_ORDER[use_plain()](ws.ids, m, h.rows, np.ascontiguousarray(viewmat, dtype=np.float64), ws.zref, ws.hist,
                             ws.tmp, ws.perm)
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


class SharedCellCache:
    """Cell cuts shared by every thread that renders with it: a least-recently-used map of at
    most ``capacity`` cells behind a lock, for renderers of many cameras at once (one vehicle
    per camera, cameras spread over threads), where each thread's own :data:`CELL_CACHE_SIZE`
    cells would be evicted by the other cameras' cells before they are reused. Entries are
    those of the per-thread cache (owned copies, read-only); a cell two threads miss at once is
    cut by both, and either's arrays kept (they are equal: a cell's cut depends on the cell
    alone)."""

    def __init__(self, capacity: int) -> None:
        if int(capacity) < 1:
            raise ValueError(f"SharedCellCache capacity must be >= 1, got {capacity!r}")
        from collections import OrderedDict

        self.capacity = int(capacity)
        self._cells: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._cells)

    def get(self, key):
        with self._lock:
            entry = self._cells.get(key)
            if entry is not None:
                self._cells.move_to_end(key)
            return entry

    def put(self, key, entry) -> None:
        with self._lock:
            self._cells[key] = entry
            self._cells.move_to_end(key)
            while len(self._cells) > self.capacity:
                self._cells.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._cells.clear()


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
                 near_m, far_m, profile, order_view, shared: SharedCellCache | None = None):
    """:func:`cell_cut_arrays` without sh_rotation, for the key ``prefix`` (:func:`_cell_key_prefix`
    of the same settings) and ``cell`` (a tuple of four ints); ``K`` C-contiguous float64.
    ``shared``: keep the cut there instead of in this thread's cache."""
    key = prefix + cell
    if shared is None:
        cache = _cell_cache()
        entry = cache.get(key)
        if entry is not None:
            cache.move_to_end(key)
    else:
        entry = shared.get(key)
    if entry is not None and entry[0] is h:
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
        GATHER[use_plain()](ws.ids, m, h.rows, *arrays)
        if shared is not None:
            shared.put(key, (h, arrays, rank))
        else:
            cache[key] = (h, arrays, rank)
            cache.move_to_end(key)
            while len(cache) > CELL_CACHE_SIZE:
                cache.popitem(last=False)
        if profile is not None:
            profile["cell_misses"] = profile.get("cell_misses", 0) + 1
    return arrays, rank


@dataclass(frozen=True, eq=False)
class CellSettings:
    """What a pose-cell render depends on besides the splat and the pose.

    Attributes:
        mount: the camera's :class:`airplay.scene.camera.CameraMount` on base_link.
        K: (3, 3) pinhole intrinsics, pixels.
        width, height: image size, pixels.
        background: RGB in [0, 1].
        near_m, far_m: culling distances along the optical axis, metres (0 < near_m < far_m).
        lod_px: level of detail, pixels (> 0; :func:`airplay.render.lod.cut.check_lod_px`).
        cell_m, cell_deg: the pose cell's edge (m) and heading bin (degrees), both > 0
            (:func:`check_cell`).
        depth: whether the expected depth is rendered (False: a rasterizer compiled without it,
            None in its place).
    """

    mount: object
    K: np.ndarray
    width: int
    height: int
    background: tuple
    near_m: float
    far_m: float
    lod_px: float
    cell_m: float
    cell_deg: float
    depth: bool = True


def render_lod_cell_cpu(gaussians: Gaussians, hierarchy: GaussianHierarchy, positions, yaws, settings: CellSettings,
                        *, profile: dict | None = None):
    """:func:`airplay.render.lod.cut.render_lod_cpu` for gimbal-stabilised camera poses (base_link
    ``positions`` (C, 3) in map, m; headings ``yaws`` (C,) rad), each camera as ``settings`` say,
    drawing the cut of its pose cell (:func:`pose_cell`, :func:`cell_cut_arrays`) from its exact
    view. The image is a function of the pose alone (the cell's cut does not depend on what was
    rendered before), never coarser than the per-view cut at ``settings.lod_px``. Returns rgb
    (C, H, W, 3), depth (C, H, W) (None with ``settings.depth`` False) and alpha (C, H, W),
    float32; ``profile`` gets the stage times and counts."""
    positions = np.asarray(positions, dtype=np.float64).reshape(-1, 3)
    yaws = np.asarray(yaws, dtype=np.float64).reshape(-1)
    if len(yaws) != len(positions):
        raise ValueError(f"{len(positions)} positions but {len(yaws)} yaws")
    renderer = CellRenderer(gaussians, hierarchy, settings)
    c = len(positions)
    _, rgb, depth_out, alpha = _outputs(c, renderer.width, renderer.height, settings.background, profile,
                                        renderer.depth)
    for i in range(c):
        p = positions[i]
        renderer.render_into(float(p[0]), float(p[1]), float(p[2]), float(yaws[i]), rgb[i],
                             None if depth_out is None else depth_out[i], alpha[i], profile)
    return rgb, depth_out, alpha


class CellRenderer:
    """:func:`render_lod_cell_cpu` for one pose at a time, with what does not depend on the pose
    checked and prepared once (settings, intrinsics, background, the cell cache key's settings
    part): a flight renders 50 frames a second from one camera, and the Python around the
    compiled stages runs cache-cold after each frame's kernels, so each check, conversion and
    small array made once saves time on every frame. Images are those of
    :func:`render_lod_cell_cpu`, bit for bit: the same viewmat, cell and cut for the same pose.
    Thread-safe as the module's cell cache is (per thread); outputs are new arrays. ``cache``: a
    :class:`SharedCellCache` to keep the cells' cuts in (shared by the threads that render with
    this renderer) instead of each thread's own :data:`CELL_CACHE_SIZE` cells."""

    def __init__(self, gaussians: Gaussians, hierarchy: GaussianHierarchy, settings: CellSettings,
                 cache: SharedCellCache | None = None) -> None:
        lod_px, cell_m, cell_deg = settings.lod_px, settings.cell_m, settings.cell_deg
        near_m, far_m = settings.near_m, settings.far_m
        self.lod_px = check_lod_px(lod_px)
        self.cell_m, self.cell_deg = check_cell(cell_m, cell_deg)
        if self.lod_px <= 0.0 or self.cell_m <= 0.0:
            raise ValueError(f"render_lod_cell_cpu needs lod_px > 0 and a pose cell, got {lod_px}, {cell_m}, "
                             f"{cell_deg}")
        if not 0.0 < near_m < far_m:
            raise ValueError(f"render_lod_cell_cpu needs 0 < near_m < far_m, got near_m={near_m}, far_m={far_m}")
        _check_leaves(hierarchy, gaussians)
        self.hierarchy, self.mount, self.depth = hierarchy, settings.mount, bool(settings.depth)
        self.K = np.ascontiguousarray(settings.K, dtype=np.float64).reshape(3, 3)
        self.width, self.height = int(settings.width), int(settings.height)
        self.near_m, self.far_m = float(near_m), float(far_m)
        self.background = np.ascontiguousarray(settings.background, dtype=np.float32).reshape(3)
        self._sh_rotation = np.ascontiguousarray(gaussians.sh_rotation, dtype=np.float64)
        self.cache = cache
        self._prefix = _cell_key_prefix(hierarchy, self.cell_m, self.cell_deg, self.mount, self.K, self.width,
                                        self.height, self.lod_px, self.near_m, self.far_m)

    def viewmat(self, x: float, y: float, z: float, yaw: float) -> np.ndarray:
        """World-to-camera 4x4 of base_link at (x, y, z) (map, m) with heading ``yaw`` (rad) and
        the camera on this renderer's mount."""
        from airplay.scene.camera import map_from_base, viewmat_from_pose

        return viewmat_from_pose(map_from_base(x, y, z, yaw), self.mount)

    def render_into(self, x: float, y: float, z: float, yaw: float, rgb: np.ndarray, depth: np.ndarray | None,
                    alpha: np.ndarray, profile: dict | None = None) -> None:
        """Render the pose into ``rgb`` (H, W, 3), ``depth`` (H, W; None without depth) and
        ``alpha`` (H, W) float32; ``profile`` (keys as :func:`_outputs` sets them) gets the stage times."""
        t = time.perf_counter()
        cell = pose_cell((x, y, z), yaw, self.cell_m, self.cell_deg)
        vm = self.viewmat(x, y, z, yaw)
        arrays, rank = _cell_arrays(self.hierarchy, self._prefix, cell, self.cell_m, self.cell_deg, self.mount,
                                    self.K, self.width, self.height, self.lod_px, self.near_m, self.far_m, profile, vm,
                                    self.cache)
        if profile is not None:
            profile["cut"] += time.perf_counter() - t
            profile["cut_size"] += len(arrays[0])
        _render_one(arrays + (self._sh_rotation,), vm, self.K, self.width, self.height, self.background,
                    self.near_m, self.far_m, rgb, depth, alpha, profile, rank=rank)

    def rgb(self, position, yaw: float) -> np.ndarray:
        """(H, W, 3) float32 RGB of base_link at ``position`` (map, m) with heading ``yaw`` (rad)."""
        rgb = np.empty((self.height, self.width, 3), np.float32)
        alpha = np.empty((self.height, self.width), np.float32)
        depth = np.empty((self.height, self.width), np.float32) if self.depth else None
        self.render_into(float(position[0]), float(position[1]), float(position[2]), float(yaw), rgb, depth, alpha)
        return rgb
