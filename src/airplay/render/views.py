"""Pictures a person looks at: a scene seen from a vehicle pose, depth maps, splat/mesh overlays."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from airplay.render.api import Backend, RenderOutput, render
from airplay.scene.camera import CameraMount, PinholeCamera, map_from_base, viewmat_from_pose
from airplay.scene.mesh_depth import MeshRaycaster


@dataclass(frozen=True)
class VehicleView:
    """A camera view from the vehicle pose (x, y, z metres in map, yaw rad CCW from east)."""

    rgb: np.ndarray  # (H, W, 3) uint8
    splat_depth_m: np.ndarray  # (H, W) float32, inf where empty
    alpha: np.ndarray  # (H, W) float32
    viewmat: np.ndarray  # (4, 4) map -> camera_optical
    camera: PinholeCamera
    backend: str


def render_vehicle_view(
    gaussians,
    camera: PinholeCamera,
    pose_xyz_yaw: tuple[float, float, float, float],
    mount: CameraMount = CameraMount(),
    backend: Backend = "auto",
    background: tuple[float, float, float] = (0.0, 0.0, 0.0),
) -> VehicleView:
    """Render the splat from a vehicle at ``pose_xyz_yaw`` with the camera on ``mount``."""
    x, y, z, yaw = pose_xyz_yaw
    viewmat = viewmat_from_pose(map_from_base(x, y, z, yaw), mount)
    out: RenderOutput = render(gaussians, viewmat, camera.K, camera.width, camera.height,
                               backend=backend, background=background)
    return VehicleView(out.rgb_uint8[0], out.depth[0], out.alpha[0], viewmat, camera, out.backend)


def colorize_depth(depth_m: np.ndarray, max_m: float | None = None) -> np.ndarray:
    """(H, W, 3) uint8 picture of a depth map: near = bright yellow, far = dark blue, none = black."""
    d = np.asarray(depth_m, dtype=np.float64)
    finite = np.isfinite(d)
    if max_m is None:
        max_m = float(np.percentile(d[finite], 98)) if finite.any() else 1.0
    t = np.clip(d / max(max_m, 1e-6), 0.0, 1.0)
    # A short perceptual ramp (yellow -> red -> purple -> blue), no matplotlib needed.
    stops = np.array([[253, 231, 37], [240, 96, 40], [150, 30, 120], [40, 20, 90]], dtype=np.float64)
    pos = t * (len(stops) - 1)
    i = np.minimum(pos.astype(int), len(stops) - 2)
    frac = (pos - i)[..., None]
    img = stops[i] * (1 - frac) + stops[i + 1] * frac
    img[~finite] = 0
    return img.astype(np.uint8)


def shade_mesh(mesh, viewmat: np.ndarray, camera: PinholeCamera) -> tuple[np.ndarray, np.ndarray]:
    """(shaded grey image (H, W, 3) uint8 with a headlight, mesh depth (H, W) m) by ray casting."""
    from airplay.scene.mesh_depth import pixel_rays_camera

    caster = MeshRaycaster(mesh)
    cam_to_world = np.linalg.inv(viewmat)
    dirs = pixel_rays_camera(camera.K, camera.width, camera.height) @ cam_to_world[:3, :3].T
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    origin = cam_to_world[:3, 3]
    points, faces = caster.first_hits(np.broadcast_to(origin, dirs.shape), dirs)
    hit = faces >= 0
    shade = np.zeros(len(dirs))
    normals = mesh.face_normals[faces[hit]]
    shade[hit] = 0.25 + 0.75 * np.abs(np.sum(normals * dirs[hit], axis=1))
    img = np.repeat((shade * 255).reshape(camera.height, camera.width, 1), 3, axis=2).astype(np.uint8)
    depth = np.full(len(dirs), np.inf)
    depth[hit] = (points[hit] - origin) @ cam_to_world[:3, 2]
    return img, depth.reshape(camera.height, camera.width).astype(np.float32)


def alignment_panel(view: VehicleView, mesh) -> np.ndarray:
    """Side by side: splat render | shaded collision mesh | 50 % blend (H, 3W, 3) uint8.

    The blend shows at a glance whether splat and mesh line up (edges coincide) after the
    alignment transform of scene.yaml.
    """
    shaded, _ = shade_mesh(mesh, view.viewmat, view.camera)
    blend = (0.5 * view.rgb.astype(np.float32) + 0.5 * shaded.astype(np.float32)).astype(np.uint8)
    return np.concatenate([view.rgb, shaded, blend], axis=1)


def save_png(path: str | Path, image: np.ndarray) -> Path:
    """Write an (H, W, 3) uint8 image as PNG, creating the folder."""
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(image)).save(path)
    return path
