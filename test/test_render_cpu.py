"""The CPU rasterizer against a plain per-pixel reference, and its documented behaviour."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.scene_factory import box_gaussians

from airplay.render.api import render
from airplay.render.cpu_backend import render_cpu
from airplay.render.reference import reference_render
from airplay.scene.camera import PinholeCamera, look_at_viewmat
from airplay.scene.gaussians import Gaussians, rgb_to_sh_dc

BLACK = np.zeros(3, np.float32)


def random_scene(seed: int, n: int = 300, sh_degree: int = 0) -> Gaussians:
    """Mixed anisotropic Gaussians in a 4 m cube around the origin."""
    rng = np.random.default_rng(seed)
    k = (sh_degree + 1) ** 2
    sh = np.zeros((n, k, 3), np.float32)
    sh[:, 0] = rgb_to_sh_dc(rng.uniform(0.0, 1.0, (n, 3)))
    if k > 1:
        sh[:, 1:] = rng.normal(0.0, 0.3, (n, k - 1, 3))
    scales = np.exp(rng.uniform(np.log(0.01), np.log(0.6), (n, 3)))
    scales[: n // 4, 2] = 0.002  # some flat discs
    opac = rng.uniform(0.05, 1.0, n)
    opac[:10] = 0.003  # below 1/255: never visible
    return Gaussians(
        means=rng.uniform(-2.0, 2.0, (n, 3)).astype(np.float32),
        scales=scales.astype(np.float32),
        quats_wxyz=rng.normal(size=(n, 4)).astype(np.float32),
        opacities=opac.astype(np.float32),
        sh=sh,
    )


def off_centre_camera(width: int, height: int) -> np.ndarray:
    return np.array([[0.9 * width, 0.0, 0.43 * width], [0.0, 0.85 * width, 0.58 * height], [0.0, 0.0, 1.0]])


# (eye, target, up): outside the cloud, inside it (Gaussians behind, beside and at the
# near plane), grazing from below, and looking away (everything behind or off-screen).
CAMERAS = [
    ((0.5, -6.0, 1.0), (0.0, 0.0, 0.0), (0.0, 0.0, 1.0)),
    ((0.2, 0.1, 0.3), (1.0, 3.0, 0.2), (0.0, 0.0, 1.0)),
    ((-2.6, -2.4, -2.1), (0.3, 0.0, 0.4), (0.0, 0.0, 1.0)),
    ((1.9, 1.5, -1.8), (-0.5, 0.2, 0.3), (0.0, 1.0, 0.0)),
]


def assert_matches_reference(g, viewmat, K, width, height, background, near_m=0.05, far_m=1e4):
    rgb, depth, alpha = render_cpu(g, viewmat[None], K[None], width, height, background, near_m, far_m)
    ref_rgb, ref_depth, ref_alpha = reference_render(g, viewmat, K, width, height, background, near_m, far_m)
    err = np.abs(rgb[0] - ref_rgb).max()
    assert err <= 2.0 / 255.0, f"max |rgb - reference| = {err * 255:.3f}/255 (allowed 2/255)"
    err_a = np.abs(alpha[0] - ref_alpha).max()
    assert err_a <= 2.0 / 255.0, f"max |alpha - reference| = {err_a:.5f}"
    solid = ref_alpha > 0.5
    if solid.any():
        err_d = np.abs(depth[0][solid] - ref_depth[solid]) / ref_depth[solid]
        assert err_d.max() < 1e-3, f"max relative depth error where alpha > 0.5: {err_d.max():.2e}"
    clear_cut = np.abs(ref_alpha - 1e-3) > 1e-5
    np.testing.assert_array_equal(np.isinf(depth[0])[clear_cut], (ref_alpha < 1e-3)[clear_cut])
    return rgb[0], alpha[0]


@pytest.mark.parametrize("sh_degree", [0, 3])
@pytest.mark.parametrize("cam_index", range(len(CAMERAS)))
def test_matches_reference(sh_degree, cam_index):
    g = random_scene(10 + sh_degree, n=300, sh_degree=sh_degree)
    eye, target, up = CAMERAS[cam_index]
    width, height = 48, 40
    K = off_centre_camera(width, height)
    viewmat = look_at_viewmat(eye, target, up)
    rgb, alpha = assert_matches_reference(g, viewmat, K, width, height, np.array([0.2, 0.4, 0.7], np.float32))
    assert alpha.max() > 0.5, "the scene should be visible from this camera"


def test_matches_reference_odd_size_and_clipping_planes():
    g = random_scene(3, n=250, sh_degree=1)
    K = PinholeCamera.from_fov(37, 23, 100.0).K
    viewmat = look_at_viewmat((0.0, -2.5, 0.0), (0.0, 0.0, 0.0))
    # near / far planes cutting through the cloud
    assert_matches_reference(g, viewmat, K, 37, 23, BLACK, near_m=1.5, far_m=3.5)


def test_matches_reference_dense_opaque_layers():
    """Many opaque overlapping Gaussians: early termination decides most pixels."""
    rng = np.random.default_rng(7)
    n = 400
    g = Gaussians(
        means=np.column_stack([rng.uniform(-1, 1, n), rng.uniform(-1, 1, n), rng.uniform(3, 6, n)]).astype(np.float32),
        scales=rng.uniform(0.2, 0.5, (n, 3)).astype(np.float32),
        quats_wxyz=rng.normal(size=(n, 4)).astype(np.float32),
        opacities=rng.uniform(0.8, 1.0, n).astype(np.float32),
        sh=rgb_to_sh_dc(rng.uniform(0, 1, (n, 3)))[:, None, :],
    )
    rgb, alpha = assert_matches_reference(g, np.eye(4), PinholeCamera.from_fov(48, 40, 60.0).K, 48, 40, BLACK)
    assert (alpha > 0.999).mean() > 0.3


def test_matches_reference_scattered_finished_pixels():
    """Pixels finished in front all over each row, a wide Gaussian behind: the rasterizer walks a
    row in runs of 8 from its unfinished pixels only (a bit mask per row, all 64 bits of a 64 px
    tile in use), so every pixel left between finished ones must still get the one behind."""
    rng = np.random.default_rng(11)
    width, height = 64, 16
    K = PinholeCamera.from_fov(width, height, 60.0).K
    depth_m = 2.0
    cols, rows = np.nonzero(rng.random((width, height)) < 0.45)
    u, v = cols + 0.5, rows + 0.5
    centres = np.column_stack([(u - K[0, 2]) / K[0, 0] * depth_m, (v - K[1, 2]) / K[1, 1] * depth_m,
                               np.full(len(u), depth_m)])
    layers = 3  # fragments of alpha 0.97: T 0.03, 9e-4, then 2.7e-5 <= 1e-4, which finishes the pixel
    n_front = layers * len(centres)
    behind_m = 1e-3 * np.tile(np.arange(layers), len(centres))[:, None]  # each layer 1 mm behind the last
    front = np.repeat(centres, layers, axis=0) + np.array([0.0, 0.0, 1.0]) * behind_m
    means = np.vstack([front, [[0.0, 0.0, 4.0]]]).astype(np.float32)
    scales = np.vstack([np.full((n_front, 3), 1e-4), [[8.0, 2.0, 0.1]]]).astype(np.float32)
    quats = np.tile(np.array([1.0, 0.0, 0.0, 0.0], np.float32), (n_front + 1, 1))
    colours = np.vstack([np.tile([0.9, 0.1, 0.1], (n_front, 1)), [[0.1, 0.8, 0.2]]])
    g = Gaussians(means=means, scales=scales, quats_wxyz=quats,
                  opacities=np.append(np.full(n_front, 0.97), 1.0).astype(np.float32),
                  sh=rgb_to_sh_dc(colours).astype(np.float32)[:, None, :])
    rgb, alpha = assert_matches_reference(g, np.eye(4), K, width, height, BLACK)
    finished = np.zeros((height, width), bool)
    finished[rows, cols] = True
    assert np.all(rgb[finished, 0] > 0.85), "the front Gaussians should cover their pixels"
    assert np.all(alpha > 0.9), "the wide Gaussian behind covers every pixel left"
    # Green comes from the wide Gaussian (front ones have 0.1): on every pixel left, on no finished one.
    assert rgb[~finished, 1].min() > 0.12, "a pixel between finished ones missed the Gaussian behind"
    assert rgb[finished, 1].max() < 0.101, "a finished pixel got the Gaussian behind"


def test_batch_equals_one_by_one():
    g = random_scene(5, n=300, sh_degree=3)
    width, height = 48, 40
    viewmats = np.stack([look_at_viewmat(e, t, u) for e, t, u in CAMERAS])
    Ks = np.stack([off_centre_camera(width, height), PinholeCamera.from_fov(width, height, 70.0).K] * 2)
    bg = np.array([0.1, 0.2, 0.3], np.float32)
    batch = render_cpu(g, viewmats, Ks, width, height, bg, 0.05, 1e4)
    for c in range(len(viewmats)):
        single = render_cpu(g, viewmats[c : c + 1], Ks[c : c + 1], width, height, bg, 0.05, 1e4)
        for a, b in zip(batch, single):
            np.testing.assert_array_equal(a[c], b[0])


def test_image_does_not_depend_on_threads_or_tiles():
    """Collection renders on one numba thread (64 px tiles), the evaluation nodes on more (16 or
    32 px tiles): the same image, bit for bit, because pixel offsets are taken in image, not
    tile, coordinates."""
    import numba

    from airplay.render.cpu_geometry import tile_size

    g = random_scene(8, n=400, sh_degree=3)
    g.means[:40] += np.float32(7.0)  # some far off-screen centres whose footprints reach in
    bg = np.array([0.3, 0.2, 0.1], np.float32)
    old = numba.get_num_threads()
    try:
        for width, height in ((64, 64), (100, 70), (224, 224)):
            vms = np.stack([look_at_viewmat(e, t, u) for e, t, u in CAMERAS])
            K = PinholeCamera.from_fov(width, height, 80.0).K
            outs, tiles = [], []
            for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
                numba.set_num_threads(threads)
                tiles.append(tile_size(width, height))
                outs.append(render_cpu(g, vms, K, width, height, bg, 0.05, 1e4))
            assert tiles[0] == 64
            for a, b in zip(outs[0], outs[-1]):
                np.testing.assert_array_equal(a, b)
    finally:
        numba.set_num_threads(old)


def single_gaussian(mean, scale=(0.05, 0.05, 0.05), opacity=0.9, rgb=(1.0, 0.5, 0.25)) -> Gaussians:
    return Gaussians(
        means=np.array([mean], np.float32),
        scales=np.array([scale], np.float32),
        quats_wxyz=np.array([[1.0, 0.0, 0.0, 0.0]], np.float32),
        opacities=np.array([opacity], np.float32),
        sh=rgb_to_sh_dc(np.array([rgb]))[:, None, :],
    )


def test_single_gaussian_projects_to_expected_pixel():
    width, height = 64, 48
    cam = PinholeCamera(width, height, fx=50.0, fy=55.0, cx=30.0, cy=21.0)
    x, y, z = 0.8, -0.5, 4.0  # optical frame, camera at the origin looking down +z
    _, _, alpha = render_cpu(single_gaussian((x, y, z)), np.eye(4)[None], cam.K[None], width, height, BLACK, 0.05, 1e4)
    a = alpha[0].astype(np.float64)
    jj, ii = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    centroid = np.array([(a * jj).sum(), (a * ii).sum()]) / a.sum()
    expected = np.array([cam.fx * x / z + cam.cx, cam.fy * y / z + cam.cy])
    np.testing.assert_allclose(centroid, expected, atol=0.02, err_msg="alpha centroid vs projected mean")


def test_background_where_empty_and_behind_camera():
    width, height = 40, 30
    cam = PinholeCamera.from_fov(width, height, 60.0)
    bg = np.array([0.25, 0.5, 0.75], np.float32)
    g = single_gaussian((0.0, 0.0, 5.0), scale=(0.2, 0.2, 0.2), opacity=1.0, rgb=(1.0, 0.0, 0.0))
    rgb, depth, alpha = render_cpu(g, np.eye(4)[None], cam.K[None], width, height, bg, 0.05, 1e4)
    np.testing.assert_array_equal(rgb[0, 0, 0], bg)  # corner: no Gaussian reaches it
    assert alpha[0, 0, 0] == 0.0 and np.isinf(depth[0, 0, 0])
    centre = rgb[0, height // 2, width // 2]
    assert centre[0] > 0.9 and centre[2] < 0.1
    # The same Gaussian behind the camera: nothing but background.
    behind = render_cpu(g, _flip_z(), cam.K[None], width, height, bg, 0.05, 1e4)
    np.testing.assert_array_equal(behind[0][0], np.broadcast_to(bg, (height, width, 3)))
    assert (behind[2] == 0).all() and np.isinf(behind[1]).all()


def _flip_z() -> np.ndarray:
    """Camera at the origin looking down -z of the world (a proper rotation: 180 deg about y)."""
    v = np.eye(4)
    v[0, 0] = -1.0
    v[2, 2] = -1.0
    return v[None]


def test_sh_rotation_rotating_scene_and_camera_together_changes_nothing():
    g = random_scene(21, n=200, sh_degree=1)
    g = Gaussians(g.means, g.scales, g.quats_wxyz, g.opacities, g.sh * np.float32(3.0))  # strong view dependence
    width, height = 48, 40
    K = PinholeCamera.from_fov(width, height, 75.0).K
    viewmat = look_at_viewmat((0.4, -5.5, 1.2), (0.0, 0.0, 0.0))
    a = math.radians(50.0)
    rot = np.array([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0], [0.0, 0.0, 1.0]])
    rot = rot @ np.array([[1.0, 0.0, 0.0], [0.0, math.cos(0.4), -math.sin(0.4)], [0.0, math.sin(0.4), math.cos(0.4)]])
    t = np.array([3.0, -1.0, 0.5])
    moved = g.transformed(1.0, rot, t)
    world_from_old = np.eye(4)
    world_from_old[:3, :3], world_from_old[:3, 3] = rot, t
    viewmat_moved = viewmat @ np.linalg.inv(world_from_old)
    before = render_cpu(g, viewmat[None], K[None], width, height, BLACK, 0.05, 1e4)
    after = render_cpu(moved, viewmat_moved[None], K[None], width, height, BLACK, 0.05, 1e4)
    err = np.abs(before[0] - after[0]).max()
    assert err < 2e-3, f"max |rgb difference| after rotating scene and camera = {err:.2e}"
    assert before[2].max() > 0.5
    # Without the sh_rotation bookkeeping the colours would change: check the test has teeth.
    stale = Gaussians(moved.means, moved.scales, moved.quats_wxyz, moved.opacities, moved.sh)
    wrong = render_cpu(stale, viewmat_moved[None], K[None], width, height, BLACK, 0.05, 1e4)
    assert np.abs(before[0] - wrong[0]).max() > 0.05


def test_depth_of_opaque_disc_facing_camera():
    width, height = 48, 40
    cam = PinholeCamera.from_fov(width, height, 60.0)
    disc = single_gaussian((0.0, 0.0, 5.0), scale=(3.0, 3.0, 0.001), opacity=1.0)
    _, depth, alpha = render_cpu(disc, np.eye(4)[None], cam.K[None], width, height, BLACK, 0.05, 1e4)
    solid = alpha[0] > 0.5
    assert solid.mean() > 0.9
    np.testing.assert_allclose(depth[0][solid], 5.0, rtol=1e-5)


def _step_alphas(step, powers):
    """Composite one Gaussian (opacity 1, red) at T = 1 through ``step`` at each of ``powers``:
    (red of lane 0, red of lane 7, T of lane 0 after)."""
    from numba import njit

    from airplay.render import cpu_layout as cl

    @njit
    def alphas(powers, out, lane7, t, consts):
        S = np.zeros(cl._ROW, np.float32)
        px = np.full(cl._LANES, np.float32(0.5))
        f = np.float32
        for i in range(powers.shape[0]):
            for k in range(8):
                S[cl._ST + k] = 1.0
                S[cl._SR + k] = 0.0
            # dx = 0, power = hcdy2; opacity 1, colour (1, 0, 0); alpha_max 1, alpha_min 0, T_min < 0
            step(S, px, np.uintp(0), np.uintp(0), f(0.5), f(0.0), f(0.0), powers[i], f(1.0), f(1e3), f(1.0),
                 f(0.0), f(0.0), f(0.0), f(1.0), f(0.0), f(-1.0), consts)
            out[i] = S[cl._SR]
            lane7[i] = S[cl._SR + 7]
            t[i] = S[cl._ST]

    out, lane7, t = np.empty_like(powers), np.empty_like(powers), np.empty_like(powers)
    alphas(powers, out, lane7, t, cl._STEP_CONSTANTS_ARRAY)
    return out, lane7, t


@pytest.mark.parametrize("kernels", ["llvm", "plain"])
def test_pixel_step_exp_is_accurate(kernels):
    """The rasterizer's 8-pixel step (LLVM vector code, or its plain numba twin) computes alpha =
    opacity * exp(-power) with a relative error < 1e-7 over the whole range of powers, [0, 87],
    and composites it at T = 1."""
    from airplay.render import numba_llvm, numba_plain

    step = (numba_llvm if kernels == "llvm" else numba_plain).make_composite8(False)
    powers = np.linspace(0.0, 87.0, 200_001).astype(np.float32)
    out, lane7, t = _step_alphas(step, powers)
    assert np.max(np.abs(out / np.exp(-powers.astype(np.float64)) - 1.0)) < 1e-7
    assert np.array_equal(lane7, out) and np.array_equal(t, np.float32(1.0) - out)  # T after = 1 - alpha


def test_the_numba_api_is_the_one_it_was_written_against():
    """Fails, naming each, when a numba or llvmlite upgrade removes what airplay/render/numba_llvm.py
    uses (numba.cpython.unsafe, @intrinsic codegen, llvmlite.ir) or is outside the versions it was
    written against; update that module (and WRITTEN_AGAINST) after checking them."""
    from airplay.render import cpu_kernels, numba_llvm

    assert numba_llvm.version_problem() is None, numba_llvm.version_problem()
    assert numba_llvm.api_problems() == []
    assert cpu_kernels.PROBLEM is None and cpu_kernels.fast is numba_llvm
    assert numba_llvm.version_problem((0, 59)) is None
    assert "0.99" in numba_llvm.version_problem((0, 99)) and numba_llvm.version_problem((0, 58)) is not None


def test_plain_and_llvm_pieces_give_the_same_bits():
    """Each piece of numba_plain against numba_llvm's: the step over every power it can see (and
    lanes past the footprint), the bit scans, the float32 bits."""
    from numba import njit

    from airplay.render import numba_llvm, numba_plain

    powers = np.concatenate([np.linspace(-1.0, 90.0, 100_003), [0.0, 87.0, np.inf, -np.inf]]).astype(np.float32)
    for a, b in zip(_step_alphas(numba_llvm.make_composite8(False), powers),
                    _step_alphas(numba_plain.make_composite8(False), powers)):
        assert a.tobytes() == b.tobytes()

    def scans(mod):
        tz, lz, bits = mod.trailing_zeros, mod.leading_zeros, mod.bits_of_f32

        @njit
        def run(words, floats):
            out = np.empty((words.size, 2), np.int64)
            for i in range(words.size):
                out[i, 0] = np.int64(tz(words[i]))
                out[i, 1] = np.int64(lz(words[i]))
            fb = np.empty(floats.size, np.int32)
            for i in range(floats.size):
                fb[i] = bits(floats[i])
            return out, fb
        return run

    rng = np.random.default_rng(0)
    words = np.concatenate([rng.integers(1, 2**63, 1000, dtype=np.uint64) >> rng.integers(0, 63, 1000).astype(
        np.uint64), np.uint64(1) << np.arange(64, dtype=np.uint64), [np.uint64(0xFFFFFFFFFFFFFFFF)]]).astype(np.uint64)
    floats = np.concatenate([rng.uniform(0, 1, 1000), [0.0, 1e-40, 1e-45, 1.17549435e-38, 3.4e38, 1.0]]).astype(
        np.float32)
    (a_scan, a_bits), (b_scan, b_bits) = scans(numba_llvm)(words, floats), scans(numba_plain)(words, floats)
    assert np.array_equal(a_scan, b_scan) and np.array_equal(a_bits, b_bits)
    assert np.array_equal(a_bits, floats.view(np.int32))


@pytest.mark.slow
def test_plain_kernels_render_the_same_images(monkeypatch):
    """AIRPLAY_CPU_KERNELS=plain (no intrinsics, no numba.cpython.unsafe) renders the images of the
    default kernels bit for bit: exact, with a level of detail, from pose cells, with and without
    depth; an unknown value is an error naming the variable."""
    from airplay.render import lod
    from airplay.render.cpu_kernels import KernelChoiceError
    from airplay.scene.camera import CameraMount

    g = box_gaussians(np.random.default_rng(5), 600, sh_degree=2)
    tree = lod.build_hierarchy(g)
    cam = PinholeCamera.from_fov(80, 56, 80.0)
    views = np.stack([look_at_viewmat([0.0, -9.0, 2.5], [0.0, 0.0, 2.0]),
                      look_at_viewmat([5.0, -4.0, 3.0], [0.0, 0.0, 1.0])])
    settings = lod.CellSettings(CameraMount(), cam.K, 80, 56, (0.1, 0.2, 0.3), 0.05, 1e4, 2.0, 0.5, 15.0)

    def images():
        lod.clear_cell_cache()
        return [render_cpu(g, views, cam.K, 80, 56, np.zeros(3, np.float32), 0.05, 1e4),
                lod.render_lod_cpu(g, tree, views, cam.K, 80, 56, (0, 0, 0), 0.05, 1e4, 3.0),
                lod.render_lod_cell_cpu(g, tree, [[0.3, -6.2, 2.1], [1.0, -5.0, 1.5]], [1.6, 1.2], settings),
                lod.render_lod_cell_cpu(g, tree, [[0.3, -6.2, 2.1]], [1.6], replace(settings, depth=False))]

    monkeypatch.setenv("AIRPLAY_CPU_KERNELS", "llvm")
    fast = images()
    monkeypatch.setenv("AIRPLAY_CPU_KERNELS", "plain")
    plain = images()
    assert fast[0][2].mean() > 0.2  # something drawn
    for a, b in zip(fast, plain):
        for x, y in zip(a, b):
            assert (x is None and y is None) or x.tobytes() == y.tobytes()
    monkeypatch.setenv("AIRPLAY_CPU_KERNELS", "fastest")
    with pytest.raises(KernelChoiceError, match="AIRPLAY_CPU_KERNELS"):
        render_cpu(g, views, cam.K, 80, 56, np.zeros(3, np.float32), 0.05, 1e4)


_RENDER_EVERY_PATH = """
import numpy as np
from airplay.render import PinholeCamera, look_at_viewmat, render, lod
from airplay.scene.camera import CameraMount
from helpers.scene_factory import box_gaussians
g = box_gaussians(np.random.default_rng(0), 300, sh_degree=1)
cam = PinholeCamera.from_fov(64, 64, 90.0)
render(g, look_at_viewmat([0.0, -9.0, 2.5], [0.0, 0.0, 2.0]), cam.K, 64, 64, backend="cpu")
tree = lod.build_hierarchy(g)
for depth in (True, False):
    lod.render_lod_cell_cpu(g, tree, [[0.3, -6.2, 2.1]], [1.6], lod.CellSettings(CameraMount(), cam.K, 64, 64,
                            (0, 0, 0), 0.05, 1e4, 2.0, 0.5, 15.0, depth=depth))
"""


@pytest.mark.slow
def test_kernels_are_loaded_from_numbas_cache():
    """A second process compiles nothing: every kernel of the exact, LOD and pose-cell paths is
    loaded from numba's on-disk cache (a kernel that cannot be cached, e.g. one with an object in
    its closure, would compile again in every process: seconds in each collection worker)."""
    import os
    import subprocess

    env = dict(os.environ, NUMBA_DEBUG_CACHE="1", NUMBA_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), *sys.path]))
    runs = [subprocess.run([sys.executable, "-c", _RENDER_EVERY_PATH], env=env, capture_output=True, text=True,
                           timeout=600) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    second = runs[1].stdout + runs[1].stderr
    assert "data loaded" in second  # the cache is in use
    assert "data saved" not in second, [line for line in second.splitlines() if "saved" in line]


def test_rgb_to_uint8_is_numpys_rounding():
    """The compiled conversion gives numpy's bytes: round half to even at every k + 0.5 edge
    (and the next float above it), saturation outside [0, 1], any shape; other dtypes too."""
    from airplay.render.api import rgb_to_uint8

    rng = np.random.default_rng(3)
    x = rng.uniform(-0.3, 1.4, (2, 17, 9, 3)).astype(np.float32)
    edges = (np.arange(256, dtype=np.float32) + np.float32(0.5)) / np.float32(255.0)
    flat = x.reshape(-1)
    flat[:256] = edges
    flat[256:512] = np.nextafter(edges, np.float32(2.0))
    flat[512:516] = (0.0, 1.0, -np.inf, np.inf)
    expected = np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8)
    assert np.array_equal(rgb_to_uint8(x), expected)
    assert np.array_equal(rgb_to_uint8(x[:, ::2]), expected[:, ::2])  # a strided view
    x64 = x.astype(np.float64)
    assert np.array_equal(rgb_to_uint8(x64), np.clip(np.rint(x64 * 255.0), 0, 255).astype(np.uint8))


def test_public_render_cpu_backend():
    g = random_scene(2, n=200, sh_degree=0)
    cam = PinholeCamera.from_fov(48, 40, 70.0)
    viewmat = look_at_viewmat((0.5, -6.0, 1.0), (0.0, 0.0, 0.0))
    out = render(g, viewmat, cam.K, 48, 40, backend="cpu", background=(0.1, 0.2, 0.3))
    assert out.backend == "cpu"
    assert out.rgb.shape == (1, 40, 48, 3) and out.rgb.dtype == np.float32
    assert out.depth.shape == (1, 40, 48) and out.alpha.shape == (1, 40, 48)
    assert out.rgb_uint8.dtype == np.uint8
    direct = render_cpu(g, viewmat[None], cam.K[None], 48, 40, np.array([0.1, 0.2, 0.3], np.float32), 0.05, 1e4)
    np.testing.assert_array_equal(out.rgb, direct[0])
    import airplay.render

    assert airplay.render.render is render


def test_gsplat_backend_without_cuda_raises():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is present; the error path is not reachable here")
    g = random_scene(2, n=10)
    cam = PinholeCamera.from_fov(16, 16, 70.0)
    with pytest.raises(RuntimeError, match="gsplat"):
        render(g, np.eye(4), cam.K, 16, 16, backend="gsplat")


def test_empty_and_fully_culled_scenes():
    cam = PinholeCamera.from_fov(20, 10, 60.0)
    bg = np.array([0.3, 0.3, 0.3], np.float32)
    empty = Gaussians(
        means=np.zeros((0, 3), np.float32), scales=np.zeros((0, 3), np.float32),
        quats_wxyz=np.zeros((0, 4), np.float32), opacities=np.zeros(0, np.float32), sh=np.zeros((0, 1, 3), np.float32),
    )
    rgb, depth, alpha = render_cpu(empty, np.eye(4)[None], cam.K[None], 20, 10, bg, 0.05, 1e4)
    assert (rgb == bg).all() and (alpha == 0).all() and np.isinf(depth).all()
    far = single_gaussian((0.0, 0.0, 50.0))
    rgb, depth, alpha = render_cpu(far, np.eye(4)[None], cam.K[None], 20, 10, bg, 0.05, 10.0)
    assert (rgb == bg).all() and (alpha == 0).all()


def test_matches_reference_on_real_capture(real_data):
    """luma-seal.splat (1e5 Gaussians, y-down capture) at a small size, from above."""
    from airplay.scene.splat_io import read_splat

    path = real_data / "luma-seal.splat"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    g = read_splat(path)
    centre = np.median(g.means, axis=0).astype(np.float64)
    eye = centre + np.array([2.2, -1.2, 1.0])
    viewmat = look_at_viewmat(eye, centre, up=(0.0, -1.0, 0.0))
    K = PinholeCamera.from_fov(64, 48, 60.0).K
    rgb, alpha = assert_matches_reference(g, viewmat, K, 64, 48, np.array([0.5, 0.6, 0.7], np.float32))
    assert alpha.mean() > 0.3
