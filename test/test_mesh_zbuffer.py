"""The z-buffer rasterizer gives the image Embree ray casting gives (same pixel-centre rays)."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from airplay.scene.camera import PinholeCamera, look_at_viewmat, map_from_base, viewmat_from_pose
from airplay.scene.mesh_depth import MeshRaycaster
from airplay.render.mesh_zbuffer import NEAR_M, MeshDepthRasterizer

MIN_MASK_AGREEMENT = 0.999
MAX_REL_ERROR = 1e-3


def _compare(mesh, viewmats, K, width, height, caster=None, raster=None):
    """(hit/miss agreement share, max relative depth error where both hit, raster images)."""
    caster = caster or MeshRaycaster(mesh)
    if caster.engine != "embree":
        pytest.skip("embreex is not installed: no reference ray caster to compare with")
    raster = raster or MeshDepthRasterizer(mesh)
    agree, total, max_rel, images = 0, 0, 0.0, []
    for vm in viewmats:
        ref = caster.depth(vm, K, width, height)
        got = raster.depth(vm, K, width, height)
        assert got.shape == (height, width) and got.dtype == np.float32
        assert not np.isnan(got).any()
        assert (got[np.isfinite(got)] >= NEAR_M).all()
        hit_ref, hit_got = np.isfinite(ref), np.isfinite(got)
        agree += int((hit_ref == hit_got).sum())
        total += ref.size
        both = hit_ref & hit_got
        if both.any():
            max_rel = max(max_rel, float((np.abs(got[both] - ref[both]) / ref[both]).max()))
        images.append(got)
    return agree / total, max_rel, images


def _report(capsys, label, agreement, max_rel, total):
    with capsys.disabled():
        print(f"\n{label}: hit/miss agree on {agreement:.6%} of {total} px, max rel depth error {max_rel:.2e}")


def test_box_from_outside(capsys):
    box = trimesh.creation.box(extents=(2.0, 3.0, 1.5))
    cam = PinholeCamera.from_fov(96, 80, 70.0)
    eyes = [(5, 0, 0), (4, 3, 2), (-3, -4, -2.5), (0.3, 0.2, 6), (2, -5, 0.75)]
    vms = [look_at_viewmat(np.array(e, float), np.zeros(3)) for e in eyes]
    agreement, max_rel, images = _compare(box, vms, cam.K, cam.width, cam.height)
    _report(capsys, "box outside", agreement, max_rel, len(vms) * 96 * 80)
    assert agreement >= MIN_MASK_AGREEMENT and max_rel <= MAX_REL_ERROR
    assert all(np.isfinite(im).any() and np.isinf(im).any() for im in images)  # box and sky


@pytest.mark.parametrize("flip", [False, True])
def test_room_from_inside_has_no_cracks(capsys, flip):
    """Camera inside a closed box: every pixel sees a wall, whichever way the faces wind."""
    room = trimesh.creation.box(extents=(6.0, 5.0, 3.0))
    if flip:
        room.invert()
    cam = PinholeCamera(224, 224, 112.0, 112.0, 112.0, 112.0)
    rng = np.random.default_rng(7)
    vms = [viewmat_from_pose(map_from_base(0, 0, 0, 0))]  # optical axis through a face centre
    vms += [look_at_viewmat(np.zeros(3), np.array(t, float)) for t in [(1, 1, 1), (-1, 0.5, -0.3), (0, 0, 1)]]
    for _ in range(8):
        eye = rng.uniform((-2.5, -2.0, -1.2), (2.5, 2.0, 1.2))
        vms.append(viewmat_from_pose(map_from_base(*eye, rng.uniform(-np.pi, np.pi), rng.uniform(-1.2, 1.2),
                                                   rng.uniform(-0.5, 0.5))))
    agreement, max_rel, images = _compare(room, vms, cam.K, cam.width, cam.height)
    _report(capsys, f"room inside (flipped={flip})", agreement, max_rel, len(vms) * 224 * 224)
    for im in images:
        assert np.isfinite(im).all()
    assert agreement >= MIN_MASK_AGREEMENT and max_rel <= MAX_REL_ERROR


def test_shared_edge_through_pixel_centres_leaves_no_crack():
    """A square split along a diagonal that passes exactly through pixel centres (x == y)."""
    v = np.array([[-1.0, -1.0, 1.0], [1.0, -1.0, 1.0], [1.0, 1.0, 1.0], [-1.0, 1.0, 1.0]])
    cam = PinholeCamera(224, 224, 112.0, 112.0, 112.0, 112.0)  # the square fills the image
    for faces in ([[0, 1, 2], [0, 2, 3]], [[0, 2, 1], [0, 3, 2]], [[0, 1, 2], [0, 3, 2]], [[2, 0, 3], [1, 2, 0]]):
        square = trimesh.Trimesh(vertices=v, faces=faces, process=False)
        depth = MeshDepthRasterizer(square).depth(np.eye(4), cam.K, cam.width, cam.height)
        np.testing.assert_array_equal(depth, np.float32(1.0))


def test_floor_crossing_the_near_plane(capsys):
    """A 2 km floor under a camera 1.2 m up: its triangles reach behind the camera (clipping)."""
    floor = trimesh.Trimesh(
        vertices=[[-1000.0, -1000.0, 0.0], [1000.0, -1000.0, 0.0], [1000.0, 1000.0, 0.0], [-1000.0, 1000.0, 0.0]],
        faces=[[0, 1, 2], [0, 2, 3]], process=False)
    fine = trimesh.creation.box(extents=(40.0, 40.0, 0.1))  # a finer grid patch near the camera
    fine = fine.subdivide().subdivide()
    fine.apply_translation((0.0, 0.0, -0.05))
    scene = trimesh.util.concatenate([floor, fine])
    cam = PinholeCamera.from_fov(224, 224, 90.0)
    vms = []
    for pitch in (0.0, 0.3, 0.8, 1.5, -0.4):
        for yaw in (0.1, 2.0):
            vms.append(viewmat_from_pose(map_from_base(0.3, -0.2, 1.2, yaw, pitch, 0.05)))
    for mesh, label in ((floor, "floor"), (scene, "floor + fine patch")):
        agreement, max_rel, images = _compare(mesh, vms, cam.K, cam.width, cam.height)
        _report(capsys, label, agreement, max_rel, len(vms) * 224 * 224)
        assert agreement >= MIN_MASK_AGREEMENT and max_rel <= MAX_REL_ERROR
        assert np.isfinite(images[0][-1]).all() and np.isinf(images[0][0]).all()  # floor below, sky above
        assert np.isfinite(images[7]).all()  # looking 86 deg down


def test_empty_view_and_behind_camera_are_inf():
    wall = trimesh.creation.box(extents=(0.2, 40.0, 20.0))
    wall.apply_translation((5.1, 0.0, 0.0))
    cam = PinholeCamera.from_fov(64, 48, 90.0)
    raster = MeshDepthRasterizer(wall)
    assert np.isinf(raster.depth(viewmat_from_pose(map_from_base(0, 0, 0, np.pi)), cam.K, 64, 48)).all()
    front = raster.depth(viewmat_from_pose(map_from_base(0, 0, 0, 0)), cam.K, 64, 48)
    np.testing.assert_allclose(front, 5.0, rtol=1e-6)


@pytest.mark.parametrize("category", ["urban", "indoor", "vegetation"])
@pytest.mark.slow
def test_synthetic_scenes_match_embree(tmp_path, capsys, category):
    from airplay.scene import Scene
    from airplay.scene.synthetic import make_scene
    from airplay.scene.viewpoints import free_viewpoints

    make_scene(category, 0, tmp_path / category, gaussians_per_m2=2)
    scene = Scene.load(tmp_path / category)
    cam = scene.spec.camera.intrinsics.scaled(224, 224)
    mount = scene.spec.camera.mount
    caster, raster = MeshRaycaster(scene.mesh), MeshDepthRasterizer(scene.mesh)
    poses = free_viewpoints(scene, 5, 0, caster=caster) + free_viewpoints(scene, 5, 1, caster=caster)
    assert len(poses) >= 5
    vms = [viewmat_from_pose(map_from_base(*p), mount) for p in poses]
    # The same places with the body pitched and rolled as in flight.
    rng = np.random.default_rng(3)
    vms += [viewmat_from_pose(map_from_base(*p[:3], p[3], rng.uniform(-0.6, 0.6), rng.uniform(-0.4, 0.4)), mount)
            for p in poses]
    agreement, max_rel, images = _compare(scene.mesh, vms, cam.K, 224, 224, caster, raster)
    _report(capsys, f"{category} ({len(scene.mesh.faces)} faces)", agreement, max_rel, len(vms) * 224 * 224)
    assert agreement >= MIN_MASK_AGREEMENT
    assert max_rel <= MAX_REL_ERROR
    assert any(np.isfinite(im).mean() > 0.3 for im in images)
