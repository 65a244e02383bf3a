"""Everything a scene needs for flying in it: SDF, planning grid, collision, ray caster, each
built on first use.

:meth:`World.load` parses and validates scene.yaml (the files it names must exist) and
builds nothing else; each part (the scene's splat and mesh, the SDF, the planning grid, the
collision checker, the Embree ray caster, the z-buffer rasterizer) is read or built on first
access, once, thread-safely, and kept. So a process that never renders never reads the
splat, and one that never plans never builds the grid or the BVH. The parts are built from
the scene, vehicle, protocol and cache folder given to :meth:`World.load`; a World made from
another by ``dataclasses.replace`` shares them (built or not), as it shared them when they
were plain fields: ``replace(world, protocol=...)`` does not rebuild the SDF or the grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from airplay.render.api import FAR_PLANE_M, NEAR_PLANE_M, render, resolve_backend, rgb_to_uint8
from airplay.render.lod import CellRenderer, CellSettings, GaussianHierarchy, hierarchy_for
from airplay.render.mesh_zbuffer import MeshDepthRasterizer
from airplay.scene.camera import map_from_base, viewmat_from_pose
from airplay.scene.lazy import Lazy
from airplay.scene.mesh_depth import MeshRaycaster
from airplay.scene.scene import Scene
from airplay.sim.collision import CollisionChecker
from airplay.sim.dynamics import VehicleParams, load_vehicle_params
from airplay.sim.estimate_error import EstimateErrorModel
from airplay.sim.sdf import SignedDistanceField
from airplay.tasks.navigable import NavigableGrid
from airplay.tasks.protocol import Protocol, load_protocol

PARTS = ("sdf", "grid", "checker", "caster", "depth")
"""The World's derived parts, each built on first access."""


class WorldParts:
    """SDF, planning grid, collision checker, ray caster and z-buffer of one scene, each a
    :class:`~airplay.scene.lazy.Lazy` built on first use from the arguments given here.

    sdf: over the navigable volume at the protocol's grid resolution (disk-cached under
    ``cache_dir``); grid: the protocol's planning grid for the vehicle's radius; checker:
    sphere-vs-SDF collision and bounds; caster and depth: over the collision mesh.
    """

    def __init__(self, scene: Scene, vehicle: VehicleParams, protocol: Protocol, cache_dir: Path | None) -> None:
        self.sdf: Lazy[SignedDistanceField] = Lazy(lambda: SignedDistanceField.for_scene(
            scene, resolution_m=protocol.task.grid_resolution_m, cache_dir=cache_dir))
        self.grid: Lazy[NavigableGrid] = Lazy(lambda: NavigableGrid.for_scene(
            scene, self.sdf.get(), protocol.task, vehicle.radius_m))
        self.checker: Lazy[CollisionChecker] = Lazy(lambda: CollisionChecker(
            self.sdf.get(), scene.spec.navigable, vehicle.radius_m))
        self.caster: Lazy[MeshRaycaster] = Lazy(lambda: MeshRaycaster(scene.mesh))
        self.depth: Lazy[MeshDepthRasterizer] = Lazy(lambda: MeshDepthRasterizer(scene.mesh))


@dataclass(frozen=True)
class World:
    """A scene with its derived structures (map frame, metres).

    scene: splat, mesh and spec; sdf: signed distance field (cached on disk);
    grid: the planning grid of the protocol; checker: sphere-vs-SDF collision and bounds;
    caster: Embree ray caster; depth: compiled z-buffer for mesh depth images (the same
    image as ray casting through pixel centres, several times faster); vehicle and
    protocol: the settings used; estimate_error: the vehicle's position-estimate error shown to
    policies (None: none; :mod:`airplay.sim.estimate_error`); cache_dir: where the per-scene caches (SDF, level-of-detail
    hierarchy) live (None: :func:`airplay.config.cache_dir`).

    sdf, grid, checker, caster and depth are properties: each is built on first access
    (see the module docstring) by the :class:`WorldParts` this World shares with every World
    ``replace()``d from it.
    """

    scene: Scene
    vehicle: VehicleParams
    protocol: Protocol
    cache_dir: Path | None = None
    estimate_error: EstimateErrorModel | None = None
    _parts: WorldParts | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._parts is None:  # made directly, not by load() or replace()
            object.__setattr__(self, "_parts", WorldParts(self.scene, self.vehicle, self.protocol, self.cache_dir))

    def __deepcopy__(self, memo) -> "World":
        """The World itself: it is immutable, and its parts (built once, shared) hold locks.
        (Gymnasium deep-copies an environment's keyword arguments, a ``scene=World`` among them.)"""
        return self

    @property
    def sdf(self) -> SignedDistanceField:
        """Signed distance field of the collision mesh (m), from the disk cache or built on first access."""
        return self._parts.sdf.get()

    @property
    def grid(self) -> NavigableGrid:
        """The protocol's planning grid, built on first access (needs the SDF)."""
        return self._parts.grid.get()

    @property
    def checker(self) -> CollisionChecker:
        """Sphere-vs-SDF collision and region bounds for the vehicle, built on first access."""
        return self._parts.checker.get()

    @property
    def caster(self) -> MeshRaycaster:
        """Embree ray caster over the collision mesh (its BVH built on first access)."""
        return self._parts.caster.get()

    @property
    def depth(self) -> MeshDepthRasterizer:
        """Compiled z-buffer rasterizer of the collision mesh, built on first access."""
        return self._parts.depth.get()

    def built_parts(self) -> frozenset[str]:
        """Which parts exist so far: any of "gaussians" and "mesh" (the scene's files read) and
        the names in :data:`PARTS`."""
        built = {name for name in PARTS if getattr(self._parts, name).built}
        return frozenset(built | self.scene.loaded_parts())

    @property
    def name(self) -> str:
        return self.scene.name

    def lod_hierarchy(self) -> GaussianHierarchy:
        """The splat's level-of-detail hierarchy, read from the disk cache (or built) on first
        use and memoised per process: only processes that render RGB load it (tens of MB for
        a 2.6e5-Gaussian splat), not the sim, policy or evaluator nodes."""
        return hierarchy_for(self.scene.gaussians, cache_dir=self.cache_dir)

    def camera_images(self, position: np.ndarray, yaw_rad: float, backend: str = "auto", depth: bool = True,
                      max_depth_m: float = 100.0, lod_px: float | None = None,
                      rgb: bool = True) -> tuple[np.ndarray | None, np.ndarray | None]:
        """What the scene's camera sees from a vehicle at ``position`` (map, m) with heading ``yaw_rad``.

        The camera is gimbal-stabilised (roll and pitch of the vehicle are left out), on the
        scene's mount. Returns RGB (H, W, 3) uint8 over the scene's background, and, with
        ``depth``, the collision mesh's z-depth (H, W, 1) float32 in metres, clipped at
        ``max_depth_m`` (also where nothing is hit); None otherwise. RGB is rendered at the
        protocol's level of detail (``render: lod_px`` in protocol.yaml) unless ``lod_px`` is
        given (0 = exact). With ``render: lod_cell_m`` / ``lod_cell_deg`` set and the CPU
        backend, the cut is the pose cell's (:func:`airplay.render.lod.render_lod_cell_cpu`),
        reused while the camera stays in the cell. ``rgb`` False: no RGB image (None in its place).
        """
        spec = self.scene.spec
        cam = spec.camera.intrinsics
        lod_px = self.protocol.render_lod_px if lod_px is None else lod_px
        cell_m = self.protocol.render_lod_cell_m
        viewmat = None  # made only where needed: the cell path makes its own
        if not rgb:
            rgb8 = None
        elif lod_px and cell_m > 0.0 and self.protocol.render_lod_px > 0 and resolve_backend(backend) == "cpu":
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

    def with_camera_size(self, width: int, height: int) -> "World":
        """This World with its scene camera rendering ``width`` x ``height`` pixels, the same field
        of view (intrinsics scaled); the SDF, grid and other parts are shared, not rebuilt."""
        for name, value in (("width", width), ("height", height)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"image {name} must be an integer >= 1, got {value!r}")
        spec = self.scene.spec
        cam = spec.camera.intrinsics
        if (cam.width, cam.height) == (int(width), int(height)):
            return self
        camera = replace(spec.camera, intrinsics=cam.scaled(int(width), int(height)))
        return replace(self, scene=replace(self.scene, spec=replace(spec, camera=camera)))

    def _cell_renderer(self, lod_px: float) -> CellRenderer:
        """The pose-cell renderer of the scene camera at ``lod_px`` (RGB only: depth images come
        from the mesh), made on first use and kept with this World."""
        renderers = self.__dict__.setdefault("_cell_renderers", {})  # not a field: replace() starts afresh
        renderer = renderers.get(lod_px)
        if renderer is None:
            spec = self.scene.spec
            cam = spec.camera.intrinsics
            renderer = renderers[lod_px] = CellRenderer(self.scene.gaussians, self.lod_hierarchy(), CellSettings(
                mount=spec.camera.mount, K=cam.K, width=cam.width, height=cam.height, background=spec.background_rgb,
                near_m=NEAR_PLANE_M, far_m=FAR_PLANE_M, lod_px=lod_px, cell_m=self.protocol.render_lod_cell_m,
                cell_deg=self.protocol.render_lod_cell_deg, depth=False))
        return renderer

    def _viewmat(self, position: np.ndarray, yaw_rad: float) -> np.ndarray:
        """map -> camera_optical of the scene's camera on a vehicle at ``position`` (map, m), heading ``yaw_rad``."""
        return viewmat_from_pose(map_from_base(float(position[0]), float(position[1]), float(position[2]),
                                               float(yaw_rad)), self.scene.spec.camera.mount)

    @classmethod
    def load(cls, scene: Scene | str | Path, vehicle: VehicleParams | None = None,
             protocol: Protocol | None = None, cache_dir: str | Path | None = None,
             estimate_error: EstimateErrorModel | None = None) -> "World":
        """A scene folder (opened: scene.yaml parsed and validated, its files found, nothing else
        read; see :meth:`Scene.open`) or a Scene, with what flying needs built on first use.
        vehicle and protocol default to config/vehicle.yaml and protocol.yaml; ``estimate_error``
        (:mod:`airplay.sim.estimate_error`, None: the policy sees the true position) is the
        vehicle's position-estimate error that environments on this World show the policy."""
        scene = scene if isinstance(scene, Scene) else Scene.open(scene)
        return cls(scene, vehicle or load_vehicle_params(), protocol or load_protocol(),
                   None if cache_dir is None else Path(cache_dir), estimate_error)
