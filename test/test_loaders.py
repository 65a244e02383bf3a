"""Splat loaders on real captures and round trips through our writers."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from airplay.scene.gaussians import SH_C0, Gaussians
from airplay.scene.ply_io import read_gaussians_ply, write_gaussians_ply
from airplay.scene.splat_io import read_splat, write_splat
from helpers.scene_factory import box_gaussians


def test_inria_ply_real_capture_degree3(real_data):
    g = read_gaussians_ply(real_data / "train-1000.ply")
    assert len(g) == 1000 and g.sh_degree == 3 and g.sh.shape == (1000, 16, 3)
    # Compare with an independent reader of the same file.
    plyfile = pytest.importorskip("plyfile")
    v = plyfile.PlyData.read(str(real_data / "train-1000.ply"))["vertex"].data
    np.testing.assert_array_equal(g.means[:, 0], v["x"])
    np.testing.assert_allclose(g.opacities, 1 / (1 + np.exp(-v["opacity"].astype(np.float64))), rtol=1e-6)
    np.testing.assert_allclose(g.scales[:, 2], np.exp(v["scale_2"].astype(np.float64)), rtol=1e-6)
    # f_rest is channel-major: f_rest_0..14 are red bands 1..15, f_rest_15.. green.
    np.testing.assert_array_equal(g.sh[:, 1, 0], v["f_rest_0"])
    np.testing.assert_array_equal(g.sh[:, 15, 0], v["f_rest_14"])
    np.testing.assert_array_equal(g.sh[:, 1, 1], v["f_rest_15"])
    np.testing.assert_array_equal(g.sh[:, 15, 2], v["f_rest_44"])
    q = np.stack([v[f"rot_{i}"] for i in range(4)], axis=1).astype(np.float64)
    np.testing.assert_allclose(g.quats_wxyz, q / np.linalg.norm(q, axis=1, keepdims=True), atol=1e-6)


def test_antimatter_splat_real_capture(real_data):
    path = real_data / "luma-seal.splat"
    g = read_splat(path)
    assert len(g) == 101_780 and g.sh_degree == 0
    raw = path.read_bytes()
    for i in (0, 12345, 101_779):
        rec = raw[32 * i: 32 * (i + 1)]
        pos, scale = struct.unpack("<3f", rec[:12]), struct.unpack("<3f", rec[12:24])
        r, gr, b, a = rec[24:28]
        qw = (rec[28] - 128) / 128
        np.testing.assert_allclose(g.means[i], pos, rtol=1e-7)
        np.testing.assert_allclose(g.scales[i], scale, rtol=1e-7)
        np.testing.assert_allclose(g.opacities[i], a / 255, atol=1e-7)
        np.testing.assert_allclose(g.sh[i, 0] * SH_C0 + 0.5, np.array([r, gr, b]) / 255, atol=1e-6)
        q = (np.frombuffer(rec[28:32], np.uint8).astype(np.float64) - 128) / 128
        np.testing.assert_allclose(g.quats_wxyz[i, 0], qw / np.linalg.norm(q), atol=1e-6)


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_ply_round_trip(tmp_path, degree):
    g = box_gaussians(np.random.default_rng(degree), n=123, sh_degree=degree)
    write_gaussians_ply(tmp_path / "g.ply", g)
    back = read_gaussians_ply(tmp_path / "g.ply")
    assert back.sh_degree == degree
    np.testing.assert_array_equal(back.means, g.means)
    np.testing.assert_allclose(back.scales, g.scales, rtol=1e-6)
    np.testing.assert_allclose(back.opacities, g.opacities, rtol=1e-5)
    np.testing.assert_allclose(back.sh, g.sh, rtol=1e-6)
    np.testing.assert_allclose(back.quats_wxyz, g.quats_wxyz, atol=1e-6)
    assert not list(tmp_path.glob(".g.ply.tmp*")), "temporary file left behind"


def test_splat_round_trip_quantised(tmp_path):
    g = box_gaussians(np.random.default_rng(7), n=50)
    write_splat(tmp_path / "g.splat", g)
    back = read_splat(tmp_path / "g.splat")
    np.testing.assert_array_equal(back.means, g.means)
    np.testing.assert_allclose(back.opacities, g.opacities, atol=1 / 255)
    np.testing.assert_allclose(back.colors_dc, g.colors_dc, atol=1 / 255)
    # 8-bit quaternions: the rotation is close up to sign.
    dots = np.abs(np.sum(back.quats_wxyz * g.quats_wxyz, axis=1))
    assert dots.min() > 0.98


def test_gaussians_transform_keeps_covariance_consistent():
    from airplay.scene.gaussians import quat_wxyz_to_matrix

    g = box_gaussians(np.random.default_rng(3), n=20, sh_degree=1)
    angle = 0.7
    r = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    moved = g.transformed(2.0, r, np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(moved.means, 2.0 * g.means @ r.T + [1, 2, 3], rtol=1e-5, atol=1e-5)
    cov = lambda x: quat_wxyz_to_matrix(x.quats_wxyz) @ (np.eye(3) * x.scales[:, None, :] ** 2) @ np.transpose(  # noqa: E731
        quat_wxyz_to_matrix(x.quats_wxyz), (0, 2, 1))
    np.testing.assert_allclose(cov(moved), 4.0 * r @ cov(g) @ r.T, atol=1e-5)
    np.testing.assert_allclose(moved.sh_rotation, r.T, atol=1e-12)


def test_gaussians_shape_checks():
    g = box_gaussians(np.random.default_rng(0), n=5)
    with pytest.raises(ValueError, match="Gaussians.scales"):
        Gaussians(g.means, g.scales[:4], g.quats_wxyz, g.opacities, g.sh)
    with pytest.raises(ValueError, match="SH coefficients"):
        Gaussians(g.means, g.scales, g.quats_wxyz, g.opacities, np.zeros((5, 5, 3), np.float32))


@pytest.mark.parametrize("suffix", [".ply", ".obj", ".glb"])
def test_collision_mesh_formats(tmp_path, suffix):
    """A scene's collision mesh may be PLY, OBJ or GLB; all load to the same closed box."""
    import trimesh
    import yaml

    from airplay.scene import Scene
    from airplay.scene.mesh_io import load_collision_mesh
    from helpers.scene_factory import write_tiny_scene

    folder = write_tiny_scene(tmp_path / "s")
    box = trimesh.creation.box(extents=(4.0, 4.0, 4.0))
    box.apply_translation((0, 0, 2.0))
    box.export(folder / f"mesh{suffix}")
    mesh = load_collision_mesh(folder / f"mesh{suffix}")
    assert mesh.volume == pytest.approx(64.0, rel=1e-6)
    np.testing.assert_allclose(mesh.bounds, [[-2, -2, 0], [2, 2, 4]], atol=1e-6)
    data = yaml.safe_load((folder / "scene.yaml").read_text())
    data["collision"] = {"file": f"mesh{suffix}"}
    (folder / "scene.yaml").write_text(yaml.safe_dump(data))
    assert Scene.load(folder).mesh.is_watertight
