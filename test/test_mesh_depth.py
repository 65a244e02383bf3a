"""Depth from the collision mesh by ray casting, against known geometry."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from airplay.scene.camera import PinholeCamera, map_from_base, viewmat_from_pose
from airplay.scene.mesh_depth import MeshRaycaster


@pytest.fixture(scope="module")
def wall():
    """A 0.2 m thick wall whose near face is the plane x = 5 m, 40 m wide, 20 m tall."""
    mesh = trimesh.creation.box(extents=(0.2, 40.0, 20.0))
    mesh.apply_translation((5.1, 0.0, 0.0))
    return mesh


def test_fronto_parallel_wall_has_constant_z_depth(wall):
    cam = PinholeCamera.from_fov(64, 48, 90.0)
    caster = MeshRaycaster(wall)
    depth = caster.depth(viewmat_from_pose(map_from_base(0, 0, 0, 0)), cam.K, cam.width, cam.height)
    assert depth.shape == (48, 64)
    np.testing.assert_allclose(depth, 5.0, atol=1e-4)


def test_tilted_view_depth_matches_analytic(wall):
    """Yawed 30 deg: z-depth of the pixel ray hitting x = 5 is 5 / (d_x / d_z) in camera terms."""
    cam = PinholeCamera.from_fov(32, 24, 60.0)
    vm = viewmat_from_pose(map_from_base(0, 0, 0, np.radians(30)))
    depth = MeshRaycaster(wall).depth(vm, cam.K, cam.width, cam.height)
    cam_to_world = np.linalg.inv(vm)
    for row, col in [(0, 0), (12, 16), (23, 31)]:
        ray = np.array([(col + 0.5 - cam.cx) / cam.fx, (row + 0.5 - cam.cy) / cam.fy, 1.0])
        d_world = cam_to_world[:3, :3] @ ray  # z-depth 1 along this ray
        assert depth[row, col] == pytest.approx(5.0 / d_world[0], rel=1e-5)


def test_rays_into_the_void_are_inf(wall):
    cam = PinholeCamera.from_fov(16, 16, 60.0)
    vm = viewmat_from_pose(map_from_base(0, 0, 0, np.pi))  # facing away
    depth = MeshRaycaster(wall).depth(vm, cam.K, cam.width, cam.height)
    assert np.isinf(depth).all()
