"""Scenes: 3DGS splats, collision meshes and scene.yaml; loading, validation, generation."""

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import Gaussians
from airplay.scene.scene import Scene, load_gaussians
from airplay.scene.spec import SceneSpec, parse_scene_yaml

__all__ = ["Gaussians", "Scene", "SceneError", "SceneSpec", "load_gaussians", "parse_scene_yaml"]
