"""Signed distance field of the collision mesh against analytic distances; the disk cache."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from airplay.sim.sdf import SignedDistanceField


def box(extents, centre):
    m = trimesh.creation.box(extents=extents)
    m.apply_translation(centre)
    return m


def box_sdf(p, centre, half):
    """Exact signed distance to an axis-aligned box."""
    q = np.abs(p - centre) - half
    outside = np.linalg.norm(np.maximum(q, 0.0), axis=1)
    inside = np.minimum(q.max(axis=1), 0.0)
    return outside + inside


def test_single_box_matches_analytic():
    mesh = box((2.0, 3.0, 1.5), (0.3, -0.2, 1.0))
    sdf = SignedDistanceField.from_mesh(mesh, [-3, -3, -1], [3, 3, 3], 0.1)
    p = np.random.default_rng(0).uniform([-2.5, -2.5, -0.5], [2.5, 2.5, 2.5], (2000, 3))
    truth = box_sdf(p, np.array([0.3, -0.2, 1.0]), np.array([1.0, 1.5, 0.75]))
    err = np.abs(sdf.query(p) - truth)
    assert err.max() < 0.13, f"max error {err.max():.3f} m"  # the documented bound at 0.1 m voxels
    far = np.abs(truth) > 0.1
    assert np.all(np.sign(sdf.query(p[far])) == np.sign(truth[far]))


def test_touching_components_with_coincident_faces():
    """A cabin standing on a body: the shared face must not flip inside/outside above it."""
    body = box((4.0, 2.0, 1.0), (0.0, 0.0, 0.5))
    cabin = box((2.0, 2.0, 1.0), (0.0, 0.0, 1.5))
    sdf = SignedDistanceField.from_mesh(trimesh.util.concatenate([body, cabin]), [-4, -3, -1], [4, 3, 4], 0.1)
    above = np.array([[0.0, 0.0, 3.0], [1.5, 0.0, 1.6], [0.0, 0.0, 2.5]])
    np.testing.assert_allclose(sdf.query(above), [1.0, 0.5, 0.5], atol=0.1)
    assert sdf.query([[0.0, 0.0, 1.0]])[0] < -0.5  # inside, at the shared face


def test_thin_slab_is_an_obstacle():
    slab = box((2.0, 2.0, 0.03), (0.0, 0.0, 0.765))  # thinner than a voxel
    sdf = SignedDistanceField.from_mesh(slab, [-2, -2, 0], [2, 2, 2], 0.1)
    assert sdf.query([[0.0, 0.0, 0.77]])[0] <= 0.0
    assert sdf.query([[0.0, 0.0, 1.3]])[0] == pytest.approx(0.52, abs=0.13)


def test_open_mesh_surface_is_solid():
    plane = trimesh.Trimesh(vertices=[[-2, -2, 0], [2, -2, 0], [2, 2, 0], [-2, 2, 0]], faces=[[0, 1, 2], [0, 2, 3]])
    sdf = SignedDistanceField.from_mesh(plane, [-2, -2, -1], [2, 2, 2], 0.1)
    assert sdf.query([[0.0, 0.0, 1.0]])[0] == pytest.approx(1.0, abs=0.1)


def test_for_scene_caches_on_disk(tmp_path):
    from airplay.scene import Scene
    from helpers.scene_factory import write_tiny_scene

    scene = Scene.load(write_tiny_scene(tmp_path / "s"))
    cache = tmp_path / "cache"
    first = SignedDistanceField.for_scene(scene, cache_dir=cache)
    files = list(cache.glob("sdf-*.npz"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    second = SignedDistanceField.for_scene(scene, cache_dir=cache)
    assert files[0].stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(first.values, second.values)
    # The box of the tiny scene is 4 m wide, centred at (0, 0, 2): 1 m outside its +x face.
    assert second.query([[3.0, 0.0, 2.0]])[0] == pytest.approx(1.0, abs=0.1)
    # A different resolution is a different cache entry.
    SignedDistanceField.for_scene(scene, resolution_m=0.2, cache_dir=cache)
    assert len(list(cache.glob("sdf-*.npz"))) == 2
    assert not list(cache.glob(".*tmp*"))
