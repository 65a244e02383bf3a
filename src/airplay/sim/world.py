"""Everything a scene needs for flying in it, built once: SDF, planning grid, collision, ray caster."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from airplay.render.api import FAR_PLANE_M, NEAR_PLANE_M, render, resolve_backend, rgb_to_uint8
from airplay.render.camera import map_from_base, viewmat_from_pose
from airplay.render.lod import CellRenderer, GaussianHierarchy, hierarchy_for
from airplay.render.mesh_depth import MeshRaycaster
from airplay.render.mesh_zbuffer import MeshDepthRasterizer
from airplay.scene.scene import Scene
from airplay.sim.collision import CollisionChecker
from airplay.sim.dynamics import VehicleParams, load_vehicle_params
from airplay.sim.sdf import SignedDistanceField
from airplay.tasks.navigable import NavigableGrid
from airplay.tasks.protocol import Protocol, load_protocol


@dataclass(frozen=True)
class World:
    """A scene with its derived structures (map frame, metres).

    scene: splat, mesh and spec; sdf: signed distance field (cached on disk);
    grid: the planning grid of the protocol; checker: sphere-vs-SDF collision and bounds;
    caster: Embree ray caster; depth: compiled z-buffer for mesh depth images (the same
    image as ray casting through pixel centres, several times faster); vehicle and
    protocol: the settings used; cache_dir: where the per-scene caches (SDF, level-of-detail
    hierarchy) live (None: :func:`airplay.sim.sdf.default_cache_dir`).
    """

    scene: Scene
    sdf: SignedDistanceField
    grid: NavigableGrid
    checker: CollisionChecker
    caster: MeshRaycaster
    depth: MeshDepthRasterizer
    vehicle: VehicleParams
    protocol: Protocol
    cache_dir: Path | None = None

    @property
    def name(self) -> str:
        return self.scene.name

    def lod_hierarchy(self) -> GaussianHierarchy:
        """The splat's level-of-detail hierarchy, read from the disk cache (or built) on first
        use and memoised per process: only processes that render RGB load it (tens of MB for
        a 2.6e5-Gaussian splat), not the sim, policy or evaluator nodes."""
        return hierarchy_for(self.scene.gaussians, cache_dir=self.cache_dir)

    def camera_images(self, position: np.ndarray, yaw_rad: float, backend: str = "auto", depth: bool = True,
                      max_depth_m: float = 100.0, lod_px: float | None = None) -> tuple[np.ndarray, np.ndarray | None]:
        """What the scene's camera sees from a vehicle at ``position`` (map, m) with heading ``yaw_rad``.

        The camera is gimbal-stabilised (roll and pitch of the vehicle are left out), on the
        scene's mount. Returns RGB (H, W, 3) uint8 over the scene's background, and, with
        ``depth``, the collision mesh's z-depth (H, W, 1) float32 in metres, clipped at
        ``max_depth_m`` (also where nothing is hit); None otherwise. RGB is rendered at the
        protocol's level of detail (``render: lod_px`` in protocol.yaml) unless ``lod_px`` is
        given (0 = exact). With ``render: lod_cell_m`` / ``lod_cell_deg`` set and the CPU
        backend, the cut is the pose cell's (:func:`airplay.render.lod.render_lod_cell_cpu`),
        reused while the camera stays in the cell.
        """
        spec = self.scene.spec
        cam = spec.camera.intrinsics
        lod_px = self.protocol.render_lod_px if lod_px is None else lod_px
        cell_m = self.protocol.render_lod_cell_m
        viewmat = None  # made only where needed: the cell path makes its own
        if lod_px and cell_m > 0.0 and self.protocol.render_lod_px > 0 and resolve_backend(backend) == "cpu":
            # render_lod_cell_cpu's image, by a renderer prepared once per level of detail
            rgb8 = rgb_to_uint8(self._cell_renderer(lod_px).rgb(position, yaw_rad))  # saturates, as clipping first
        else:
            viewmat = self._viewmat(position, yaw_rad)
            rgb8 = render(self.scene.gaussians, viewmat, cam.K, cam.width, cam.height, backend=backend,
                          background=spec.background_rgb, lod_px=lod_px,
                          lod=self.lod_hierarchy() if lod_px else None).rgb_uint8[0]
        if not depth:
            return rgb8, None
        viewmat = self._viewmat(position, yaw_rad) if viewmat is None else viewmat
        z = np.minimum(self.depth.depth(viewmat, cam.K, cam.width, cam.height), max_depth_m)
        return rgb8, z[..., None].astype(np.float32)

    def _cell_renderer(self, lod_px: float) -> CellRenderer:
        """The pose-cell renderer of the scene camera at ``lod_px`` (RGB only: depth images come
        from the mesh), made on first use and kept with this World."""
        renderers = self.__dict__.setdefault("_cell_renderers", {})  # not a field: replace() starts afresh
        renderer = renderers.get(lod_px)
        if renderer is None:
            spec = self.scene.spec
            cam = spec.camera.intrinsics
            renderer = renderers[lod_px] = CellRenderer(
                self.scene.gaussians, self.lod_hierarchy(), spec.camera.mount, cam.K, cam.width, cam.height,
                spec.background_rgb, NEAR_PLANE_M, FAR_PLANE_M, lod_px, self.protocol.render_lod_cell_m,
                self.protocol.render_lod_cell_deg, depth=False)
        return renderer

    def _viewmat(self, position: np.ndarray, yaw_rad: float) -> np.ndarray:
        """map -> camera_optical of the scene's camera on a vehicle at ``position`` (map, m), heading ``yaw_rad``."""
        return viewmat_from_pose(map_from_base(float(position[0]), float(position[1]), float(position[2]),
                                               float(yaw_rad)), self.scene.spec.camera.mount)

    @classmethod
    def load(cls, scene: Scene | str | Path, vehicle: VehicleParams | None = None,
             protocol: Protocol | None = None, cache_dir: str | Path | None = None) -> "World":
        """Load a scene folder (or take a loaded Scene) and build what flying needs."""
        scene = scene if isinstance(scene, Scene) else Scene.load(scene)
        vehicle = vehicle or load_vehicle_params()
        protocol = protocol or load_protocol()
        sdf = SignedDistanceField.for_scene(scene, resolution_m=protocol.task.grid_resolution_m, cache_dir=cache_dir)
        grid = NavigableGrid.for_scene(scene, sdf, protocol.task, vehicle.radius_m)
        checker = CollisionChecker(sdf, scene.spec.navigable, vehicle.radius_m)
        return cls(scene, sdf, grid, checker, MeshRaycaster(scene.mesh), MeshDepthRasterizer(scene.mesh),
                   vehicle, protocol, None if cache_dir is None else Path(cache_dir))
