"""Level-of-detail rendering (airplay.render.lod): hierarchy, cut, quality, cache, settings."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from airplay.render import PinholeCamera, look_at_viewmat, render
from airplay.render import lod
from airplay.render.api import ALPHA_MIN, EPS2D
from airplay.render.cpu_geometry import _cull
from airplay.render.lod import CellSettings
from airplay.render.lod.cells import _cell_cache
from airplay.render.lod.cut import GATHER, _cut, _cut_workspace
from airplay.scene.camera import map_from_base, viewmat_from_pose
from helpers.scene_factory import box_gaussians


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


def test_node_gaussians_are_interleaved_rows(splat, tree):
    """The five attribute fields are views of one row per node (the gather reads 1-2 cache lines
    a node instead of 5); the rows hold the built values, zero padding, and a cell's arrays
    are those rows in the cell's order."""
    n, nk = tree.n_nodes, tree.sh.shape[1]
    rows = tree.rows
    assert rows.dtype == np.float32 and rows.flags.c_contiguous
    assert rows.shape == (n, lod.row_width(nk)) and rows.shape[1] % lod.ROW_FLOATS == 0 and rows.shape[1] >= 11 + 3 * nk
    for name in ("means", "scales", "quats_wxyz", "opacities", "sh"):
        assert np.shares_memory(getattr(tree, name), rows), name
    leaves = tree.leaf_index >= 0
    li = tree.leaf_index[leaves]
    assert np.array_equal(tree.means[leaves], splat.means[li]) and np.array_equal(tree.sh[leaves], splat.sh[li])
    assert not rows[:, 11 + 3 * nk:].any()  # the padding
    # Rebuilt from its own fields (as the disk cache does): the same rows.
    again = lod.GaussianHierarchy(n_leaves=tree.n_leaves, key=tree.key,
                                  **{k: np.array(getattr(tree, k)) for k in lod.GaussianHierarchy._ARRAYS})
    assert np.array_equal(again.rows, rows) and not np.shares_memory(again.rows, rows)
    # A cell's gathered arrays are the rows of its nodes.
    cam, views = cameras()
    ids = lod.select(tree, views[0], cam.K, 64, 64, 2.0, 0.05, 100.0, culled=False)
    means, scales, quats, opac, sh = (np.empty((len(ids), 3), np.float32), np.empty((len(ids), 3), np.float32),
                                      np.empty((len(ids), 4), np.float32), np.empty(len(ids), np.float32),
                                      np.empty((len(ids), nk, 3), np.float32))
    GATHER[False](ids.astype(np.int32), len(ids), rows, means, scales, quats, opac, sh)
    g = tree.gaussians(ids, splat.sh_rotation)
    assert len(ids) > 100
    for got, expected in ((means, g.means), (scales, g.scales), (quats, g.quats_wxyz), (opac, g.opacities), (sh, g.sh)):
        assert np.array_equal(got, expected)
    with pytest.raises(ValueError, match="scales"):
        lod.GaussianHierarchy(n_leaves=tree.n_leaves, **{**{k: getattr(tree, k) for k in lod.GaussianHierarchy._ARRAYS},
                                                         "scales": tree.scales[:, :2]})


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "2", True])
def test_bad_lod_px(splat, tree, bad):
    cam, views = cameras()
    with pytest.raises(ValueError, match="lod_px"):
        render(splat, views[0], cam.K, 64, 64, backend="cpu", lod_px=bad, lod=tree)


def test_protocol_setting(tmp_path):
    from airplay.config import config_dir
    from airplay.tasks.protocol import Protocol, load_protocol
    from airplay.yaml_config import ConfigError

    assert load_protocol().render_lod_px == Protocol().render_lod_px > 0
    text = (config_dir() / "protocol.yaml").read_text()
    assert "render:" in text
    path = tmp_path / "protocol.yaml"
    path.write_text(text.replace("lod_px: 2.0", "lod_px: 0"))
    assert load_protocol(path).render_lod_px == 0.0
    path.write_text(text.replace("lod_px: 2.0", "lod_px: -1"))
    with pytest.raises(ConfigError, match="render.lod_px"):
        load_protocol(path)


# -- pose cells: one cut per (position, heading) cell, reused -------------------------------------------

CELL_M, CELL_DEG = 0.5, 15.0


def cell_poses(cell, n, rng, cell_m=CELL_M, cell_deg=CELL_DEG):
    """n poses (x, y, z, yaw) inside ``cell``: its corners (position and heading extremes) and random ones."""
    i, j, k, y = cell
    lo = np.array([i, j, k], float) * cell_m
    b = math.radians(cell_deg)
    out = []
    for cx in (0.0, 1.0 - 1e-9):
        for cy in (0.0, 1.0 - 1e-9):
            for cz in (0.0, 1.0 - 1e-9):
                for cyaw in (0.0, 1.0 - 1e-9):
                    out.append((*(lo + cell_m * np.array([cx, cy, cz])), (y + cyaw) * b))
    for _ in range(n):
        out.append((*(lo + cell_m * rng.uniform(0, 1, 3)), (y + rng.uniform()) * b))
    return np.array(out)


def cell_image(splat, tree, pose, mount, cam, lod_px=2.0, cell_m=CELL_M, cell_deg=CELL_DEG, profile=None):
    settings = CellSettings(mount, cam.K, cam.width, cam.height, (0.0, 0.0, 0.0), 0.05, 1e4, lod_px, cell_m, cell_deg)
    rgb, depth, alpha = lod.render_lod_cell_cpu(splat, tree, pose[None, :3], pose[None, 3:4], settings, profile=profile)
    return rgb[0], depth[0], alpha[0]



@pytest.fixture()
def mount():
    from airplay.scene.camera import CameraMount

    lod.clear_cell_cache()
    yield CameraMount(offset_m=(0.1, 0.0, -0.05), pitch_deg=10.0)
    lod.clear_cell_cache()


def test_cell_image_is_a_function_of_the_pose(splat, tree, mount):
    cam = PinholeCamera.from_fov(64, 64, 90.0)
    pose = np.array([0.3, -6.2, 2.1, math.radians(95.0)])  # looking at the cube
    cell = lod.pose_cell(pose[:3], pose[3], CELL_M, CELL_DEG)
    cold = cell_image(splat, tree, pose, mount, cam)
    assert cold[2].max() > 0.5  # something drawn
    same_cell = cell_poses(cell, 5, np.random.default_rng(0))
    for p in same_cell:
        assert lod.pose_cell(p[:3], p[3], CELL_M, CELL_DEG) == cell
        cell_image(splat, tree, p, mount, cam)
    warm = cell_image(splat, tree, pose, mount, cam)
    for a, b in zip(cold, warm):
        assert np.array_equal(a, b)
    # other cells (evicting this one), then the pose again; and with another lod_px in between
    for d in range(lod.CELL_CACHE_SIZE + 2):
        cell_image(splat, tree, pose + np.array([CELL_M * (d + 1), 0.0, 0.0, 0.0]), mount, cam)
    cell_image(splat, tree, pose, mount, cam, lod_px=4.0)
    again = cell_image(splat, tree, pose, mount, cam)
    for a, b in zip(cold, again):
        assert np.array_equal(a, b)


def test_cell_image_without_depth_is_the_same_image(splat, tree, mount):
    """depth=False (what collection asks for: its depth images come from the mesh) renders with
    the rasterizer compiled without the expected depth and changes nothing else, at one tile
    (64x64, one thread) and at several."""
    pose = np.array([0.3, -6.2, 2.1, math.radians(95.0)])
    for size in (64, 150):
        cam = PinholeCamera.from_fov(size, size, 90.0)
        rgb, depth, alpha = cell_image(splat, tree, pose, mount, cam)
        assert alpha.max() > 0.5 and np.isfinite(depth).any()
        rgb2, none, alpha2 = lod.render_lod_cell_cpu(
            splat, tree, pose[None, :3], pose[None, 3:4],
            CellSettings(mount, cam.K, cam.width, cam.height, (0.0, 0.0, 0.0), 0.05, 1e4, 2.0, CELL_M, CELL_DEG,
                         depth=False))
        assert none is None
        assert np.array_equal(rgb2[0], rgb) and np.array_equal(alpha2[0], alpha)


@pytest.mark.parametrize("rows, cols", [(4, 5), (11, 13)])  # ties of 10 (insertion sort) and of 71-72
def test_cell_arrays_keep_the_exact_order_of_gaussians_at_equal_depth(rows, cols):
    """A cell's arrays are in the depth order of its reference view (a heading in the middle of the
    yaw bin); a view at another heading sees Gaussians at equal depth, which it must draw in the
    exact renderer's order (splat index), not in the arrays' order. Two planes of overlapping,
    differently coloured Gaussians facing a camera at yaw 0: the Gaussians of a plane have the same
    optical depth, bit for bit."""
    from airplay.scene.camera import CameraMount
    from airplay.render.cpu_backend import _render_one
    from airplay.scene.gaussians import Gaussians, rgb_to_sh_dc

    rng = np.random.default_rng(7)
    gy, gz = np.meshgrid(np.linspace(-1.5, 1.5, cols), np.linspace(0.2, 2.8, rows))
    n = gy.size
    means = np.stack([np.where(np.arange(n) % 2 == 0, 3.0, 4.0), gy.ravel(), gz.ravel()], axis=1).astype(np.float32)
    q = rng.normal(size=(n, 4))
    plane = Gaussians(means=means, scales=rng.uniform(0.15, 0.3, (n, 3)).astype(np.float32),
                      quats_wxyz=(q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32),
                      opacities=rng.uniform(0.4, 0.9, n).astype(np.float32),
                      sh=rgb_to_sh_dc(rng.uniform(0.0, 1.0, (n, 1, 3))).astype(np.float32))
    tree = lod.build_hierarchy(plane)
    mount = CameraMount(offset_m=(0.0, 0.0, 0.0), pitch_deg=0.0)
    cam = PinholeCamera.from_fov(64, 64, 90.0)
    pose = np.array([0.1, 0.0, 1.5, 0.0])  # yaw 0: optical z = x - 0.1
    view = viewmat_from_pose(map_from_base(*pose[:3], pose[3]), mount)
    z = np.float32(means.astype(np.float64) @ view[2, :3] + view[2, 3])
    assert np.all(z[::2] == z[0]) and np.all(z[1::2] == z[1]) and z[0] < z[1]
    lod.clear_cell_cache()
    cell = lod.pose_cell(pose[:3], pose[3], CELL_M, CELL_DEG)
    (arrays, rank) = lod.cell_cut_arrays(tree, cell, CELL_M, CELL_DEG, mount, cam.K, 64, 64, 1e-9, 0.05, 1e4,
                                         plane.sh_rotation)
    assert len(rank) == n and not np.array_equal(rank, np.arange(n))  # the arrays are permuted
    exact = render(plane, view, cam.K, 64, 64, backend="cpu")
    mine = cell_image(plane, tree, pose, mount, cam, lod_px=1e-9)
    assert np.array_equal(mine[0], exact.rgb[0]) and np.array_equal(mine[2], exact.alpha[0])
    # the same arrays drawn in their own order at ties give another image: the test sees the order
    rgb = np.empty((64, 64, 3), np.float32)
    depth = np.empty((64, 64), np.float32)
    alpha = np.empty((64, 64), np.float32)
    _render_one(arrays, view, cam.K, 64, 64, np.zeros(3, np.float32), 0.05, 1e4, rgb, depth, alpha)
    assert not np.array_equal(rgb, exact.rgb[0])
    lod.clear_cell_cache()


@pytest.mark.slow
def test_cell_cut_is_never_coarser_than_any_view_cut(splat, tree, mount):
    from airplay.scene.camera import map_from_base, viewmat_from_pose

    cam = PinholeCamera.from_fov(64, 64, 90.0)
    rng = np.random.default_rng(1)
    lod_px = 2.0
    f = max(cam.fx, cam.fy)
    for pose in ([0.3, -6.2, 2.1, math.radians(95.0)], [-3.1, -5.0, 1.2, math.radians(50.0)],
                 [7.9, 1.4, 3.7, math.radians(183.0)]):
        cell = lod.pose_cell(pose[:3], pose[3], CELL_M, CELL_DEG)
        vm, grow, chord, box = lod.cell_view(cell, CELL_M, CELL_DEG, mount)
        m = _cut(tree, vm, cam.K, 64, 64, lod_px, 0.05, 1e4, grow, chord, box)
        cut = _cut_workspace().ids[:m].copy()
        inner = cut[tree.right[cut] >= 0]
        assert len(inner) > 0  # merged nodes are used
        # subtree id ranges of the cell cut's nodes (preorder: a subtree is [k, end(k)])
        end = cut.copy()
        while np.any(tree.right[end] >= 0):
            end = np.where(tree.right[end] >= 0, tree.right[end], end)
        order = np.argsort(cut)
        starts, ends = cut[order], end[order]
        for p in cell_poses(cell, 12, rng):
            view = viewmat_from_pose(map_from_base(*p[:3], p[3]), mount)
            centre = -view[:3, :3].T @ view[:3, 3]
            # every merged node of the cell cut projects to <= lod_px px from this camera
            b = tree.bounds[inner].astype(np.float64)
            dist = np.linalg.norm(b[:, :3] - centre, axis=1) - b[:, 3]
            assert np.all(dist > 0) and np.all(f * b[:, 5] <= lod_px * dist)
            # every node the renderer draws of this view's own cut is in the cell cut or refined there
            for v in lod.select(tree, view, cam.K, 64, 64, lod_px, 0.05, 1e4, culled=True):
                s = np.searchsorted(starts, v, side="right") - 1  # the cell node at or before v in preorder
                if s >= 0 and ends[s] >= v:  # v inside that node's subtree: it must be v itself
                    assert starts[s] == v
                else:  # v is refined: some cell node lies inside v's subtree
                    ve = v
                    while tree.right[ve] >= 0:
                        ve = tree.right[ve]
                    nxt = np.searchsorted(starts, v, side="left")
                    assert nxt < len(starts) and starts[nxt] <= ve
            # at a tiny threshold the cell image is the exact image, bit for bit
            exact = render(splat, view, cam.K, 64, 64, backend="cpu")
            mine = cell_image(splat, tree, p, mount, cam, lod_px=1e-9)
            assert np.array_equal(mine[0], exact.rgb[0]) and np.array_equal(mine[1], exact.depth[0])


def test_cell_cache_eviction(splat, tree, mount):
    cam = PinholeCamera.from_fov(64, 64, 90.0)
    base = np.array([0.3, -6.2, 2.1, math.radians(95.0)])
    prof = {}
    poses = [base + np.array([CELL_M * d, 0.0, 0.0, 0.0]) for d in range(lod.CELL_CACHE_SIZE + 1)]
    for p in poses:
        cell_image(splat, tree, p, mount, cam, profile=prof)
    assert prof["cell_misses"] == lod.CELL_CACHE_SIZE + 1 and prof.get("cell_hits", 0) == 0
    assert len(_cell_cache()) == lod.CELL_CACHE_SIZE
    cell_image(splat, tree, poses[-1], mount, cam, profile=prof)  # most recent: a hit
    cell_image(splat, tree, poses[1], mount, cam, profile=prof)  # oldest kept: a hit, now the most recent
    assert prof["cell_hits"] == 2
    cell_image(splat, tree, poses[0], mount, cam, profile=prof)  # evicted first: a miss, evicts poses[2]
    assert prof["cell_misses"] == lod.CELL_CACHE_SIZE + 2
    cell_image(splat, tree, poses[1], mount, cam, profile=prof)
    assert prof["cell_hits"] == 3
    cell_image(splat, tree, poses[2], mount, cam, profile=prof)
    assert prof["cell_misses"] == lod.CELL_CACHE_SIZE + 3
    # a different lod_px is another cache entry
    cell_image(splat, tree, poses[2], mount, cam, lod_px=3.0, profile=prof)
    assert prof["cell_misses"] == lod.CELL_CACHE_SIZE + 4


@pytest.mark.parametrize("cell", [(-1.0, 15.0), (0.5, 0.0), (0.0, 15.0), (0.5, 200.0), (float("nan"), 15.0)])
def test_bad_cell(splat, tree, mount, cell):
    cam = PinholeCamera.from_fov(64, 64, 90.0)
    with pytest.raises(ValueError, match="cell"):
        cell_image(splat, tree, np.array([0.0, -6.0, 2.0, 1.5]), mount, cam, cell_m=cell[0], cell_deg=cell[1])


def test_protocol_cell_setting(tmp_path):
    import yaml

    from airplay.config import config_dir
    from airplay.tasks.protocol import Protocol, load_protocol
    from airplay.yaml_config import ConfigError

    data = yaml.safe_load((config_dir() / "protocol.yaml").read_text())
    path = tmp_path / "protocol.yaml"

    def with_render(**render):
        d = {**data, "render": {k: v for k, v in {**data.get("render", {}), **render}.items() if v is not None}}
        path.write_text(yaml.safe_dump(d))
        return path

    p = load_protocol(with_render(lod_cell_m=0.5, lod_cell_deg=15))
    assert (p.render_lod_cell_m, p.render_lod_cell_deg) == (0.5, 15.0)
    p = load_protocol(with_render(lod_cell_m=0, lod_cell_deg=0))
    assert (p.render_lod_cell_m, p.render_lod_cell_deg) == (0.0, 0.0)  # off
    p = load_protocol(with_render(lod_cell_m=None, lod_cell_deg=None))
    assert (p.render_lod_cell_m, p.render_lod_cell_deg) == (Protocol.render_lod_cell_m, Protocol.render_lod_cell_deg)
    assert (load_protocol().render_lod_cell_m, load_protocol().render_lod_cell_deg) == (0.5, 15.0)  # shipped
    for bad in ({"lod_cell_m": 0.5, "lod_cell_deg": 0}, {"lod_cell_m": -1, "lod_cell_deg": 15},
                {"lod_cell_m": 0, "lod_cell_deg": 15}, {"lod_cell_m": 0.5, "lod_cell_deg": 200}):
        with pytest.raises(ConfigError, match="lod_cell"):
            load_protocol(with_render(**bad))


def test_world_renders_by_pose_cell_when_the_protocol_says_so(indoor_2, scene_cache):
    from airplay.world import World

    world = World.load(indoor_2, cache_dir=scene_cache)
    cells = replace(world, protocol=replace(world.protocol, render_lod_cell_m=0.5, render_lod_cell_deg=15.0))
    world = replace(world, protocol=replace(world.protocol, render_lod_cell_m=0.0, render_lod_cell_deg=0.0))
    spec = world.scene.spec
    cam = spec.camera.intrinsics
    lo = np.asarray(spec.navigable.polygon).min(axis=0)
    hi = np.asarray(spec.navigable.polygon).max(axis=0)
    pose = np.array([*(0.5 * (lo + hi)), 1.5])
    lod.clear_cell_cache()
    rgb, _ = cells.camera_images(pose, 0.7, "cpu", depth=False)
    ref = lod.render_lod_cell_cpu(world.scene.gaussians, world.lod_hierarchy(), pose[None], [0.7], CellSettings(
        spec.camera.mount, cam.K, cam.width, cam.height, spec.background_rgb, 0.05, 1e4, world.protocol.render_lod_px,
        0.5, 15.0))[0]
    assert np.array_equal(rgb, np.clip(np.rint(np.clip(ref[0], 0, 1) * 255), 0, 255).astype(np.uint8))
    cells.camera_images(pose + np.array([0.2, 0.1, 0.0]), 0.75, "cpu", depth=False)  # same cell, then the pose
    assert np.array_equal(cells.camera_images(pose, 0.7, "cpu", depth=False)[0], rgb)
    view, _ = world.camera_images(pose, 0.7, "cpu", depth=False)  # cells off: the per-view cut, close
    assert psnr(view / 255.0, rgb / 255.0) > 35.0


def test_cell_renderer_draws_what_the_cell_cut_and_the_pose_viewmat_give(splat, tree, mount):
    """CellRenderer (the per-frame path of World.camera_images and render_lod_cell_cpu) against
    the pieces it prepares once: viewmat_from_pose(map_from_base(...)) bit for bit, and the image
    of the cell's cut arrays rendered from that viewmat."""
    from airplay.render.cpu_backend import _render_one

    cam = PinholeCamera.from_fov(48, 40, 80.0)
    bg = (0.2, 0.3, 0.4)
    settings = CellSettings(mount, cam.K, 48, 40, bg, 0.05, 100.0, 2.0, CELL_M, CELL_DEG, depth=False)
    renderer = lod.CellRenderer(splat, tree, settings)
    rng = np.random.default_rng(8)
    lod.clear_cell_cache()
    seen = 0
    for _ in range(12):
        x, y, z, yaw = rng.uniform(-3, 3), rng.uniform(-10, -5), rng.uniform(0.5, 3), rng.uniform(-4, 4)
        vm = viewmat_from_pose(map_from_base(x, y, z, yaw), mount)
        assert renderer.viewmat(x, y, z, yaw).tobytes() == vm.tobytes()
        got = renderer.rgb(np.array([x, y, z]), yaw)
        arrays, rank = lod.cell_cut_arrays(tree, lod.pose_cell((x, y, z), yaw, CELL_M, CELL_DEG), CELL_M, CELL_DEG,
                                           mount, cam.K, 48, 40, 2.0, 0.05, 100.0, splat.sh_rotation)
        ref, alpha = np.empty((40, 48, 3), np.float32), np.empty((40, 48), np.float32)
        _render_one(arrays, vm, cam.K, 48, 40, np.array(bg, np.float32), 0.05, 100.0, ref, None, alpha, rank=rank)
        assert got.dtype == np.float32 and got.tobytes() == ref.tobytes()
        seen += float(got.std()) > 0.02  # the cube in view, not just background
        batch = lod.render_lod_cell_cpu(splat, tree, [(x, y, z)], [yaw], settings)[0]
        assert batch[0].tobytes() == ref.tobytes()
    assert seen >= 4, seen
    with pytest.raises(ValueError, match="near_m"):
        lod.CellRenderer(splat, tree, replace(settings, near_m=0.0))
