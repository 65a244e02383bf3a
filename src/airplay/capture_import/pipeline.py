"""``airplay scene import``: a bare 3DGS capture in, an ordinary scene folder out.

Stages (each timed; the long ones show progress):

1. read   - any supported format (:mod:`airplay.scene.capture_formats`), values checked; with
            ``cameras``, the capture's own cameras too (:mod:`airplay.scene.capture_cameras`),
            checked to lie in the splat's frame;
2. clean  - floaters and far background marked (:mod:`.clean`); they stay out of the
            collision geometry, and out of the written splat with ``drop_from_splat``;
3. frame  - up axis, floor at z = 0, yaw, metric scale (:mod:`.frame`; the cameras' up and
            height above the floor when given);
4. views  - camera points in free space, six views each (:mod:`.views`), and up to
            ``max_capture_views`` of the capture's cameras, one 90 degree view each along
            their own optical axes;
5. depth  - depth and alpha rendered with airplay's CPU renderer (or gsplat where present);
6. fuse   - TSDF fusion (:mod:`.tsdf`); never-observed space counts as occupied;
7. mesh   - marching cubes, cut for the SDF's parity rule, simplified to a budget (:mod:`.mesh`);
8. region - navigable polygon and height band from the fused field (:mod:`.region`);
9. write  - splat.ply (source frame; the transform is in scene.yaml), collision.ply (map),
            scene.yaml, import/report.html + PNGs + import.json; the folder is validated like
            any scene (``Scene.load``) and only then renamed into place.

Nothing half-written: everything goes to a temporary folder beside the output and is renamed
at the end; an error removes it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError

CAMERA_ROUNDS = 3
"""Camera placement rounds: the first from the splat's free space, the later ones from the space
the fusion so far observed free (see :func:`airplay.capture_import.views.frontier_points`)."""
DEFAULT_CAMERA_HEIGHT_M = 1.5
"""Assumed height of the capture's cameras above the floor (a hand-held capture), m; used for the
scale only when neither ``scale`` nor ``known_distance`` is given."""
CAMERAS_INSIDE_MIN_SHARE = 0.5
"""At least this share of the camera centres must lie in the splat's grown box (else the cameras
are taken to be in another frame)."""
MIN_SCENE_WIDTH_M = 1.0
MAX_SCENE_WIDTH_M = 1000.0


@dataclass(frozen=True)
class ImportOptions:
    """What ``airplay scene import`` takes; units in the names, map frame unless said."""

    name: str | None = None
    category: str = "urban"
    split: str = "seen"
    scale: float | None = None
    known_distance: tuple[float, float, float, float, float, float, float] | None = None
    align_yaw: bool = True
    voxel_m: float = 0.1
    max_voxels: int = 12_000_000
    camera_points: int = 32
    view_px: int = 128
    max_faces: int = 200_000
    clearance_m: float = 0.5
    max_height_m: float = 4.0
    drop_from_splat: bool = False
    backend: str = "auto"
    seed: int = 0
    progress: bool = True
    cameras: str | Path | None = None
    """A COLMAP sparse model folder or a transforms.json with the capture's cameras."""
    cameras_frame: str = "capture"
    """"capture": the poses are in the splat's frame; "colmap": undo a transforms.json's
    ``applied_transform`` (a splat trained on the COLMAP model that nerfstudio converted)."""
    cameras_transform: str | Path | None = None
    """nerfstudio's dataparser_transforms.json, for a splat exported by splatfacto."""
    camera_height_m: float = DEFAULT_CAMERA_HEIGHT_M
    up_from: str = "auto"
    max_capture_views: int = 48
    core_from_cameras: float | None = None
    """Far background = outside this many times the cameras' 95th-percentile distance from their
    median (:func:`airplay.capture_import.clean.camera_core`); None: from the splat's size."""


@dataclass
class ImportResult:
    """Figures of one import (what import.json holds)."""

    out_dir: Path
    figures: dict = field(default_factory=dict)
    frame: object = None
    """The :class:`~airplay.capture_import.frame.FrameFit` (source -> map)."""
    volume: object = None
    """The fused :class:`~airplay.capture_import.tsdf.TsdfVolume` (map frame)."""


class _Stages:
    def __init__(self, progress: bool):
        self.times: dict[str, float] = {}
        self.progress = progress
        self._t = time.perf_counter()

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.times[name] = round(now - self._t, 3)
        self._t = now
        if self.progress:
            print(f"  {name:<7} {self.times[name]:7.1f} s", file=sys.stderr, flush=True)


def _normals(g) -> np.ndarray:
    """(N, 3) the shortest principal axis of each Gaussian, in the splat's frame."""
    from airplay.scene.gaussians import quat_wxyz_to_matrix

    rot = quat_wxyz_to_matrix(g.quats_wxyz)
    axis = np.argmin(g.scales, axis=1)
    return rot[np.arange(len(g)), :, axis]


def _spacing(means: np.ndarray) -> float:
    """Median distance from a Gaussian to its nearest neighbour, m."""
    from scipy.spatial import cKDTree

    d, _ = cKDTree(means).query(means[:: max(1, len(means) // 20000)], k=2)
    return float(np.median(d[:, 1]))


def _check_width(path: Path, width_m: float, source: str) -> None:
    if not MIN_SCENE_WIDTH_M <= width_m <= MAX_SCENE_WIDTH_M:
        raise SceneError(path, f"with scale from {source} the capture is {width_m:.4g} m across, outside "
                               f"{MIN_SCENE_WIDTH_M:g}..{MAX_SCENE_WIDTH_M:g} m; check --scale / --known-distance "
                               "(/ --camera-height with --cameras)",
                         "scale")


def _check_cameras_frame(cams, means: np.ndarray) -> None:
    """SceneError naming the cameras file when most camera centres lie outside the splat's box
    (2nd-98th percentile per axis, grown by half its size on each side)."""
    lo, hi = np.percentile(means, 2, axis=0), np.percentile(means, 98, axis=0)
    grow = 0.5 * (hi - lo)
    inside = np.all((cams.positions >= lo - grow) & (cams.positions <= hi + grow), axis=1)
    if inside.mean() < CAMERAS_INSIDE_MIN_SHARE:
        raise SceneError(cams.path, f"{int((~inside).sum())} of {len(cams)} camera centres lie outside the capture "
                                    f"(its box {np.round(lo, 3).tolist()}..{np.round(hi, 3).tolist()}, grown by half): "
                                    "the cameras are not in the splat's frame. A splat exported by nerfstudio: give "
                                    "--cameras-transform dataparser_transforms.json; a splat trained on the COLMAP "
                                    "model with nerfstudio's transforms.json: --cameras-frame colmap", "frame")


def _check_out(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise SceneError(out_dir, "output exists and is not an empty folder; choose a new --out")


def import_capture(capture_path: str | Path, out_dir: str | Path, options: ImportOptions = ImportOptions()) -> ImportResult:
    """Import ``capture_path`` into the scene folder ``out_dir`` (see the module docstring).

    Raises :class:`SceneError` naming the file (and field) for bad input: unreadable or
    truncated files, NaN/inf, bad scales, no ground, an absurd scale, no free space.
    """
    capture_path, out_dir = Path(capture_path), Path(out_dir)
    _check_out(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.import-", dir=out_dir.parent))
    try:
        result = _run(capture_path, tmp, out_dir, options)
        os.chmod(tmp, 0o755)
        _check_out(out_dir)
        if out_dir.exists():
            out_dir.rmdir()
        os.replace(tmp, out_dir)
        result.out_dir = out_dir
        return result
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _run(capture_path: Path, tmp: Path, out_dir: Path, opt: ImportOptions) -> ImportResult:
    from tqdm import tqdm

    from airplay.capture_import.clean import camera_core, clean_capture
    from airplay.capture_import.frame import UP_FROM, CameraHeightError, NoGroundError, fit_frame
    from airplay.capture_import.mesh import collision_mesh
    from airplay.capture_import.region import NoFreeSpaceError, derive_region
    from airplay.capture_import.tsdf import TsdfVolume
    from airplay.capture_import.views import camera_points, cube_viewmats, farthest_indices, frontier_points
    from airplay.render.api import render
    from airplay.scene.camera import CameraMount, PinholeCamera
    from airplay.scene.capture_formats import read_capture
    from airplay.scene.ply_io import write_gaussians_ply
    from airplay.scene.spec import CATEGORIES, Alignment, CameraSpec, SceneSpec, write_scene_yaml

    if opt.category not in CATEGORIES:
        raise SceneError(capture_path, f"--category must be one of {', '.join(CATEGORIES)}, got {opt.category!r}")
    if opt.up_from not in UP_FROM:
        raise SceneError(capture_path, f"--up-from must be one of {', '.join(UP_FROM)}, got {opt.up_from!r}", "up_from")
    if opt.up_from == "cameras" and opt.cameras is None:
        raise SceneError(capture_path, "--up-from cameras needs --cameras", "up_from")
    stages = _Stages(opt.progress)
    if opt.progress:
        print(f"importing {capture_path}", file=sys.stderr, flush=True)
    capture = read_capture(capture_path)
    g_src = capture.gaussians
    cams_src = None
    if opt.cameras is not None:
        from airplay.scene.capture_cameras import read_cameras

        if opt.cameras_frame not in ("capture", "colmap"):
            raise SceneError(opt.cameras, f"--cameras-frame must be capture or colmap, got {opt.cameras_frame!r}")
        if not opt.camera_height_m > 0:
            raise SceneError(opt.cameras, f"--camera-height must be positive, got {opt.camera_height_m}", "camera_height")
        cams_src = read_cameras(opt.cameras, undo_applied_transform=opt.cameras_frame == "colmap",
                                dataparser_transforms=opt.cameras_transform)
        _check_cameras_frame(cams_src, g_src.means.astype(np.float64))
    stages.done("read")

    core = None
    if opt.core_from_cameras is not None:
        if cams_src is None:
            raise SceneError(capture_path, "--core-from-cameras needs --cameras", "core_from_cameras")
        core = camera_core(cams_src.positions, opt.core_from_cameras)
    cleaned = clean_capture(g_src, core=core)
    kept = g_src.subset(cleaned.keep)
    if len(kept) < 100:
        raise SceneError(capture_path, f"only {len(kept)} Gaussians remain after cleaning "
                                       f"({cleaned.counts}); nothing to build collision geometry from")
    stages.done("clean")

    known = None
    if opt.known_distance is not None:
        kd = np.asarray(opt.known_distance, float)
        if kd[6] <= 0:
            raise SceneError(capture_path, f"--known-distance: METRES must be positive, got {kd[6]}", "known_distance")
        known = (kd[:3], kd[3:6], float(kd[6]))
    if opt.scale is not None and not opt.scale > 0:
        raise SceneError(capture_path, f"--scale must be positive, got {opt.scale}", "scale")
    try:
        frame = fit_frame(kept.means.astype(np.float64), kept.opacities, _normals(kept), seed=opt.seed,
                          scale=opt.scale, known_distance=known, align_yaw=opt.align_yaw,
                          camera_positions=None if cams_src is None else cams_src.positions,
                          camera_ups=None if cams_src is None else cams_src.ups,
                          camera_height_m=opt.camera_height_m, up_from=opt.up_from)
    except NoGroundError as err:
        raise SceneError(capture_path, str(err), "ground") from None
    except CameraHeightError as err:
        raise SceneError(cams_src.path, str(err), "camera height") from None
    except ValueError as err:
        raise SceneError(capture_path, str(err), "scale") from None
    g_map = kept.transformed(frame.scale, frame.rotation, frame.translation)
    lo_xy = np.percentile(g_map.means[:, :2], 1, axis=0)
    hi_xy = np.percentile(g_map.means[:, :2], 99, axis=0)
    width = float(np.max(hi_xy - lo_xy))
    _check_width(capture_path, width, frame.scale_source)
    stages.done("frame")

    top = float(min(np.percentile(g_map.means[:, 2], 99.5) + 0.5, 30.0))
    top = max(top, opt.max_height_m * 0.5)
    lower = np.array([lo_xy[0] - 0.5, lo_xy[1] - 0.5, -0.5])
    upper = np.array([hi_xy[0] + 0.5, hi_xy[1] + 0.5, top])
    voxel = max(opt.voxel_m, float((np.prod(upper - lower) / opt.max_voxels) ** (1 / 3)))
    band = (0.3, min(top - 0.3, opt.max_height_m + 1.0))
    clearance = max(0.3, 2 * voxel)
    later = opt.camera_points // CAMERA_ROUNDS
    per_round = [opt.camera_points - (CAMERA_ROUNDS - 1) * later] + [later] * (CAMERA_ROUNDS - 1)
    cams = camera_points(g_map.means, g_map.opacities, lower, upper, band, per_round[0], clearance_m=clearance,
                         spacing_m=_spacing(g_map.means), seed=opt.seed)
    cams_map = None if cams_src is None else cams_src.transformed(frame.scale, frame.rotation, frame.translation)
    capture_views = np.zeros((0, 4, 4))
    if cams_map is not None and opt.max_capture_views > 0:
        # spread over position and viewing direction (a direction counts like a 2 m step)
        key = np.hstack([cams_map.positions, 2.0 * cams_map.forwards])
        chosen = farthest_indices(key, opt.max_capture_views, seed=opt.seed)
        capture_views = cams_map.viewmats()[chosen]
    if len(cams) == 0 and len(capture_views) == 0:
        raise SceneError(capture_path, "no free space above the ground to place cameras in", "ground")
    stages.done("views")

    cam = PinholeCamera.from_fov(opt.view_px, opt.view_px, 90.0)
    vol = TsdfVolume.empty(lower, upper, voxel)
    max_range = float(np.linalg.norm(upper - lower))
    bar = tqdm(total=len(capture_views) + 6 * opt.camera_points, desc="depth+fuse", unit="view",
               disable=not opt.progress, file=sys.stderr)

    def fuse(viewmats: np.ndarray) -> None:
        for i in range(0, len(viewmats), 6):
            out = render(g_map, viewmats[i:i + 6], cam.K, cam.width, cam.height, backend=opt.backend)
            for j in range(len(out.depth)):
                vol.integrate(viewmats[i + j], cam.K, out.depth[j], out.alpha[j], max_range_m=max_range)
            bar.update(len(out.depth))

    # The capture's own cameras first: what the splat was fitted to see. The free-space rounds
    # are not steered away from them: a hand-held capture stays low and near the middle, and
    # cube maps pushed to the edges left the upper flight band unobserved (urban bench: 83 %
    # collision agreement instead of 92 %).
    fuse(capture_views)
    new = cams
    for r in range(CAMERA_ROUNDS):
        if r > 0:  # later rounds: into the free space the earlier ones found, away from them
            new = frontier_points(vol.field(), vol.origin_m, vol.voxel_m, band, cams,
                                  per_round[r], clearance_m=clearance, seed=opt.seed + r, centre_means=g_map.means)
            cams = np.vstack([cams, new])
        fuse(cube_viewmats(new))
    bar.close()
    stages.done("fuse")

    fieldv = vol.field()
    try:
        region = derive_region(fieldv, vol.origin_m, vol.voxel_m, clearance_m=opt.clearance_m,
                               max_height_m=opt.max_height_m)
    except NoFreeSpaceError as err:
        raise SceneError(capture_path, str(err), "navigable") from None
    stages.done("region")
    cut_z = 0.5 * (region.z_min + region.z_max)
    mesh = collision_mesh(fieldv, vol.origin_m, vol.voxel_m, cut_z, opt.max_faces)
    stages.done("mesh")

    name = opt.name or "".join(c if c.isalnum() or c in "_-." else "_" for c in capture_path.stem)
    keep_in_splat = cleaned.keep if opt.drop_from_splat else np.ones(len(g_src), bool)
    splat_note = "dropped Gaussians removed from the splat too" if opt.drop_from_splat else "splat kept whole"
    lo_m, hi_m = mesh.bounds
    means_map = frame.apply(g_src.means)
    grow = 1.0 + 0.1 * (hi_m - lo_m)
    inside = np.all((means_map >= lo_m - grow) & (means_map <= hi_m + grow), axis=1)
    if not opt.drop_from_splat and inside.mean() < 0.6:
        keep_in_splat = inside
        splat_note = (f"{int((~inside).sum())} Gaussians far outside the collision mesh removed from the splat "
                      "(they would fail the splat/mesh overlap check)")
    write_gaussians_ply(tmp / "splat.ply", g_src.subset(keep_in_splat))
    from trimesh.exchange.ply import export_ply

    (tmp / "collision.ply").write_bytes(export_ply(mesh, encoding="binary"))
    spec = SceneSpec(
        root=tmp, name=name, category=opt.category, split=opt.split,
        splat_file=tmp / "splat.ply",
        splat_alignment=Alignment("z_up", frame.scale, frame.rotation, frame.translation),
        collision_file=tmp / "collision.ply", collision_alignment=Alignment(),
        navigable=region,
        camera=CameraSpec(PinholeCamera.from_fov(224, 224, 90.0), CameraMount((0.1, 0.0, 0.0), 0.0)),
        background_rgb=(0.5, 0.5, 0.5),
    )
    write_scene_yaml(tmp / "scene.yaml", spec)
    stages.done("write")

    figures = {
        "capture": str(capture_path), "format": capture.format, "gaussians": len(g_src),
        "kept_for_collision": int(cleaned.keep.sum()), "dropped": cleaned.counts, "splat": splat_note,
        "splat_gaussians_written": int(keep_in_splat.sum()),
        "up_axis_source": [round(float(v), 6) for v in frame.up_src], "ground_share": round(frame.ground_share, 4),
        "yaw_deg": round(frame.yaw_deg, 3), "scale": round(frame.scale, 6), "scale_source": frame.scale_source,
        "rotation": np.round(frame.rotation, 6).tolist(), "translation_m": np.round(frame.translation, 6).tolist(),
        "width_m": round(width, 3), "volume_lower_m": lower.round(3).tolist(), "volume_upper_m": upper.round(3).tolist(),
        "voxel_m": round(voxel, 4), "camera_points": len(cams), "free_space_views": 6 * len(cams),
        "capture_views": len(capture_views), "views": 6 * len(cams) + len(capture_views),
        "observed_fraction": round(vol.observed_fraction(), 4),
        "mesh_vertices": len(mesh.vertices), "mesh_faces": len(mesh.faces),
        "mesh_watertight": bool(mesh.is_watertight),
        "navigable_area_m2": round(region.area_m2, 2), "z_band_m": [region.z_min, region.z_max],
        "up_axis_from": frame.up_from,
        "notes": list(frame.notes),
    }
    if cams_map is not None:
        figures["cameras"] = {"file": str(cams_src.path), "format": cams_src.format, "count": len(cams_src),
                              "frame": opt.cameras_frame, "transform": None if opt.cameras_transform is None
                              else str(opt.cameras_transform)}
        figures["cameras_up_vs_ground_deg"] = (None if frame.camera_up_angle_deg is None
                                               else round(frame.camera_up_angle_deg, 3))
        figures["camera_height_units"] = round(frame.camera_height_src, 6)
        figures["camera_height_m"] = round(frame.scale * frame.camera_height_src, 4)
        if core is not None:
            figures["core_from_cameras"] = {"centre": np.round(core[0], 6).tolist(), "radius": round(core[1], 6)}
        figures["notes"] += list(cams_src.notes)
    from airplay.capture_import.report import write_report
    from airplay.scene.scene import Scene

    try:
        Scene.load(tmp)  # the folder must load like any scene before it is published
    except SceneError as err:
        raise SceneError(capture_path, f"the derived scene does not validate: {err}") from None
    stages.done("check")
    figures["stage_s"] = dict(stages.times)
    write_report(tmp / "import", figures, g_map, fieldv, vol.origin_m, vol.voxel_m, region, mesh, cams,
                 capture_cams=None if cams_map is None else cams_map.positions)
    stages.done("report")
    figures["stage_s"] = dict(stages.times)
    figures["total_s"] = round(sum(stages.times.values()), 2)
    (tmp / "import" / "import.json").write_text(json.dumps(figures, indent=1) + "\n")
    return ImportResult(out_dir, figures, frame, vol)
