"""``scene.yaml``: what a scene folder declares, parsed and validated.

Example (every field; see docs/scenes.md)::

    format_version: 1
    name: urban_0007
    category: urban            # indoor | urban | vegetation
    split: seen                # seen | unseen (AirPlayground Table 5: by scene)
    splat:
      file: splat.ply          # INRIA 3DGS PLY or antimatter15 .splat
      convention: z_up         # axes of the file: z_up | opencv (COLMAP/INRIA, y down) | opengl (nerfstudio, y up)
      transform:               # source -> map after the convention is applied: x_map = s * R x + t
        scale: 1.0
        rotation_xyzw: [0, 0, 0, 1]   # or rotation_rpy_deg: [roll, pitch, yaw]
        translation: [0.0, 0.0, 0.0]  # metres
    collision:
      file: collision.ply      # .ply, .obj or .glb; same convention/transform keys as splat
    navigable:
      polygon: [[x, y], ...]   # map frame, metres, counter-clockwise or clockwise
      z_min: 0.5               # flight height band, metres (map z)
      z_max: 3.0
    camera:
      width: 224
      height: 224
      hfov_deg: 90.0           # or fx, fy, cx, cy in pixels
      mount_offset_m: [0.1, 0.0, 0.0]  # camera position in base_link (FLU)
      mount_pitch_deg: 0.0     # positive tilts the camera down
    background_rgb: [0.62, 0.75, 0.90]  # optional: colour behind the splat (the sky), 0..1
    landmarks: []              # optional; what VLN instructions name

Alignment model: a point p in the file's own axes goes to the map frame as

    p_map = scale * R_xform @ (C @ p) + t

where C is the fixed rotation of ``convention`` (identity for z_up; for opencv
x->x, y(down)->-z, z(forward)->y; for opengl x->x, y(up)->z, z(backward)->-y).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from airplay.scene.camera import CameraMount, PinholeCamera
from airplay.scene.errors import SceneError
from airplay.yaml_config import ConfigError, load_yaml

FORMAT_VERSION = 1
CATEGORIES = ("indoor", "urban", "vegetation")
SPLITS = ("seen", "unseen")
SPLAT_SUFFIXES = (".ply", ".splat")
MESH_SUFFIXES = (".ply", ".obj", ".glb")

CONVENTIONS: dict[str, np.ndarray] = {
    "z_up": np.eye(3),
    "opencv": np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]]),
    "opengl": np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]),
}
"""Rotation C taking a file's axes to z-up axes, per source convention."""


@dataclass(frozen=True)
class Alignment:
    """Source file -> map: p_map = scale * rotation @ (CONVENTIONS[convention] @ p) + translation."""

    convention: str = "z_up"
    scale: float = 1.0
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def matrix(self) -> tuple[float, np.ndarray, np.ndarray]:
        """(scale, R (3, 3), t (3,)) of the whole source -> map similarity."""
        return self.scale, self.rotation @ CONVENTIONS[self.convention], self.translation

    def is_identity(self) -> bool:
        s, r, t = self.matrix()
        return s == 1.0 and np.allclose(r, np.eye(3)) and np.allclose(t, 0.0)

    def to_yaml(self) -> dict[str, Any]:
        from airplay.scene.gaussians import matrix_to_quat_wxyz

        w, x, y, z = matrix_to_quat_wxyz(self.rotation)
        return {
            "convention": self.convention,
            "transform": {
                "scale": float(self.scale),
                "rotation_xyzw": [round(float(v), 9) for v in (x, y, z, w)],
                "translation": [round(float(v), 9) for v in self.translation],
            },
        }


@dataclass(frozen=True)
class NavigableRegion:
    """Where the vehicle may fly: a polygon in map x/y (metres) and a height band (map z)."""

    polygon: np.ndarray  # (M, 2)
    z_min: float
    z_max: float

    @property
    def area_m2(self) -> float:
        """Polygon area by the shoelace formula, m^2."""
        x, y = self.polygon[:, 0], self.polygon[:, 1]
        return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2.0)

    def contains_xy(self, xy: np.ndarray) -> np.ndarray:
        """Boolean (K,) for points (K, 2): inside the polygon (even-odd rule)."""
        xy = np.atleast_2d(np.asarray(xy, dtype=np.float64))
        px, py = xy[:, 0], xy[:, 1]
        inside = np.zeros(len(xy), dtype=bool)
        poly = self.polygon
        for i in range(len(poly)):
            x0, y0 = poly[i]
            x1, y1 = poly[(i + 1) % len(poly)]
            crosses = (y0 > py) != (y1 > py)
            with np.errstate(divide="ignore", invalid="ignore"):
                x_at = x0 + (py - y0) * (x1 - x0) / (y1 - y0)
            inside ^= crosses & (px < x_at)
        return inside

    def contains(self, points: np.ndarray) -> np.ndarray:
        """Boolean (K,) for points (K, 3) in map: inside the polygon and the height band."""
        p = np.atleast_2d(np.asarray(points, dtype=np.float64))
        return self.contains_xy(p[:, :2]) & (p[:, 2] >= self.z_min) & (p[:, 2] <= self.z_max)


@dataclass(frozen=True)
class CameraSpec:
    """The scene's default camera: intrinsics and mount on base_link."""

    intrinsics: PinholeCamera
    mount: CameraMount


@dataclass(frozen=True)
class SceneSpec:
    """Everything ``scene.yaml`` declares, validated; file paths are absolute."""

    root: Path
    name: str
    category: str
    split: str
    splat_file: Path
    splat_alignment: Alignment
    collision_file: Path
    collision_alignment: Alignment
    navigable: NavigableRegion
    camera: CameraSpec
    background_rgb: tuple[float, float, float] = (0.0, 0.0, 0.0)
    landmarks: list = field(default_factory=list)

    def to_yaml_dict(self) -> dict[str, Any]:
        """The ``scene.yaml`` mapping for this spec (file names relative to the folder)."""
        cam = self.camera.intrinsics
        return {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "category": self.category,
            "split": self.split,
            "splat": {"file": self.splat_file.name, **self.splat_alignment.to_yaml()},
            "collision": {"file": self.collision_file.name, **self.collision_alignment.to_yaml()},
            "navigable": {
                "polygon": [[round(float(x), 6), round(float(y), 6)] for x, y in self.navigable.polygon],
                "z_min": float(self.navigable.z_min),
                "z_max": float(self.navigable.z_max),
            },
            "camera": {
                "width": cam.width, "height": cam.height,
                "fx": float(cam.fx), "fy": float(cam.fy), "cx": float(cam.cx), "cy": float(cam.cy),
                "mount_offset_m": [float(v) for v in self.camera.mount.offset_m],
                "mount_pitch_deg": float(self.camera.mount.pitch_deg),
            },
            "background_rgb": [float(v) for v in self.background_rgb],
            "landmarks": list(self.landmarks),
        }


def write_scene_yaml(path: str | Path, spec: SceneSpec) -> None:
    """Write ``spec`` as YAML; deterministic (fixed key order, no timestamps)."""
    text = "# airplay scene; see docs/scenes.md for every field\n"
    text += yaml.safe_dump(spec.to_yaml_dict(), sort_keys=False, default_flow_style=None, width=100)
    Path(path).write_text(text)


# ---------------------------------------------------------------------------------------
# parsing


class _Fields:
    """Typed access to a YAML mapping with errors that name file and dotted field."""

    def __init__(self, path: Path, data: Any, prefix: str = ""):
        self.path, self.prefix = path, prefix
        if not isinstance(data, dict):
            raise SceneError(path, f"must be a mapping, got {type(data).__name__}", prefix.rstrip(".") or None)
        self.data = data

    def _name(self, key: str) -> str:
        return self.prefix + key

    def fail(self, key: str, problem: str) -> SceneError:
        return SceneError(self.path, problem, self._name(key))

    def get(self, key: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise self.fail(key, "required field is missing")
            return default
        return self.data[key]

    def sub(self, key: str, default: Any = ...) -> "_Fields":
        return _Fields(self.path, self.get(key, default), self._name(key) + ".")

    def number(self, key: str, default: Any = ...) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, f"must be a number, got {value!r}")
        if not math.isfinite(value):
            raise self.fail(key, f"must be finite, got {value!r}")
        return float(value)

    def string(self, key: str, choices: tuple[str, ...] | None = None, default: Any = ...) -> str:
        value = self.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"must be a non-empty string, got {value!r}")
        if choices and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def vector(self, key: str, length: int, default: Any = ...) -> np.ndarray:
        value = self.get(key, default)
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise self.fail(key, f"must be a list of {length} numbers, got {value!r}") from None
        if arr.shape != (length,):
            raise self.fail(key, f"must be a list of {length} numbers, got {value!r}")
        if not np.isfinite(arr).all():
            raise self.fail(key, f"must be finite, got {value!r}")
        return arr


def _rotation_from_fields(f: _Fields) -> np.ndarray:
    from airplay.scene.gaussians import quat_wxyz_to_matrix

    if "rotation_xyzw" in f.data and "rotation_rpy_deg" in f.data:
        raise f.fail("rotation_xyzw", "give rotation_xyzw or rotation_rpy_deg, not both")
    if "rotation_rpy_deg" in f.data:
        roll, pitch, yaw = np.radians(f.vector("rotation_rpy_deg", 3))
        cr, sr, cp, sp, cy, sy = np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch), np.cos(yaw), np.sin(yaw)
        rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
        ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
        rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
        return rz @ ry @ rx
    q = f.vector("rotation_xyzw", 4, default=[0.0, 0.0, 0.0, 1.0])
    norm = float(np.linalg.norm(q))
    if norm < 1e-6:
        raise f.fail("rotation_xyzw", f"quaternion has zero norm: {q.tolist()}")
    if abs(norm - 1.0) > 1e-3:
        raise f.fail("rotation_xyzw", f"quaternion must be unit length (x, y, z, w), norm is {norm:.6f}")
    x, y, z, w = q / norm
    return quat_wxyz_to_matrix(np.array([w, x, y, z]))


def _alignment(f: _Fields) -> Alignment:
    convention = f.string("convention", tuple(CONVENTIONS), default="z_up")
    t = f.sub("transform", default={})
    scale = t.number("scale", default=1.0)
    if scale <= 0:
        raise t.fail("scale", f"must be positive, got {scale}")
    return Alignment(convention, scale, _rotation_from_fields(t), t.vector("translation", 3, default=[0.0, 0.0, 0.0]))


def _file(f: _Fields, root: Path, suffixes: tuple[str, ...]) -> Path:
    name = f.string("file")
    path = (root / name).resolve()
    if path.suffix.lower() not in suffixes:
        raise f.fail("file", f"{name!r} has suffix {path.suffix!r}; supported: {', '.join(suffixes)}")
    if not path.is_file():
        raise SceneError(path, f"file not found (named by {f._name('file')} in scene.yaml)")
    return path


def _navigable(f: _Fields) -> NavigableRegion:
    raw = f.get("polygon")
    try:
        poly = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise f.fail("polygon", "must be a list of [x, y] points") from None
    if poly.ndim != 2 or poly.shape[1] != 2 or len(poly) < 3:
        raise f.fail("polygon", f"must be at least 3 [x, y] points, got shape {poly.shape}")
    if not np.isfinite(poly).all():
        raise f.fail("polygon", "has NaN or infinite coordinates")
    z_min, z_max = f.number("z_min"), f.number("z_max")
    if not z_max > z_min:
        raise f.fail("z_max", f"must be greater than z_min ({z_max} <= {z_min})")
    region = NavigableRegion(poly, z_min, z_max)
    if region.area_m2 < 1e-6:
        raise f.fail("polygon", "has zero area (collinear or repeated points)")
    return region


def _camera(f: _Fields) -> CameraSpec:
    width, height = f.number("width", default=224), f.number("height", default=224)
    for key, v in (("width", width), ("height", height)):
        if v != int(v) or v <= 0:
            raise f.fail(key, f"must be a positive integer, got {v}")
    width, height = int(width), int(height)
    if "hfov_deg" in f.data:
        hfov = f.number("hfov_deg")
        if not 0 < hfov < 180:
            raise f.fail("hfov_deg", f"must be in (0, 180), got {hfov}")
        intr = PinholeCamera.from_fov(width, height, hfov)
    elif "fx" in f.data:
        fx, fy = f.number("fx"), f.number("fy")
        if fx <= 0 or fy <= 0:
            raise f.fail("fx", f"focal lengths must be positive, got fx={fx} fy={fy}")
        intr = PinholeCamera(width, height, fx, fy, f.number("cx", width / 2), f.number("cy", height / 2))
    else:
        intr = PinholeCamera.from_fov(width, height, 90.0)
    offset = f.vector("mount_offset_m", 3, default=[0.0, 0.0, 0.0])
    pitch = f.number("mount_pitch_deg", default=0.0)
    return CameraSpec(intr, CameraMount(tuple(float(v) for v in offset), pitch))


def parse_scene_yaml(path: str | Path) -> SceneSpec:
    """Read and validate ``scene.yaml``; every problem is a :class:`SceneError` naming file and field."""
    path = Path(path)
    if path.is_dir():
        path = path / "scene.yaml"
    if not path.is_file():
        raise SceneError(path, "file not found (a scene folder needs scene.yaml)")
    try:
        data = load_yaml(path)
    except ConfigError as err:  # scene input: the same message, as a SceneError
        raise SceneError(err.path, err.problem, err.field) from None
    root = path.parent.resolve()
    f = _Fields(path, data)
    version = f.number("format_version", default=FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise f.fail("format_version", f"this airplay reads version {FORMAT_VERSION}, got {version:g}")
    splat = f.sub("splat")
    collision = f.sub("collision")
    background = f.vector("background_rgb", 3, default=[0.0, 0.0, 0.0])
    if (background < 0).any() or (background > 1).any():
        raise f.fail("background_rgb", f"must be three values in [0, 1], got {background.tolist()}")
    landmarks = f.get("landmarks", default=[])
    if not isinstance(landmarks, list):
        raise f.fail("landmarks", "must be a list")
    return SceneSpec(
        root=root,
        name=f.string("name"),
        category=f.string("category", CATEGORIES),
        split=f.string("split", SPLITS, default="seen"),
        splat_file=_file(splat, root, SPLAT_SUFFIXES),
        splat_alignment=_alignment(splat),
        collision_file=_file(collision, root, MESH_SUFFIXES),
        collision_alignment=_alignment(collision),
        navigable=_navigable(f.sub("navigable")),
        camera=_camera(f.sub("camera", default={})),
        background_rgb=tuple(float(v) for v in background),
        landmarks=landmarks,
    )
