"""3DGS rendering (gsplat on CUDA, a compiled CPU rasterizer elsewhere) and mesh depth."""

from airplay.render.api import RenderOutput, gsplat_available, render, resolve_backend
from airplay.scene.camera import (
    CameraMount,
    PinholeCamera,
    look_at_viewmat,
    map_from_base,
    viewmat_from_pose,
)

__all__ = [
    "CameraMount",
    "PinholeCamera",
    "RenderOutput",
    "gsplat_available",
    "look_at_viewmat",
    "map_from_base",
    "render",
    "resolve_backend",
    "viewmat_from_pose",
]
