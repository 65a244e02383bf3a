"""Frames (map ENU, base_link FLU, camera optical) and the splat-to-map alignment of scene.yaml."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from airplay.scene.camera import CameraMount, PinholeCamera, look_at_viewmat, map_from_base, viewmat_from_pose
from airplay.scene import Scene
from airplay.scene.ply_io import read_gaussians_ply, write_gaussians_ply
from airplay.scene.spec import CONVENTIONS
from helpers.scene_factory import write_tiny_scene

CAM = PinholeCamera.from_fov(100, 80, 90.0)


def project(viewmat, point):
    p = viewmat[:3, :3] @ point + viewmat[:3, 3]
    return CAM.fx * p[0] / p[2] + CAM.cx, CAM.fy * p[1] / p[2] + CAM.cy, p[2]


def test_camera_looks_along_base_link_x():
    vm = viewmat_from_pose(map_from_base(1.0, 2.0, 3.0, 0.0))
    u, v, z = project(vm, np.array([6.0, 2.0, 3.0]))  # 5 m east = straight ahead at yaw 0
    assert (u, v, z) == pytest.approx((CAM.cx, CAM.cy, 5.0))
    u, _, _ = project(vm, np.array([6.0, 3.0, 3.0]))  # north = to the vehicle's left
    assert u < CAM.cx
    _, v, _ = project(vm, np.array([6.0, 2.0, 4.0]))  # above = upper half of the image
    assert v < CAM.cy


def test_yaw_is_counter_clockwise_from_east():
    vm = viewmat_from_pose(map_from_base(0.0, 0.0, 1.0, np.pi / 2))
    assert project(vm, np.array([0.0, 4.0, 1.0])) == pytest.approx((CAM.cx, CAM.cy, 4.0))


def test_mount_pitch_down_and_offset():
    mount = CameraMount(offset_m=(0.2, 0.0, -0.1), pitch_deg=45.0)
    vm = viewmat_from_pose(map_from_base(0.0, 0.0, 5.0, 0.0), mount)
    # Camera at (0.2, 0, 4.9) looking 45 deg down: (3.2, 0, 1.9) is on the optical axis.
    u, v, z = project(vm, np.array([3.2, 0.0, 1.9]))
    assert (u, v) == pytest.approx((CAM.cx, CAM.cy), abs=1e-6)
    assert z == pytest.approx(3.0 * np.sqrt(2))


def test_look_at_agrees_with_pose():
    a = look_at_viewmat([0, 0, 1], [10, 0, 1])
    b = viewmat_from_pose(map_from_base(0, 0, 1, 0))
    np.testing.assert_allclose(a, b, atol=1e-12)


def test_viewmat_is_the_inverse_of_the_camera_pose():
    """viewmat_from_pose inverts map_T_cam as a rigid transform; map_from_base's yaw-only case is
    the general product's numbers; base_from_camera hands out a fresh array (its memo is safe)."""
    rng = np.random.default_rng(4)
    mount = CameraMount(offset_m=(0.12, -0.03, 0.05), pitch_deg=17.0)
    for _ in range(20):
        x, y, z = rng.uniform(-50, 50, 3)
        yaw, pitch, roll = rng.uniform(-np.pi, np.pi), rng.uniform(-1.0, 1.0), rng.uniform(-0.5, 0.5)
        for angles in ((yaw, 0.0, 0.0), (yaw, pitch, roll)):
            base = map_from_base(x, y, z, *angles)
            vm = viewmat_from_pose(base, mount)
            np.testing.assert_allclose(vm, np.linalg.inv(base @ mount.base_from_camera()), atol=1e-12)
            np.testing.assert_allclose(vm[:3, :3] @ vm[:3, :3].T, np.eye(3), atol=1e-12)
        cy, sy = np.cos(yaw), np.sin(yaw)
        general = np.array([[cy, -sy, 0.0], [sy, cy, 0.0], [0.0, 0.0, 1.0]]) @ np.eye(3) @ np.eye(3)
        assert np.array_equal(map_from_base(x, y, z, yaw)[:3, :3], general)
    m = mount.base_from_camera()
    m[:] = 0.0  # a caller's copy: the memoised transform is untouched
    assert np.array_equal(mount.base_from_camera()[3], [0.0, 0.0, 0.0, 1.0])


def test_conventions_are_proper_rotations():
    for name, c in CONVENTIONS.items():
        np.testing.assert_allclose(c @ c.T, np.eye(3), atol=1e-12, err_msg=name)
        assert np.linalg.det(c) == pytest.approx(1.0), name
    # OpenCV/COLMAP: y down -> map -z; OpenGL/nerfstudio: y up -> map +z.
    np.testing.assert_allclose(CONVENTIONS["opencv"] @ [0, 1, 0], [0, 0, -1])
    np.testing.assert_allclose(CONVENTIONS["opengl"] @ [0, 1, 0], [0, 0, 1])


@pytest.mark.parametrize("convention", ["opencv", "opengl"])
def test_scene_alignment_recovers_map_frame(tmp_path, convention):
    """A splat stored in another convention, scaled and moved, is put back by scene.yaml."""
    folder = write_tiny_scene(tmp_path / "s", sh_degree=1)
    truth = read_gaussians_ply(folder / "splat.ply")
    scale, yaw = 0.5, np.radians(30.0)
    rz = np.array([[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]])
    t = np.array([10.0, -4.0, 2.0])
    # Store: file = C^-1 (R^-1 (map - t) / s)
    c = CONVENTIONS[convention]
    stored = truth.transformed(1.0, np.eye(3), -t).transformed(1.0 / scale, c.T @ rz.T, np.zeros(3))
    write_gaussians_ply(folder / "splat.ply", stored)
    data = yaml.safe_load((folder / "scene.yaml").read_text())
    data["splat"] = {"file": "splat.ply", "convention": convention,
                     "transform": {"scale": scale, "rotation_rpy_deg": [0, 0, 30.0], "translation": t.tolist()}}
    (folder / "scene.yaml").write_text(yaml.safe_dump(data))
    scene = Scene.load(folder)
    np.testing.assert_allclose(scene.gaussians.means, truth.means, atol=1e-4)
    np.testing.assert_allclose(scene.gaussians.scales, truth.scales, rtol=1e-5)
    # View-dependent colour is evaluated in the file's frame: map directions are rotated back.
    np.testing.assert_allclose(scene.gaussians.sh_rotation, (rz @ c).T, atol=1e-9)
