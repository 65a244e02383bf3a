"""Level-of-detail rendering (airplay.render.lod): hierarchy, cut, quality, cache, settings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from airplay.render import PinholeCamera, look_at_viewmat, render
from airplay.render import lod
from airplay.render.api import ALPHA_MIN, EPS2D
from airplay.render.camera import map_from_base, viewmat_from_pose
from airplay.render.cpu_backend import _cull
from scene_factory import box_gaussians


@pytest.fixture(scope="module")
def splat():
    return box_gaussians(np.random.default_rng(3), 2000, sh_degree=1)


@pytest.fixture(scope="module")
def tree(splat):
    return lod.build_hierarchy(splat)


def cameras(width=64, height=64):
    cam = PinholeCamera.from_fov(width, height, 90.0)
    views = [look_at_viewmat([0.0, -9.0, 2.5], [0.0, 0.0, 2.0]),  # whole cube in view
             look_at_viewmat([1.0, -3.2, 1.0], [0.0, 0.0, 2.5]),  # close, cube cut by the image border
             look_at_viewmat([-14.0, 6.0, 6.0], [0.0, 0.0, 2.0])]
    return cam, views


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0.0 else 10.0 * math.log10(1.0 / mse)


def test_every_leaf_once_and_preorder_subtrees(splat, tree):
    n = len(splat)
    assert tree.n_nodes == 2 * n - 1
    leaves = tree.leaf_index[tree.leaf_index >= 0]
    assert np.array_equal(np.sort(leaves), np.arange(n))  # every Gaussian is one leaf, once
    assert np.array_equal((tree.right < 0), (tree.leaf_index >= 0))  # leaves have no children
    assert np.array_equal(tree.leaves_under(0), np.arange(n))
    # Preorder: children come after their parent; the left child is the next id.
    inner = np.flatnonzero(tree.right >= 0)
    assert np.all(tree.right[inner] > inner + 1)
    for p in inner[:: max(1, len(inner) // 50)]:
        a, b = tree.children(int(p))
        union = np.concatenate([tree.leaves_under(a), tree.leaves_under(b)])
        assert np.array_equal(np.sort(union), tree.leaves_under(int(p)))
        assert len(np.intersect1d(tree.leaves_under(a), tree.leaves_under(b))) == 0
    # Leaf rows are the original Gaussians.
    li = tree.leaf_index
    leaf = li >= 0
    assert np.array_equal(tree.means[leaf], splat.means[li[leaf]])
    assert np.array_equal(tree.opacities[leaf], splat.opacities[li[leaf]])
    assert np.array_equal(tree.sh[leaf], splat.sh[li[leaf]])


def test_parent_moments_match_children(splat, tree):
    cov = lod.covariances(tree.scales, tree.quats_wxyz)
    for p in np.flatnonzero(tree.right >= 0)[::7]:
        a, b = tree.children(int(p))
        wa, wb = tree.weight[a], tree.weight[b]
        assert tree.weight[p] == pytest.approx(wa + wb, rel=1e-12)
        mu = (wa * tree.means[a].astype(np.float64) + wb * tree.means[b].astype(np.float64)) / (wa + wb)
        np.testing.assert_allclose(tree.means[p], mu, rtol=0, atol=1e-5)
        da, db = tree.means[a] - mu, tree.means[b] - mu
        sigma = (wa * (cov[a] + np.outer(da, da)) + wb * (cov[b] + np.outer(db, db))) / (wa + wb)
        np.testing.assert_allclose(cov[p], sigma, rtol=0, atol=2e-5 * max(1.0, np.abs(sigma).max()))
        np.testing.assert_allclose(tree.sh[p], (wa * tree.sh[a] + wb * tree.sh[b]) / (wa + wb), atol=1e-5)
        # coverage kept: opacity x area = weight (below the cap)
        area = lod.area_proxy(tree.scales[p : p + 1])[0]
        assert tree.opacities[p] == pytest.approx(min(lod.OPACITY_CAP, tree.weight[p] / area), rel=1e-4)
        # bounds: sphere holds the means below, extents and sizes shrink going down
        under = tree.leaves_under(int(p))
        c, r = tree.bounds[p, :3].astype(np.float64), float(tree.bounds[p, 3])
        assert np.linalg.norm(splat.means[under] - c, axis=1).max() <= r
        assert tree.bounds[p, 4] >= np.abs(splat.scales[under]).max()
        assert tree.bounds[p, 5] >= max(tree.bounds[a, 5], tree.bounds[b, 5])
    # The root's moments are those of all the leaves (weights opacity x area).
    w = splat.opacities.astype(np.float64) * lod.area_proxy(splat.scales)
    np.testing.assert_allclose(tree.means[0], (w[:, None] * splat.means).sum(0) / w.sum(), atol=1e-5)
    assert tree.weight[0] == pytest.approx(w.sum(), rel=1e-9)


def test_area_proxy_sphere_and_disk():
    np.testing.assert_allclose(lod.area_proxy(np.array([[2.0, 2.0, 2.0]])), [math.pi * 4.0])
    np.testing.assert_allclose(lod.area_proxy(np.array([[2.0, 1.0, 0.0]])), [math.pi * 2.0 / 2.0], rtol=0.01)


def test_tiny_threshold_is_exact(splat, tree):
    cam, views = cameras()
    for vm in views:
        valid = np.empty(len(splat), np.uint8)
        depth = np.empty(len(splat), np.float32)
        _cull(splat.means, splat.scales, splat.opacities, vm, cam.K, 64, 64, 0.05, 1e4, EPS2D, ALPHA_MIN,
              valid, depth)
        cut = lod.select(tree, vm, cam.K, 64, 64, 1e-9, 0.05, 1e4)
        assert np.all(tree.leaf_index[cut] >= 0)  # leaves only
        assert np.array_equal(np.sort(tree.leaf_index[cut]), np.flatnonzero(valid))  # exactly the visible ones
        assert 0 < len(cut) <= len(splat)
        exact = render(splat, vm, cam.K, 64, 64, backend="cpu")
        mine = render(splat, vm, cam.K, 64, 64, backend="cpu", lod_px=1e-9, lod=tree)
        assert np.array_equal(mine.rgb, exact.rgb)
        assert np.array_equal(mine.alpha, exact.alpha)
        assert np.array_equal(mine.depth, exact.depth)


def test_zero_and_none_are_the_exact_renderer(splat, tree):
    cam, views = cameras()
    exact = render(splat, views[0], cam.K, 64, 64, backend="cpu")
    for px in (0, 0.0, None):
        out = render(splat, views[0], cam.K, 64, 64, backend="cpu", lod_px=px, lod=tree)
        assert np.array_equal(out.rgb, exact.rgb) and np.array_equal(out.depth, exact.depth)


def test_larger_threshold_selects_fewer(splat, tree):
    cam, views = cameras()
    counts = [len(lod.select(tree, views[2], cam.K, 64, 64, px, 0.05, 1e4)) for px in (1e-9, 1.0, 2.0, 4.0, 16.0)]
    assert all(b < a for a, b in zip(counts, counts[1:])), counts
    cut = lod.select(tree, views[2], cam.K, 64, 64, 4.0, 0.05, 1e4)
    assert np.any(tree.leaf_index[cut] < 0)  # merged nodes are used
    # A cut never holds a node together with one of its ancestors.
    covered = np.concatenate([tree.leaves_under(int(k)) for k in cut])
    assert len(covered) == len(np.unique(covered))


def test_frustum_culling_of_nodes(splat, tree):
    cam, _ = cameras()
    away = look_at_viewmat([0.0, -9.0, 2.5], [0.0, -20.0, 2.5])  # looking away from the cube
    assert len(lod.select(tree, away, cam.K, 64, 64, 2.0, 0.05, 1e4, culled=False)) == 0
    out = render(splat, away, cam.K, 64, 64, backend="cpu", lod_px=2.0, lod=tree, background=(0.2, 0.3, 0.4))
    np.testing.assert_allclose(out.rgb[0], np.broadcast_to([0.2, 0.3, 0.4], (64, 64, 3)), atol=1e-6)
    assert np.all(out.alpha == 0)


@pytest.fixture(scope="module")
def vegetation(tmp_path_factory):
    from airplay.scene.scene import Scene
    from airplay.scene.synthetic import make_scene

    folder = tmp_path_factory.mktemp("veg") / "veg"
    make_scene("vegetation", 1, folder, gaussians_per_m2=30, name="veg")  # ~9e4 Gaussians
    scene = Scene.load(folder)
    return scene, lod.build_hierarchy(scene.gaussians)


# Measured (vegetation seed 1, 30 G/m^2, these 6 poses), PSNR of LOD vs exact, mean / min:
# 64x64: lod_px 1: 51.5 / 43.6 dB, 2: 40.5 / 36.2 dB, 4: 32.8 / 30.5 dB; 224x224 (the scene
# camera): lod_px 2: inf (most views identical) / 50.8 dB. The bounds leave a margin.
@pytest.mark.parametrize("size,lod_px,mean_db,min_db", [(64, 1.0, 46.0, 40.0), (64, 2.0, 37.0, 33.0),
                                                        (64, 4.0, 30.0, 28.0), (224, 2.0, 48.0, 45.0)])
def test_quality_against_exact(vegetation, size, lod_px, mean_db, min_db):
    scene, tree = vegetation
    spec = scene.spec
    cam = spec.camera.intrinsics.scaled(size, size)
    poly = np.asarray(spec.navigable.polygon)
    rng = np.random.default_rng(5)
    scores = []
    for _ in range(6):
        x, y = rng.uniform(poly.min(0), poly.max(0))
        vm = viewmat_from_pose(map_from_base(x, y, 1.8, rng.uniform(-3, 3)), spec.camera.mount)
        exact = render(scene.gaussians, vm, cam.K, size, size, backend="cpu", background=spec.background_rgb)
        mine = render(scene.gaussians, vm, cam.K, size, size, backend="cpu", background=spec.background_rgb,
                      lod_px=lod_px, lod=tree)
        scores.append(psnr(mine.rgb, exact.rgb))
    assert np.mean(scores) >= mean_db and np.min(scores) >= min_db, scores


def test_cache_reuse_and_invalidation(tmp_path, splat):
    first = lod.hierarchy_for(splat, cache_dir=tmp_path)
    files = sorted(tmp_path.glob("lod-*.npz"))
    assert len(files) == 1 and first.key in files[0].name
    stamp = files[0].stat().st_mtime_ns
    assert lod.hierarchy_for(splat, cache_dir=tmp_path) is first  # memoised in the process
    # Same content, another object: read from the disk cache, not rebuilt.
    same = box_gaussians(np.random.default_rng(3), 2000, sh_degree=1)
    again = lod.hierarchy_for(same, cache_dir=tmp_path)
    assert again is not first and again.key == first.key
    assert files[0].stat().st_mtime_ns == stamp and len(list(tmp_path.glob("lod-*.npz"))) == 1
    for name in lod.GaussianHierarchy._ARRAYS:
        assert np.array_equal(getattr(again, name), getattr(first, name)), name
    # Changed splat: a new key, a new tree.
    op = same.opacities.copy()
    op[0] *= 0.5
    from airplay.scene.gaussians import Gaussians

    changed = Gaussians(same.means, same.scales, same.quats_wxyz, op, same.sh, same.sh_rotation)
    other = lod.hierarchy_for(changed, cache_dir=tmp_path)
    assert other.key != first.key and len(list(tmp_path.glob("lod-*.npz"))) == 2
    assert not np.array_equal(other.weight, first.weight)
    # A corrupt entry is rebuilt.
    files[0].write_bytes(b"not an npz")
    third = box_gaussians(np.random.default_rng(3), 2000, sh_degree=1)
    rebuilt = lod.hierarchy_for(third, cache_dir=tmp_path)
    assert np.array_equal(rebuilt.bounds, first.bounds)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "2", True])
def test_bad_lod_px(splat, tree, bad):
    cam, views = cameras()
    with pytest.raises(ValueError, match="lod_px"):
        render(splat, views[0], cam.K, 64, 64, backend="cpu", lod_px=bad, lod=tree)


def test_protocol_setting(tmp_path):
    from airplay.config import config_dir
    from airplay.tasks.protocol import Protocol, ProtocolError, load_protocol

    assert load_protocol().render_lod_px == Protocol().render_lod_px > 0
    text = (config_dir() / "protocol.yaml").read_text()
    assert "render:" in text
    path = tmp_path / "protocol.yaml"
    path.write_text(text.replace("lod_px: 2.0", "lod_px: 0"))
    assert load_protocol(path).render_lod_px == 0.0
    path.write_text(text.replace("lod_px: 2.0", "lod_px: -1"))
    with pytest.raises(ProtocolError, match="render.lod_px"):
        load_protocol(path)
