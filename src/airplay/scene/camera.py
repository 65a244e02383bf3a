"""Pinhole cameras and the poses that place them in the ``map`` frame.

Frames (DESIGN.md section 3): ``map`` is ENU, ``base_link`` is FLU, and the camera optical
frame ``camera_optical`` is OpenCV: z forward, x right, y down. A renderer takes the
*world-to-camera* 4x4 matrix ``viewmat`` (map -> camera_optical), as gsplat does.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numba import njit

R_BASE_FROM_OPTICAL = np.array(
    [[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]]
)
"""Rotation taking camera_optical vectors (z fwd, x right, y down) to base_link FLU."""


@dataclass(frozen=True)
class PinholeCamera:
    """Pinhole intrinsics in pixels; images are ``height`` rows by ``width`` columns.

    Pixel (u, v) = (fx * x / z + cx, fy * y / z + cy) for a point (x, y, z) in the optical
    frame; the centre of the top-left pixel is (0.5, 0.5) in these coordinates.
    """

    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"camera size must be positive, got {self.width}x{self.height}")
        if not (self.fx > 0 and self.fy > 0):
            raise ValueError(f"camera focal lengths must be positive, got fx={self.fx} fy={self.fy}")

    @classmethod
    def from_fov(cls, width: int, height: int, hfov_deg: float) -> "PinholeCamera":
        """Square pixels, principal point at the image centre, horizontal field of view in degrees."""
        if not 0.0 < hfov_deg < 180.0:
            raise ValueError(f"horizontal field of view must be in (0, 180) degrees, got {hfov_deg}")
        fx = round(0.5 * width / math.tan(math.radians(hfov_deg) / 2.0), 9)  # 112.00000000000001 -> 112.0
        return cls(width=width, height=height, fx=fx, fy=fx, cx=width / 2.0, cy=height / 2.0)

    @property
    def K(self) -> np.ndarray:
        """(3, 3) intrinsic matrix."""
        return np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])

    def scaled(self, width: int, height: int) -> "PinholeCamera":
        """The same field of view at another resolution."""
        sx, sy = width / self.width, height / self.height
        return PinholeCamera(width, height, self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy)


@dataclass(frozen=True)
class CameraMount:
    """Where the camera sits on the vehicle: offset in base_link (FLU, metres) and pitch.

    ``pitch_deg`` > 0 tilts the optical axis down (nose-down camera), as on most drones.
    """

    offset_m: tuple[float, float, float] = (0.0, 0.0, 0.0)
    pitch_deg: float = 0.0

    def base_from_camera(self) -> np.ndarray:
        """4x4 transform camera_optical -> base_link (a new array)."""
        return self._base_from_camera().copy()

    def _base_from_camera(self) -> np.ndarray:
        """:meth:`base_from_camera`, memoised and read-only (every frame of a flight needs it)."""
        return _base_from_camera(tuple(float(v) for v in self.offset_m), float(self.pitch_deg))


@functools.lru_cache(maxsize=64)
def _base_from_camera(offset_m: tuple[float, float, float], pitch_deg: float) -> np.ndarray:
    """The camera_optical -> base_link transform of a mount (offset m, pitch deg), memoised, read-only."""
    p = math.radians(pitch_deg)
    # Rotation about base_link y (left) by +pitch points the x axis down.
    r_pitch = np.array([[math.cos(p), 0.0, math.sin(p)], [0.0, 1.0, 0.0], [-math.sin(p), 0.0, math.cos(p)]])
    t = np.eye(4)
    t[:3, :3] = r_pitch @ R_BASE_FROM_OPTICAL
    t[:3, 3] = offset_m
    t.setflags(write=False)
    return t


def map_from_base(x: float, y: float, z: float, yaw_rad: float, pitch_rad: float = 0.0, roll_rad: float = 0.0) -> np.ndarray:
    """4x4 pose of base_link in map (ENU) from position (m) and ZYX Euler angles (rad).

    yaw is about map z, counter-clockwise from east (REP-103); pitch is about the body y
    axis (positive = nose down in FLU), roll about body x.
    """
    cy, sy = math.cos(yaw_rad), math.sin(yaw_rad)
    t = np.eye(4)
    t[:3, 3] = (x, y, z)
    if pitch_rad == 0.0 and roll_rad == 0.0:  # a gimbal-stabilised camera's pose: yaw alone (the same numbers)
        t[0, 0], t[0, 1], t[1, 0], t[1, 1] = cy, -sy, sy, cy
        return t
    cp, sp = math.cos(pitch_rad), math.sin(pitch_rad)
    cr, sr = math.cos(roll_rad), math.sin(roll_rad)
    rz = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]])
    ry = np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    rx = np.array([[1.0, 0.0, 0.0], [0.0, cr, -sr], [0.0, sr, cr]])
    t[:3, :3] = rz @ ry @ rx
    return t


def viewmat_from_pose(map_T_base: np.ndarray, mount: CameraMount = CameraMount()) -> np.ndarray:
    """World-to-camera 4x4 (map -> camera_optical) for a base_link pose in map (a rigid
    transform: the inverse is [R^T, -R^T t])."""
    out = np.empty((4, 4))
    _world_to_camera(np.ascontiguousarray(map_T_base, dtype=np.float64), mount._base_from_camera(), out)
    return out


@njit(cache=True, nogil=True)
def _world_to_camera(map_T_base, base_T_cam, out):
    """out = inverse(map_T_base @ base_T_cam) of two rigid 4x4 transforms, compiled (the numpy
    version took about 25 us of small-array calls per rendered frame)."""
    c = np.empty((3, 4))
    for i in range(3):
        for j in range(4):
            c[i, j] = (map_T_base[i, 0] * base_T_cam[0, j] + map_T_base[i, 1] * base_T_cam[1, j]
                       + map_T_base[i, 2] * base_T_cam[2, j] + map_T_base[i, 3] * base_T_cam[3, j])
    for i in range(3):
        for j in range(3):
            out[i, j] = c[j, i]
        out[i, 3] = -(c[0, i] * c[0, 3] + c[1, i] * c[1, 3] + c[2, i] * c[2, 3])
        out[3, i] = 0.0
    out[3, 3] = 1.0


def look_at_viewmat(eye: np.ndarray, target: np.ndarray, up: np.ndarray = (0.0, 0.0, 1.0)) -> np.ndarray:
    """World-to-camera 4x4 (OpenCV optical frame) for a camera at ``eye`` looking at ``target``."""
    eye = np.asarray(eye, dtype=np.float64)
    z = np.asarray(target, dtype=np.float64) - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, np.asarray(up, dtype=np.float64))
    if np.linalg.norm(x) < 1e-9:
        x = np.cross(z, np.array([0.0, 1.0, 0.0]))
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    cam_to_world = np.eye(4)
    cam_to_world[:3, 0], cam_to_world[:3, 1], cam_to_world[:3, 2], cam_to_world[:3, 3] = x, y, z, eye
    return np.linalg.inv(cam_to_world)
