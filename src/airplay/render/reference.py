"""A plain, slow, per-pixel 3DGS reference renderer (numpy only: no numba, no tiling).

For every pixel it composites *all* Gaussians in front of the near plane, sorted by depth,
with the INRIA/gsplat rules documented in :mod:`airplay.render.api`. It is the correctness
reference of the fast backends (tens of seconds a 224x224 frame: never a backend itself), written
independently of :mod:`airplay.render.cpu_backend`; the CPU backend's tests
(test/test_render_cpu.py) and the rendering benchmark (bench/render.py) compare against it.
"""

from __future__ import annotations

import numpy as np

from airplay.render.api import ALPHA_MAX, ALPHA_MIN, EPS2D, TRANSMITTANCE_MIN
from airplay.scene.gaussians import Gaussians, quat_wxyz_to_matrix

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792, 0.5462742152960396]
SH_C3 = [
    -0.5900435899266435,
    2.890611442640554,
    -0.4570457994644658,
    0.3731763325901154,
    -0.4570457994644658,
    1.445305721320277,
    -0.5900435899266435,
]


def eval_sh(sh: np.ndarray, dirs: np.ndarray) -> np.ndarray:
    """Colour (N, 3) = max(SH(dirs) + 0.5, 0) for coefficients (N, K, 3) and unit dirs (N, 3)."""
    k = sh.shape[1]
    x, y, z = dirs[:, 0:1], dirs[:, 1:2], dirs[:, 2:3]
    out = SH_C0 * sh[:, 0]
    if k > 1:
        out = out - SH_C1 * y * sh[:, 1] + SH_C1 * z * sh[:, 2] - SH_C1 * x * sh[:, 3]
    if k > 4:
        xx, yy, zz = x * x, y * y, z * z
        out = (
            out
            + SH_C2[0] * x * y * sh[:, 4]
            + SH_C2[1] * y * z * sh[:, 5]
            + SH_C2[2] * (2 * zz - xx - yy) * sh[:, 6]
            + SH_C2[3] * x * z * sh[:, 7]
            + SH_C2[4] * (xx - yy) * sh[:, 8]
        )
    if k > 9:
        out = (
            out
            + SH_C3[0] * y * (3 * xx - yy) * sh[:, 9]
            + SH_C3[1] * x * y * z * sh[:, 10]
            + SH_C3[2] * y * (4 * zz - xx - yy) * sh[:, 11]
            + SH_C3[3] * z * (2 * zz - 3 * xx - 3 * yy) * sh[:, 12]
            + SH_C3[4] * x * (4 * zz - xx - yy) * sh[:, 13]
            + SH_C3[5] * z * (xx - yy) * sh[:, 14]
            + SH_C3[6] * x * (xx - 3 * yy) * sh[:, 15]
        )
    return np.maximum(out + 0.5, 0.0)


def project(gaussians: Gaussians, viewmat: np.ndarray, K: np.ndarray, width: int, height: int, near_m: float, far_m: float):
    """Per-Gaussian screen-space quantities (float64) for those with near <= z <= far.

    Returns (kept indices, means2d (M, 2), conics (M, 2, 2), depths (M,), colours (M, 3),
    opacities (M,)), sorted by depth (stable: ties keep index order).
    """
    viewmat = np.asarray(viewmat, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    R, t = viewmat[:3, :3], viewmat[:3, 3]
    means = gaussians.means.astype(np.float64)
    p_cam = means @ R.T + t
    z = p_cam[:, 2]
    keep = np.nonzero((z >= near_m) & (z <= far_m))[0]
    keep = keep[np.argsort(z[keep], kind="stable")]
    p = p_cam[keep]
    x, y, z = p[:, 0], p[:, 1], p[:, 2]
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]

    # 3D covariance in the world frame: Rg S S^T Rg^T; then in the camera frame.
    rot = quat_wxyz_to_matrix(gaussians.quats_wxyz[keep])
    s = gaussians.scales[keep].astype(np.float64)
    rs = rot * s[:, None, :]
    cov_world = rs @ np.swapaxes(rs, 1, 2)
    cov_cam = R @ cov_world @ R.T

    # Perspective Jacobian at the mean, with x/z and y/z limited to 1.3x the half-image.
    lim_x_hi = (width - cx) / fx + 0.3 * (0.5 * width / fx)
    lim_x_lo = -(cx / fx + 0.3 * (0.5 * width / fx))
    lim_y_hi = (height - cy) / fy + 0.3 * (0.5 * height / fy)
    lim_y_lo = -(cy / fy + 0.3 * (0.5 * height / fy))
    xz = np.clip(x / z, lim_x_lo, lim_x_hi)
    yz = np.clip(y / z, lim_y_lo, lim_y_hi)
    J = np.zeros((len(keep), 2, 3))
    J[:, 0, 0] = fx / z
    J[:, 0, 2] = -fx * xz / z
    J[:, 1, 1] = fy / z
    J[:, 1, 2] = -fy * yz / z
    cov2d = J @ cov_cam @ np.swapaxes(J, 1, 2)
    cov2d[:, 0, 0] += EPS2D
    cov2d[:, 1, 1] += EPS2D
    det = cov2d[:, 0, 0] * cov2d[:, 1, 1] - cov2d[:, 0, 1] * cov2d[:, 1, 0]
    ok = det > 0
    conics = np.linalg.inv(cov2d[ok])
    means2d = np.stack([fx * x / z + cx, fy * y / z + cy], axis=-1)[ok]

    # View-dependent colour: direction from the camera centre, expressed in the SH frame.
    cam_centre = -R.T @ t
    dirs = means[keep] - cam_centre
    dirs = dirs / np.linalg.norm(dirs, axis=1, keepdims=True)
    dirs = dirs @ np.asarray(gaussians.sh_rotation, dtype=np.float64).T
    colours = eval_sh(gaussians.sh[keep].astype(np.float64), dirs)
    return keep[ok], means2d, conics, z[ok], colours[ok], gaussians.opacities[keep][ok].astype(np.float64)


def composite_pixel(px, py, idx, means2d, conics, depths, colours, opacities, background):
    """One pixel centre (px, py) over the depth-sorted Gaussians ``idx``: (rgb, depth, alpha).

    Front to back; a fragment with alpha < ALPHA_MIN (or negative power) is skipped; the
    first fragment whose transmittance *after* it would be <= TRANSMITTANCE_MIN is dropped
    together with everything behind it.
    """
    d = np.stack([px - means2d[idx, 0], py - means2d[idx, 1]], axis=-1)  # (M, 2)
    power = 0.5 * np.einsum("mi,mij,mj->m", d, conics[idx], d)
    alpha = np.minimum(ALPHA_MAX, opacities[idx] * np.exp(-power))
    used = (alpha >= ALPHA_MIN) & (power >= 0)
    alpha, idx = alpha[used], idx[used]
    t_before = np.cumprod(np.concatenate([[1.0], 1.0 - alpha[:-1]]))  # exclusive cumprod
    t_after = t_before * (1.0 - alpha)
    stop = np.flatnonzero(t_after <= TRANSMITTANCE_MIN)
    if len(stop):
        alpha, idx, t_before = alpha[: stop[0]], idx[: stop[0]], t_before[: stop[0]]
    w = alpha * t_before
    acc = w.sum()
    rgb = w @ colours[idx] + (1.0 - acc) * np.asarray(background, dtype=np.float64)
    depth = (w @ depths[idx]) / acc if acc >= 1e-3 else np.inf
    return rgb, depth, acc


def reference_render(
    gaussians: Gaussians,
    viewmat: np.ndarray,
    K: np.ndarray,
    width: int,
    height: int,
    background=(0.0, 0.0, 0.0),
    near_m: float = 0.05,
    far_m: float = 1e4,
    progress=None,
):
    """Render one camera: rgb (H, W, 3), expected depth (H, W) (inf where alpha < 1e-3), alpha (H, W).

    Every pixel is composited over *all* Gaussians between the clipping planes. To keep
    large scenes tractable, a generous float32 screen first discards the (pixel, Gaussian)
    pairs whose power is clearly above ln(255 * opacity), where alpha < 1/255 for certain;
    every remaining pair is decided by the exact float64 rules in :func:`composite_pixel`.
    ``progress(rows_done, height)`` is called after each image row when given.
    """
    _, means2d, conics, depths, colours, opacities = project(gaussians, viewmat, K, width, height, near_m, far_m)
    rgb = np.zeros((height, width, 3))
    depth = np.full((height, width), np.inf)
    alpha = np.zeros((height, width))
    rgb[:] = np.asarray(background, dtype=np.float64)
    m = len(depths)
    if m:
        # Screen: power = ha (dx + k dy)^2 + q dy^2 (the quadratic form with the square
        # completed: two non-negative terms, so float32 is accurate to a few ulps).
        ha = 0.5 * conics[:, 0, 0]
        hb = 0.5 * (conics[:, 0, 1] + conics[:, 1, 0])
        hc = 0.5 * conics[:, 1, 1]
        k = hb / (2.0 * ha)
        q = np.maximum(hc - hb * hb / (4.0 * ha), 0.0)
        ha32 = ha.astype(np.float32)
        with np.errstate(divide="ignore"):
            screen = (np.log(255.0 * opacities) * 1.01 + 0.05).astype(np.float32)
        chunk = max(1, min(width, int(2e6 // m)))
    for i in range(height):
        py = i + 0.5
        if m:
            dy = py - means2d[:, 1]
            row_centre = (means2d[:, 0] - k * dy).astype(np.float32)  # where each ellipse's row is centred
            row_q = (q * dy * dy).astype(np.float32)
            for j0 in range(0, width, chunk):
                j = np.arange(j0, min(width, j0 + chunk))
                u = (j + 0.5).astype(np.float32)[:, None] - row_centre[None, :]
                power = ha32 * u * u + row_q
                pix, gau = np.nonzero(power <= screen)
                bounds = np.searchsorted(pix, np.arange(len(j) + 1))
                for jj in range(len(j)):
                    idx = gau[bounds[jj] : bounds[jj + 1]]  # ascending index = depth order
                    if len(idx):
                        rgb[i, j[jj]], depth[i, j[jj]], alpha[i, j[jj]] = composite_pixel(
                            j[jj] + 0.5, py, idx, means2d, conics, depths, colours, opacities, background
                        )
        if progress is not None:
            progress(i + 1, height)
    return rgb.astype(np.float32), depth.astype(np.float32), alpha.astype(np.float32)
