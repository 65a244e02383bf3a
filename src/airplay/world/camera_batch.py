"""Many vehicles' camera images in one call: :class:`CameraBatch`.

Each image is :meth:`airplay.world.World.camera_images`'s for the same pose, bit for bit (the
same renderer and settings); what changes is how a batch is run. The cameras are handed out
one at a time to ``threads`` threads (the calling thread and ``threads - 1`` workers), each
running the compiled stages on one numba thread (the kernels release the GIL), so a batch keeps
every core busy without numba's parallel regions waiting on each other, and a thread that loses
its core to another process holds up only the camera it is on. With the protocol's pose cells
(CPU backend) the cells' level-of-detail cuts are kept in one :class:`SharedCellCache` for the
batch, big enough for every camera's cell and its neighbours: a vehicle's cut is made once
per cell, whichever thread renders it next, instead of once per frame when many cameras
outnumber a thread's own few cached cells.

Images do not depend on the number of threads or on the batch (a cell's cut is a function of
the cell alone, and each image of its pose alone).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import get_num_threads, set_num_threads

from airplay.render.api import NEAR_PLANE_M, FAR_PLANE_M, resolve_backend, rgb_to_uint8
from airplay.render.lod import CellRenderer, CellSettings, SharedCellCache

CELLS_PER_CAMERA = 4
"""Cells of the shared cache per camera (each vehicle's current cell and the last few it left)."""


def default_threads() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _one_numba_thread() -> None:
    set_num_threads(1)  # this thread's parallel regions run on it alone


class CameraBatch:
    """Renders the scene camera of ``world`` for N vehicle poses per call.

    Args:
        world: the :class:`~airplay.world.World` (its scene camera: size, intrinsics, mount).
        n: cameras per batch (sizes the shared cell cache).
        backend: "auto", "cpu" or "gsplat" (gsplat: the batch is rendered one view after
            another on the GPU, in the calling thread).
        threads: render threads, the calling thread among them (default: the CPUs this process
            may use); 1 renders in the calling thread, on one numba thread.
        max_depth_m: depth images are clipped here (also where nothing is hit).
    """

    def __init__(self, world, n: int, backend: str = "cpu", threads: int | None = None,
                 max_depth_m: float = 100.0) -> None:
        threads = default_threads() if threads is None else threads
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        self.world, self.n, self.threads = world, int(n), int(threads)
        self.backend = resolve_backend(backend)
        self.max_depth_m = float(max_depth_m)
        spec = world.scene.spec
        cam = spec.camera.intrinsics
        self.width, self.height, self.K = cam.width, cam.height, cam.K
        protocol = world.protocol
        self._cells = None
        if self.backend == "cpu" and protocol.render_lod_px > 0 and protocol.render_lod_cell_m > 0.0:
            self.cache = SharedCellCache(max(16, CELLS_PER_CAMERA * self.n))
            self._cells = CellRenderer(world.scene.gaussians, world.lod_hierarchy(), CellSettings(
                mount=spec.camera.mount, K=cam.K, width=cam.width, height=cam.height, background=spec.background_rgb,
                near_m=NEAR_PLANE_M, far_m=FAR_PLANE_M, lod_px=protocol.render_lod_px,
                cell_m=protocol.render_lod_cell_m, cell_deg=protocol.render_lod_cell_deg, depth=False),
                cache=self.cache)
        self._pool = None if self.backend != "cpu" else ThreadPoolExecutor(
            max(1, self.threads - 1), thread_name_prefix="airplay-camera", initializer=_one_numba_thread)
        self._lock = threading.Lock()
        self._scratch = threading.local()  # each render thread's float32 frame buffers

    def close(self) -> None:
        """Stop the worker threads (the batch cannot render after)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def render(self, positions: np.ndarray, yaws: np.ndarray, rgb: np.ndarray | None, depth: np.ndarray | None,
               which: np.ndarray | None = None) -> None:
        """Render vehicles ``which`` (indices; default all) at ``positions`` (N, 3) map m and
        ``yaws`` (N,) rad into ``rgb`` (N, H, W, 3) uint8 and ``depth`` (N, H, W, 1) float32
        (either None: not rendered), rows ``which``."""
        idx = np.arange(len(positions)) if which is None else np.asarray(which, dtype=np.int64)
        if len(idx) == 0 or (rgb is None and depth is None):
            return
        pos = np.asarray(positions, dtype=np.float64)
        yaw = np.asarray(yaws, dtype=np.float64)

        if self._pool is None:
            for i in idx.tolist():
                self._one(pos[i], float(yaw[i]), rgb, depth, i)
            return
        todo = iter(idx.tolist())  # handed out one camera at a time (next() holds the GIL): a thread
        # that loses its core to another process holds up no camera but the one it is on

        def work() -> None:
            for i in todo:
                self._one(pos[i], float(yaw[i]), rgb, depth, i)

        with self._lock:  # one batch at a time; the calling thread renders too, on one numba thread
            futures = [self._pool.submit(work) for _ in range(min(self.threads, len(idx)) - 1)]
            old = get_num_threads()
            set_num_threads(1)
            try:
                work()
            finally:
                set_num_threads(old)
            for f in futures:
                f.result()

    def _one(self, position: np.ndarray, yaw: float, rgb, depth, i: int) -> None:
        world = self.world
        if rgb is not None:
            if self._cells is not None:  # into this thread's buffers, rounded straight into row i
                bufs = getattr(self._scratch, "bufs", None)
                if bufs is None:
                    bufs = self._scratch.bufs = (np.empty((self.height, self.width, 3), np.float32),
                                                 np.empty((self.height, self.width), np.float32))
                self._cells.render_into(float(position[0]), float(position[1]), float(position[2]), yaw, bufs[0],
                                        None, bufs[1])
                rgb_to_uint8(bufs[0], out=rgb[i])
            else:
                rgb[i] = world.camera_images(position, yaw, self.backend, depth=False)[0]
        if depth is not None:
            viewmat = world._viewmat(position, yaw)
            z = world.depth.depth(viewmat, self.K, self.width, self.height)
            depth[i, :, :, 0] = np.minimum(z, self.max_depth_m)
