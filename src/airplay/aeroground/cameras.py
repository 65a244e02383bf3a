"""Camera poses of the two agents: the UAV's aerial views and the ground agent's camera.

A :class:`View` is one pinhole camera placed in ``map`` (ENU, metres): its optical centre
``position_m``, its heading ``yaw_rad`` (counter-clockwise from east) and its downward tilt
``pitch_deg`` (0 = level, 90 = nadir). Aerial views are ``nadir`` (pitch 90) or ``oblique``
(pitch :data:`OBLIQUE_PITCH_DEG`) at an altitude above the ground; the ground camera sits
:data:`GROUND_CAMERA_HEIGHT_M` above the walkable surface, level, looking along the agent's
heading, with its own intrinsics (:data:`GROUND_CAMERA`), wider than tall as on a robot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from airplay.scene.camera import CameraMount, PinholeCamera, map_from_base, viewmat_from_pose

OBLIQUE_PITCH_DEG = 45.0
GROUND_CAMERA_HEIGHT_M = 1.0
AERIAL_SIZE_PX = (192, 192)
GROUND_SIZE_PX = (192, 144)
AERIAL_HFOV_DEG = 90.0
GROUND_HFOV_DEG = 90.0


def aerial_camera(width: int = AERIAL_SIZE_PX[0], height: int = AERIAL_SIZE_PX[1]) -> PinholeCamera:
    """The UAV camera's intrinsics (square pixels, 90 deg horizontal field of view)."""
    return PinholeCamera.from_fov(width, height, AERIAL_HFOV_DEG)


def ground_camera(width: int = GROUND_SIZE_PX[0], height: int = GROUND_SIZE_PX[1]) -> PinholeCamera:
    """The ground robot camera's intrinsics (its own, 90 deg horizontal field of view)."""
    return PinholeCamera.from_fov(width, height, GROUND_HFOV_DEG)


@dataclass(frozen=True)
class View:
    """One camera of an observation group.

    name: unique in the group ("nadir-15m", "ground", "ground-left", "path-1", ...).
    kind: "aerial" or "ground". config: the view configuration ("nadir", "oblique", "ground").
    position_m: optical centre in map (ENU, m). yaw_rad: heading in map. pitch_deg: tilt down.
    camera: intrinsics (pixels).
    """

    name: str
    kind: str
    config: str
    position_m: tuple[float, float, float]
    yaw_rad: float
    pitch_deg: float
    camera: PinholeCamera

    def viewmat(self) -> np.ndarray:
        """(4, 4) world-to-camera (map -> camera_optical)."""
        x, y, z = self.position_m
        return viewmat_from_pose(map_from_base(x, y, z, self.yaw_rad), CameraMount((0.0, 0.0, 0.0), self.pitch_deg))

    def project(self, points_map: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Pixel coordinates (N, 2) (u right, v down; pixel centres at +0.5) and optical depth
        z (N,) in metres of map points (N, 3); uv is meaningless where z <= 0."""
        p = np.atleast_2d(np.asarray(points_map, dtype=np.float64))
        vm = self.viewmat()
        pc = p @ vm[:3, :3].T + vm[:3, 3]
        z = pc[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = self.camera.fx * pc[:, 0] / z + self.camera.cx
            v = self.camera.fy * pc[:, 1] / z + self.camera.cy
        return np.stack([u, v], axis=1), z

    def in_image(self, uv: np.ndarray, z: np.ndarray, margin_px: float = 0.0) -> np.ndarray:
        """Boolean (N,): in front of the camera and inside the image shrunk by ``margin_px``."""
        w, h = self.camera.width, self.camera.height
        return ((z > 0.05) & (uv[:, 0] >= margin_px) & (uv[:, 0] <= w - margin_px)
                & (uv[:, 1] >= margin_px) & (uv[:, 1] <= h - margin_px))

    def to_dict(self) -> dict:
        c = self.camera
        return {"name": self.name, "kind": self.kind, "config": self.config,
                "position_m": [round(float(v), 4) for v in self.position_m], "yaw_rad": round(float(self.yaw_rad), 6),
                "pitch_deg": float(self.pitch_deg),
                "camera": {"width": c.width, "height": c.height, "fx": c.fx, "fy": c.fy, "cx": c.cx, "cy": c.cy}}

    @classmethod
    def from_dict(cls, d: dict) -> "View":
        c = d["camera"]
        return cls(d["name"], d["kind"], d["config"], tuple(float(v) for v in d["position_m"]), float(d["yaw_rad"]),
                   float(d["pitch_deg"]), PinholeCamera(int(c["width"]), int(c["height"]), float(c["fx"]),
                                                        float(c["fy"]), float(c["cx"]), float(c["cy"])))


def ground_view(name: str, xy: tuple[float, float], ground_z_m: float, yaw_rad: float,
                camera: PinholeCamera) -> View:
    """The ground camera of an agent standing at ``xy`` on ground height ``ground_z_m``."""
    return View(name, "ground", "ground", (float(xy[0]), float(xy[1]), float(ground_z_m) + GROUND_CAMERA_HEIGHT_M),
                float(yaw_rad), 0.0, camera)


def aerial_view(config: str, looked_at_m: np.ndarray, altitude_m: float, yaw_rad: float, ground_z_m: float,
                camera: PinholeCamera) -> View:
    """A UAV view of ground point ``looked_at_m`` (map, m): ``nadir`` straight above it, or
    ``oblique`` (pitch :data:`OBLIQUE_PITCH_DEG`) from ``altitude_m`` above the ground, set back
    along ``-yaw`` so that the optical axis passes through the point. Named "<config>-<alt>m"."""
    if config not in ("nadir", "oblique"):
        raise ValueError(f"aerial view config must be 'nadir' or 'oblique', got {config!r}")
    x, y = float(looked_at_m[0]), float(looked_at_m[1])
    z = float(ground_z_m) + float(altitude_m)
    pitch = 90.0 if config == "nadir" else OBLIQUE_PITCH_DEG
    if config == "oblique":
        back = altitude_m / np.tan(np.radians(pitch))
        x, y = x - back * np.cos(yaw_rad), y - back * np.sin(yaw_rad)
    return View(f"{config}-{altitude_m:g}m", "aerial", config, (x, y, z), float(yaw_rad), pitch, camera)
