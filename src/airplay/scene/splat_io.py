"""Read and write the antimatter15 ``.splat`` layout (used by web viewers and Luma exports).

32 bytes per Gaussian, little-endian, no header:

    position  3 x float32   metres, source frame
    scale     3 x float32   standard deviations, metres (linear, not log)
    colour    4 x uint8     R, G, B, A; A is the opacity (0..255)
    rotation  4 x uint8     quaternion (w, x, y, z), each stored as round(q * 128 + 128)

The layout carries no view-dependent colour: loaded splats have SH degree 0.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import Gaussians, rgb_to_sh_dc, sh_dc_to_rgb

SPLAT_DTYPE = np.dtype([("position", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rot", "u1", 4)])
assert SPLAT_DTYPE.itemsize == 32


def read_splat(path: str | Path) -> Gaussians:
    """Load a ``.splat`` file; :class:`SceneError` naming the file for any defect."""
    path = Path(path)
    if not path.is_file():
        raise SceneError(path, "file not found")
    raw = path.read_bytes()
    if len(raw) == 0:
        raise SceneError(path, ".splat file is empty")
    if len(raw) % SPLAT_DTYPE.itemsize:
        raise SceneError(
            path,
            f".splat size {len(raw)} bytes is not a multiple of 32 bytes per Gaussian (truncated or not a .splat)",
        )
    table = np.frombuffer(raw, dtype=SPLAT_DTYPE)
    means = table["position"].astype(np.float32)
    scales = table["scale"].astype(np.float32)
    if not np.isfinite(means).all():
        bad = (~np.isfinite(means)).any(axis=1)
        raise SceneError(path, f"{int(bad.sum())} Gaussians have NaN or infinite positions (first: index {int(np.argmax(bad))})")
    if not np.isfinite(scales).all() or (scales <= 0).any():
        bad = (~np.isfinite(scales) | (scales <= 0)).any(axis=1)
        raise SceneError(path, f"{int(bad.sum())} Gaussians have non-finite, zero or negative scales (first: index {int(np.argmax(bad))})")
    quats = (table["rot"].astype(np.float32) - 128.0) / 128.0
    norms = np.linalg.norm(quats, axis=1)
    if (norms < 1e-6).any():
        raise SceneError(path, f"{int((norms < 1e-6).sum())} Gaussians have a zero-norm rotation quaternion")
    rgba = table["rgba"].astype(np.float32) / 255.0
    return Gaussians(
        means=means,
        scales=scales,
        quats_wxyz=(quats / norms[:, None]).astype(np.float32),
        opacities=rgba[:, 3].copy(),
        sh=rgb_to_sh_dc(rgba[:, :3])[:, None, :],
    )


def write_splat(path: str | Path, gaussians: Gaussians) -> None:
    """Write ``gaussians`` as ``.splat`` (DC colour only; higher SH bands are dropped), atomically."""
    path = Path(path)
    g = gaussians
    table = np.zeros(len(g), dtype=SPLAT_DTYPE)
    table["position"] = g.means
    table["scale"] = g.scales
    rgb = np.clip(sh_dc_to_rgb(g.sh[:, 0]), 0.0, 1.0)
    table["rgba"][:, :3] = np.rint(rgb * 255.0)
    table["rgba"][:, 3] = np.rint(np.clip(g.opacities, 0.0, 1.0) * 255.0)
    q = g.quats_wxyz / np.linalg.norm(g.quats_wxyz, axis=1, keepdims=True)
    table["rot"] = np.clip(np.rint(q * 128.0 + 128.0), 0, 255)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(table.tobytes())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
