"""Read the cameras a 3DGS capture was trained from: a COLMAP sparse model or a nerfstudio /
instant-ngp ``transforms.json``, as poses in the capture's (the splat's) frame and units.

Conventions of the files:

* COLMAP (``cameras``, ``images``, ``points3D`` as ``.bin`` or ``.txt``, read with ``pycolmap``):
  each image stores ``cam_from_world``, world-to-camera, camera axes OpenCV (x right, y down,
  z forward). INRIA 3DGS, gsplat and most trainers keep the splat in this world frame.
* ``transforms.json`` (nerfstudio, instant-ngp, the original NeRF): each ``frames[i]`` has a
  ``transform_matrix``, camera-to-world (4x4 or 3x4), camera axes OpenGL (x right, y up,
  z backward). A splat trained on these poses (e.g. INRIA's loader of NeRF-style data) is in
  this world frame. Intrinsics are ``fl_x``/``w`` or ``camera_angle_x``, top level or per frame.
  instant-ngp's ``scale``, ``offset`` and ``aabb_scale`` are its own internal normalisation
  and do not move the poses; they are ignored.
* nerfstudio's ``applied_transform`` (3x4, written by ``ns-process-data``) maps the COLMAP world
  into the file's world; ``undo_applied_transform`` takes the poses back into the COLMAP frame,
  for a splat trained on the COLMAP model itself.
* nerfstudio's ``dataparser_transforms.json`` (``transform`` 3x4 and ``scale``, in the training
  output folder) maps the file's world into the frame splatfacto trains and exports in:
  ``p = scale * (T p_file + t)``; give it when the splat came from ``ns-export gaussian-splat``.

Every defect is a :class:`SceneError` naming the file and the field (and the frame or image).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError

COLMAP_PARTS = ("cameras", "images", "points3D")
OPENGL_TO_OPENCV = np.diag([1.0, -1.0, -1.0])
"""Camera axes: OpenGL (x right, y up, z back) -> OpenCV (x right, y down, z forward)."""
RIGID_TOL = 1e-3
"""Largest |R^T R - I| entry (and |det R - 1|) of a pose's rotation accepted as rigid."""


@dataclass(frozen=True)
class CaptureCameras:
    """Camera poses of a capture.

    positions: (K, 3) camera centres, in the frame and units of the splat (or of the map after
        :meth:`transformed`).
    rotations: (K, 3, 3) camera-to-world rotations whose columns are the camera's OpenCV axes
        (x right, y down, z forward) in world coordinates.
    hfov_deg: (K,) horizontal field of view from the file's intrinsics, degrees (NaN if absent).
    names: image names (COLMAP) or ``file_path`` (transforms.json).
    format: "colmap" or "transforms_json". path: the folder or file read.
    """

    positions: np.ndarray
    rotations: np.ndarray
    hfov_deg: np.ndarray
    names: tuple[str, ...]
    format: str
    path: Path
    notes: tuple[str, ...] = field(default_factory=tuple)

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def ups(self) -> np.ndarray:
        """(K, 3) each camera's up direction in world: its -y axis (OpenCV), unit."""
        return -self.rotations[:, :, 1]

    @property
    def forwards(self) -> np.ndarray:
        """(K, 3) each camera's viewing direction in world (+z, OpenCV), unit."""
        return self.rotations[:, :, 2]

    def mean_up(self) -> tuple[np.ndarray, float]:
        """(unit mean of the cameras' up vectors, length of their plain mean in [0, 1]); a length
        well below 1 means the cameras disagree on up (e.g. portrait and landscape mixed)."""
        m = self.ups.mean(axis=0)
        n = float(np.linalg.norm(m))
        return (m / n if n > 0 else np.array([0.0, 0.0, 1.0])), n

    def transformed(self, scale: float, rotation: np.ndarray, translation: np.ndarray) -> CaptureCameras:
        """The same cameras under ``p' = scale * rotation @ p + translation`` (a similarity)."""
        rotation = np.asarray(rotation, float)
        return replace(self, positions=scale * self.positions @ rotation.T + np.asarray(translation, float),
                       rotations=np.einsum("ij,kjl->kil", rotation, self.rotations))

    def viewmats(self) -> np.ndarray:
        """(K, 4, 4) world-to-camera matrices into the OpenCV optical frame (what the renderer takes)."""
        out = np.zeros((len(self), 4, 4))
        rt = np.transpose(self.rotations, (0, 2, 1))
        out[:, :3, :3] = rt
        out[:, :3, 3] = -np.einsum("kij,kj->ki", rt, self.positions)
        out[:, 3, 3] = 1.0
        return out


def _check_rigid(path: Path, where: str, rot: np.ndarray) -> None:
    dev = float(np.abs(rot.T @ rot - np.eye(3)).max())
    det = float(np.linalg.det(rot))
    if dev > RIGID_TOL or abs(det - 1.0) > RIGID_TOL:
        raise SceneError(path, f"not a rigid pose: its rotation part has |R^T R - I| = {dev:.3g} and det {det:.4g} "
                               "(a camera-to-world matrix must be a rotation and a translation)", where)


def _matrix(path: Path, where: str, value, rows: tuple[int, ...] = (3, 4)) -> np.ndarray:
    try:
        m = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise SceneError(path, f"not a numeric matrix: {str(value)[:80]}", where) from None
    if m.ndim != 2 or m.shape[1] != 4 or m.shape[0] not in rows:
        raise SceneError(path, f"expected a {' or '.join(f'{r}x4' for r in rows)} matrix, got shape {m.shape}", where)
    if not np.isfinite(m).all():
        raise SceneError(path, "holds NaN or infinite values", where)
    return m


def _colmap_folder(path: Path) -> Path:
    """The folder holding the model: ``path`` itself, or its ``0`` / ``sparse/0`` sub-folder."""
    for cand in (path, path / "0", path / "sparse" / "0", path / "sparse"):
        if any((cand / f"{part}{ext}").is_file() for part in COLMAP_PARTS for ext in (".bin", ".txt")):
            return cand
    return path


def _colmap_hfov(cam) -> float:
    """Horizontal field of view (deg) of a pinhole-like COLMAP camera; NaN for other models."""
    try:
        fx = float(cam.focal_length_x)
    except (RuntimeError, ValueError, AttributeError):  # spherical and other focal-less models
        return math.nan
    return math.degrees(2 * math.atan(cam.width / (2 * fx))) if fx > 0 else math.nan


def read_colmap(folder: Path) -> CaptureCameras:
    """The registered images of a COLMAP sparse model in ``folder`` (see the module docstring)."""
    import pycolmap

    folder = _colmap_folder(folder)
    ext = ".bin" if any((folder / f"{part}.bin").is_file() for part in COLMAP_PARTS) else ".txt"
    for part in COLMAP_PARTS:
        if not (folder / f"{part}{ext}").is_file():
            other = ".txt" if ext == ".bin" else ".bin"
            also = f" ({part}{other} is there, but a model's files must all be {ext})" if (folder / f"{part}{other}").is_file() else ""
            raise SceneError(folder / f"{part}{ext}", f"missing: a COLMAP sparse model needs cameras, images and "
                                                      f"points3D{ext}{also}", part)
    try:
        rec = pycolmap.Reconstruction(str(folder))
    except Exception as err:  # pycolmap raises ValueError, IndexError, RuntimeError for bad files
        raise SceneError(folder, f"pycolmap could not read the model ({type(err).__name__}: {err}); "
                                 "a file may be truncated or of another COLMAP version", "model") from None
    positions, rotations, hfov, names = [], [], [], []
    for image_id in sorted(rec.images):
        image = rec.images[image_id]
        if not image.has_pose:
            continue
        m = np.asarray(image.cam_from_world().matrix(), float)
        where = f"images[{image_id}] ({image.name}).cam_from_world"
        if not np.isfinite(m).all():
            raise SceneError(folder / f"images{ext}", "holds NaN or infinite values", where)
        r_wc = m[:3, :3].T
        _check_rigid(folder / f"images{ext}", where, r_wc)
        positions.append(-r_wc @ m[:3, 3])
        rotations.append(r_wc)
        hfov.append(_colmap_hfov(rec.cameras[image.camera_id]))
        names.append(image.name)
    if not positions:
        raise SceneError(folder / f"images{ext}", f"no registered image with a pose among {rec.num_images()} images",
                         "images")
    return CaptureCameras(np.asarray(positions), np.asarray(rotations), np.asarray(hfov), tuple(names), "colmap", folder)


def _load_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise SceneError(path, f"not valid JSON: {err.msg} at line {err.lineno}, column {err.colno}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise SceneError(path, f"cannot read: {err}") from None
    if not isinstance(data, dict):
        raise SceneError(path, f"expected a JSON object at the top, got {type(data).__name__}")
    return data


def _hfov(meta: dict, frame: dict) -> float:
    """Horizontal field of view (deg) from the frame's or the file's intrinsics; NaN if absent or
    unreadable (informative only: the import renders its own 90 degree views)."""
    try:
        for src in (frame, meta):
            if "camera_angle_x" in src:
                return math.degrees(float(src["camera_angle_x"]))
            if "fl_x" in src and "w" in src and float(src["fl_x"]) > 0:
                return math.degrees(2 * math.atan(float(src["w"]) / (2 * float(src["fl_x"]))))
    except (TypeError, ValueError):
        pass
    return math.nan


def read_transforms_json(path: Path, *, undo_applied_transform: bool = False) -> CaptureCameras:
    """The frames of a nerfstudio / instant-ngp ``transforms.json`` (see the module docstring)."""
    meta = _load_json(path)
    frames = meta.get("frames")
    if not isinstance(frames, list) or not frames:
        raise SceneError(path, "missing or empty: a transforms.json lists its cameras under 'frames'", "frames")
    positions, rotations, hfov, names = [], [], [], []
    for i, frame in enumerate(frames):
        name = str(frame.get("file_path", "")) if isinstance(frame, dict) else ""
        where = f"frames[{i}]" + (f" ({name})" if name else "") + ".transform_matrix"
        if not isinstance(frame, dict) or "transform_matrix" not in frame:
            raise SceneError(path, "missing: every frame needs a camera-to-world 'transform_matrix'", where)
        m = _matrix(path, where, frame["transform_matrix"], rows=(3, 4))
        rot = m[:3, :3]
        _check_rigid(path, where, rot)
        positions.append(m[:3, 3])
        rotations.append(rot @ OPENGL_TO_OPENCV)
        hfov.append(_hfov(meta, frame))
        names.append(name or f"frame {i}")
    cams = CaptureCameras(np.asarray(positions), np.asarray(rotations), np.asarray(hfov), tuple(names),
                          "transforms_json", path)
    notes = []
    if undo_applied_transform:
        if "applied_transform" not in meta:
            raise SceneError(path, "missing: --cameras-frame colmap undoes nerfstudio's applied_transform, "
                                   "and this file has none", "applied_transform")
        a = _matrix(path, "applied_transform", meta["applied_transform"], rows=(3, 4))
        _check_rigid(path, "applied_transform", a[:3, :3])
        inv = a[:3, :3].T
        cams = cams.transformed(1.0, inv, -inv @ a[:3, 3])
        notes.append("nerfstudio's applied_transform undone: poses in the COLMAP frame")
    ignored = [k for k in ("scale", "offset", "aabb_scale") if k in meta]
    if ignored:
        notes.append(f"instant-ngp's {', '.join(ignored)} ignored (its internal normalisation, not the poses')")
    return replace(cams, notes=tuple(notes))


def apply_dataparser_transforms(cams: CaptureCameras, path: Path) -> CaptureCameras:
    """``cams`` moved into the frame nerfstudio trained (and exported the splat) in, by its
    ``dataparser_transforms.json``: ``p = scale * (T[:, :3] p + T[:, 3])``."""
    meta = _load_json(path)
    if "transform" not in meta:
        raise SceneError(path, "missing: a dataparser_transforms.json has a 3x4 'transform'", "transform")
    t = _matrix(path, "transform", meta["transform"], rows=(3, 4))
    _check_rigid(path, "transform", t[:3, :3])
    try:
        s = float(meta.get("scale", 1.0))
    except (TypeError, ValueError):
        raise SceneError(path, f"not a number: {meta.get('scale')!r}", "scale") from None
    if not (s > 0 and math.isfinite(s)):
        raise SceneError(path, f"must be a positive number, got {s}", "scale")
    out = cams.transformed(s, t[:3, :3], s * t[:3, 3])
    return replace(out, notes=cams.notes + (f"nerfstudio's dataparser transform applied ({path.name}, scale {s:.4g})",))


def read_cameras(path: str | Path, *, undo_applied_transform: bool = False,
                 dataparser_transforms: str | Path | None = None) -> CaptureCameras:
    """Read capture cameras from a COLMAP model folder (or one of its files) or a transforms.json
    (or a folder holding one); see the module docstring for the frames."""
    path = Path(path)
    if not path.exists():
        raise SceneError(path, "not found: --cameras takes a COLMAP sparse model folder or a transforms.json")
    if path.is_file() and path.stem in COLMAP_PARTS:
        path = path.parent
    if path.is_dir() and not any((_colmap_folder(path) / f"images{e}").is_file() for e in (".bin", ".txt")) \
            and (path / "transforms.json").is_file():
        path = path / "transforms.json"
    if path.is_dir():
        if undo_applied_transform:
            raise SceneError(path, "--cameras-frame colmap applies to a transforms.json, not to a COLMAP model")
        cams = read_colmap(path)
    elif path.suffix.lower() == ".json":
        cams = read_transforms_json(path, undo_applied_transform=undo_applied_transform)
    else:
        raise SceneError(path, "unknown camera file: expected a COLMAP sparse model folder (cameras, images, points3D "
                               ".bin or .txt) or a transforms.json")
    if dataparser_transforms is not None:
        cams = apply_dataparser_transforms(cams, Path(dataparser_transforms))
    return cams
