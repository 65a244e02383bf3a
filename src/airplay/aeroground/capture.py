"""Paired capture: observation groups of aerial and ground views with their ground truth.

For each scene and group index g, everything is drawn from
``np.random.default_rng([seed, crc32(scene name), g])`` so a group does not depend on the
others (resuming gives the same bytes). A group holds:

* a ground agent pose on walkable ground (:mod:`.ground`) and, where the way is free, a
  straight path of :data:`PATH_STEPS` steps along its heading (``path-0`` is the pose itself);
* ground views (:mod:`.cameras`): ``ground`` (forward), ``ground-left`` / ``ground-right``
  (turned +/-90 deg), ``ground-back`` (180 deg), ``path-1`` .. along the path;
* aerial views at two altitudes each ``nadir`` (above a point near the agent) and ``oblique``
  (looking at the agent from a random heading): outdoors :data:`OUTDOOR_ALTITUDES_M` above
  the ground, under a ceiling :data:`INDOOR_ALTITUDE_FRACTIONS` of its height; a view whose
  camera would sit inside a solid is left out;
* per view the rendered RGB (``<view>.png``, same renderer as the rest of airplay) and per
  instance the visible pixel count and boxes (:func:`.instances.view_boxes`);
* walkable points near the agent (for localisation distractors).

Layout: ``OUT/capture.json`` (settings), ``OUT/<scene>/instances.json``,
``OUT/<scene>/<gggg>/group.json`` + PNGs. ``group.json`` is written last: a group with it is
done, and a rerun with the same settings skips it (``--resume`` semantics are the default).
"""

from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import numpy as np

from airplay.aeroground.cameras import View, aerial_camera, aerial_view, ground_camera, ground_view
from airplay.aeroground.ground import GroundPose, GroundProbe
from airplay.aeroground.instances import face_owners, instance_mask, scene_instances, view_boxes
from airplay.scene.camera import PinholeCamera

CAPTURE_VERSION = 1
PATH_STEPS = 2
OUTDOOR_ALTITUDES_M = (15.0, 30.0)
INDOOR_ALTITUDE_FRACTIONS = (0.55, 0.8)
OUTDOOR_PATH_STEP_M = 3.0
INDOOR_PATH_STEP_M = 1.5
NEAR_WALKABLE_POINTS = 12
GROUND_TURNS = {"ground": 0.0, "ground-left": 90.0, "ground-right": -90.0, "ground-back": 180.0}


class CaptureError(ValueError):
    """Capture settings or output folder unusable; the message names it."""


def group_rng(seed: int, scene_name: str, group: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(scene_name.encode()), int(group)])


def save_png(path: Path, rgb: np.ndarray) -> None:
    """PNG with fixed encoder settings (same pixels, same bytes)."""
    from PIL import Image

    image = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    image.save(path, format="PNG", optimize=False, compress_level=6)


class SceneCapture:
    """Everything needed to capture groups in one scene (loaded once)."""

    def __init__(self, scene, aerial_size=(192, 192), ground_size=(192, 144), backend: str = "auto") -> None:
        from airplay.scene.mesh_depth import MeshRaycaster

        self.scene = scene
        self.spec = scene.spec
        self.instances = scene_instances(self.spec.landmarks, str(self.spec.root / "scene.yaml"))
        self.caster = MeshRaycaster(scene.mesh)
        self.owners = face_owners(scene.mesh, self.instances)
        self.probe = GroundProbe(self.caster, scene.mesh, self.spec.navigable, [i.footprint for i in self.instances])
        self.aerial_cam, self.ground_cam = aerial_camera(*aerial_size), ground_camera(*ground_size)
        self.backend = backend

    def _pose_and_path(self, rng):
        pose = self.probe.sample_pose(rng)
        if pose is None:
            return None, None
        outdoor = self.probe.ceiling_above((pose.x, pose.y), pose.z) is None
        step = OUTDOOR_PATH_STEP_M if outdoor else INDOOR_PATH_STEP_M
        for turn in rng.permutation(4):
            yaw = math.remainder(pose.yaw_rad + turn * math.pi / 2, 2 * math.pi)
            path = self.probe.straight_path(pose, yaw, PATH_STEPS, step)
            if path is not None:
                return path[0], path
        return pose, None

    def _altitudes(self, pose) -> list[float]:
        ceiling = self.probe.ceiling_above((pose.x, pose.y), pose.z)
        if ceiling is None:
            return list(OUTDOOR_ALTITUDES_M)
        return [round(f * ceiling, 1) for f in INDOOR_ALTITUDE_FRACTIONS]

    def group(self, seed: int, index: int) -> tuple[dict, dict[str, np.ndarray]] | None:
        """(group record, {view name: RGB uint8}) or None when no walkable pose was found."""
        rng = group_rng(seed, self.spec.name, index)
        pose, path = self._pose_and_path(rng)
        if pose is None:
            return None
        views = [ground_view(name, (pose.x, pose.y), pose.z, pose.yaw_rad + math.radians(turn), self.ground_cam)
                 for name, turn in GROUND_TURNS.items()]
        if path is not None:
            views += [ground_view(f"path-{k}", (p.x, p.y), p.z, p.yaw_rad, self.ground_cam)
                      for k, p in enumerate(path) if k > 0]
        here = np.array([pose.x, pose.y])
        for alt in self._altitudes(pose):
            r, a = rng.uniform(0.0, 0.4 * alt), rng.uniform(-math.pi, math.pi)
            centre = here + r * np.array([math.cos(a), math.sin(a)])
            views.append(aerial_view("nadir", centre, alt, float(rng.uniform(-math.pi, math.pi)), pose.z,
                                     self.aerial_cam))
            views.append(aerial_view("oblique", here, alt, float(rng.uniform(-math.pi, math.pi)), pose.z,
                                     self.aerial_cam))
        views = [v for v in views if v.kind == "ground" or not self.probe.inside_solid(v.position_m)]
        near = []
        radius = max(self._altitudes(pose))
        for _ in range(NEAR_WALKABLE_POINTS * 6):
            if len(near) == NEAR_WALKABLE_POINTS:
                break
            xy = here + rng.uniform(-radius, radius, 2)
            gz = self.probe.ground_z(xy)
            if gz is not None:
                near.append([round(float(xy[0]), 4), round(float(xy[1]), 4), round(gz, 4)])
        images = self._render(views)
        record = {
            "capture_version": CAPTURE_VERSION, "scene": self.spec.name, "category": self.spec.category,
            "split": self.spec.split, "group": index, "seed": seed, "ground_pose": pose.to_dict(),
            "path": None if path is None else [p.to_dict() for p in path], "walkable_near": near, "views": {},
        }
        for v in views:
            mask = instance_mask(self.caster, self.owners, v)
            boxes = view_boxes(v, mask, self.instances)
            record["views"][v.name] = {**v.to_dict(), "image": f"{v.name}.png",
                                       "instances": {str(k): b for k, b in boxes.items() if b["pixels"] > 0
                                                     or b["amodal_box"] is not None}}
        return record, images

    def _render(self, views) -> dict[str, np.ndarray]:
        return render_views(self.scene, views, self.backend)


def render_views(scene, views, backend: str = "auto") -> dict[str, np.ndarray]:
    """{view name: RGB (H, W, 3) uint8} of ``views`` in ``scene`` (an :class:`airplay.scene.scene.Scene`):
    the same renderer as the rest of airplay, over the scene's background, one batch per kind."""
    from airplay.render.api import render

    out = {}
    for kind in ("ground", "aerial"):
        vs = [v for v in views if v.kind == kind]
        if not vs:
            continue
        cam = vs[0].camera
        res = render(scene.gaussians, np.stack([v.viewmat() for v in vs]), cam.K, cam.width, cam.height,
                     backend=backend, background=scene.spec.background_rgb)
        rgb = res.rgb_uint8
        for i, v in enumerate(vs):
            out[v.name] = rgb[i]
    return out


def render_ground_view(scene, pose: GroundPose, backend: str = "auto",
                       camera: PinholeCamera | None = None) -> tuple[np.ndarray, View]:
    """(RGB (H, W, 3) uint8, its :class:`View`) of the ground camera of an agent at ``pose``
    (its base on the ground, map frame): :data:`.cameras.GROUND_CAMERA_HEIGHT_M` above it, level, along
    its heading, with :func:`.cameras.ground_camera`'s intrinsics unless ``camera`` is given."""
    view = ground_view("ground", (pose.x, pose.y), pose.z, pose.yaw_rad, camera or ground_camera())
    return render_views(scene, [view], backend)["ground"], view


def capture(scene_dirs: list[Path], out_dir: Path, groups: int, seed: int = 0, backend: str = "auto",
            aerial_size=(192, 192), ground_size=(192, 144), progress: bool = True) -> dict:
    """Capture ``groups`` observation groups per scene into ``out_dir`` (see the module docstring);
    returns ``{"groups": written now, "skipped": already there, "failed": no walkable pose}``."""
    from tqdm import tqdm

    from airplay.scene.scene import Scene

    if groups < 1:
        raise CaptureError(f"--groups must be >= 1, got {groups}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    settings = {"capture_version": CAPTURE_VERSION, "seed": int(seed), "aerial_size": list(aerial_size),
                "ground_size": list(ground_size), "scenes": sorted(Path(d).name for d in scene_dirs)}
    cfg_path = out_dir / "capture.json"
    if cfg_path.is_file():
        old = json.loads(cfg_path.read_text())
        if {k: v for k, v in old.items() if k != "scenes"} != {k: v for k, v in settings.items() if k != "scenes"}:
            raise CaptureError(f"{cfg_path}: made with other settings {old}; use another --out or the same settings")
        settings["scenes"] = sorted(set(old["scenes"]) | set(settings["scenes"]))
    cfg_path.write_text(json.dumps(settings, indent=1) + "\n")
    counts = {"groups": 0, "skipped": 0, "failed": 0}
    bar = tqdm(total=groups * len(scene_dirs), unit="group", disable=not progress, desc="aeroground capture")
    for folder in scene_dirs:
        scene = Scene.load(folder)
        scene_out = out_dir / scene.name
        scene_out.mkdir(exist_ok=True)
        todo = [g for g in range(groups) if not (scene_out / f"{g:04d}" / "group.json").is_file()]
        counts["skipped"] += groups - len(todo)
        bar.update(groups - len(todo))
        if not todo:
            continue
        sc = SceneCapture(scene, aerial_size, ground_size, backend)
        (scene_out / "instances.json").write_text(json.dumps([i.to_dict() for i in sc.instances], indent=1) + "\n")
        for g in todo:
            result = sc.group(seed, g)
            bar.update(1)
            if result is None:
                counts["failed"] += 1
                continue
            record, images = result
            gdir = scene_out / f"{g:04d}"
            gdir.mkdir(exist_ok=True)
            for name, rgb in images.items():
                save_png(gdir / f"{name}.png", rgb)
            (gdir / "group.json.tmp").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
            (gdir / "group.json.tmp").replace(gdir / "group.json")
            counts["groups"] += 1
    bar.close()
    return counts


def load_groups(capture_dir: Path) -> tuple[dict[str, list[dict]], list[dict]]:
    """({scene: instance dicts}, group records sorted by scene and index) of a capture folder."""
    capture_dir = Path(capture_dir)
    if not (capture_dir / "capture.json").is_file():
        raise CaptureError(f"{capture_dir}: no capture.json; run `airplay aeroground capture --out {capture_dir}`")
    instances, groups = {}, []
    for scene_dir in sorted(p for p in capture_dir.iterdir() if (p / "instances.json").is_file()):
        instances[scene_dir.name] = json.loads((scene_dir / "instances.json").read_text())
        for gpath in sorted(scene_dir.glob("*/group.json")):
            rec = json.loads(gpath.read_text())
            rec["dir"] = str(gpath.parent.relative_to(capture_dir))
            groups.append(rec)
    return instances, groups
