"""Read a bare 3DGS capture in any format people export, by content (not only by suffix).

Formats: INRIA-layout PLY at SH degree 0-3 (also nerfstudio's and gsplat's exporters:
extra ``nx ny nz``, any property order, double or float, ``red green blue`` instead of
``f_dc_*``), PlayCanvas's compressed PLY, antimatter15 ``.splat`` and Niantic ``.spz``.
Every reader returns :class:`Gaussians` in the file's own frame and units; every defect is a
:class:`SceneError` naming the file, the field and the first bad record.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import Gaussians

FORMATS = ("inria_ply", "compressed_ply", "splat", "spz")


@dataclass(frozen=True)
class Capture:
    """A capture as read: the splat (source frame and units) and the format it came in."""

    gaussians: Gaussians
    format: str
    path: Path


def detect_format(path: Path) -> str:
    """One of :data:`FORMATS`, from the first bytes (and the suffix for headerless .splat)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"ply"):
        end = head.find(b"end_header")
        text = head[: end if end > 0 else len(head)].decode("ascii", errors="replace")
        return "compressed_ply" if ("element chunk" in text and "packed_position" in text) else "inria_ply"
    if head[:2] == b"\x1f\x8b" or head[:4] == b"NGSP" or path.suffix.lower() == ".spz":
        return "spz"
    if path.suffix.lower() == ".splat":
        return "splat"
    raise SceneError(path, f"unknown capture format (suffix {path.suffix!r}, first bytes {head[:8]!r}); "
                           "expected a 3DGS .ply, a compressed .ply, a .splat or a .spz")


def check_values(path: Path, g: Gaussians) -> None:
    """SceneError naming the field and the first record with a NaN/inf position, a non-finite,
    zero or negative scale, or a non-finite opacity or colour."""
    checks = (("position (x y z)", g.means), ("scale", g.scales), ("opacity", g.opacities[:, None]),
              ("colour (SH)", g.sh.reshape(len(g), -1)), ("rotation", g.quats_wxyz))
    for name, arr in checks:
        bad = ~np.isfinite(arr).all(axis=1)
        if bad.any():
            idx = int(np.argmax(bad))
            raise SceneError(path, f"{int(bad.sum())} Gaussians have NaN or infinite values (first: record {idx}, "
                                   f"{arr[idx].tolist()})", name)
    bad = (g.scales <= 0).any(axis=1)
    if bad.any():
        idx = int(np.argmax(bad))
        raise SceneError(path, f"{int(bad.sum())} Gaussians have a zero or negative scale (first: record {idx}, "
                               f"{g.scales[idx].tolist()})", "scale")


def read_capture(path: str | Path) -> Capture:
    """Read ``path`` in whichever supported format it is; values checked (see :func:`check_values`)."""
    from airplay.scene.compressed_ply_io import read_compressed_ply
    from airplay.scene.ply_io import read_gaussians_ply
    from airplay.scene.splat_io import read_splat
    from airplay.scene.spz_io import read_spz

    path = Path(path)
    if not path.is_file():
        raise SceneError(path, "file not found")
    if path.stat().st_size == 0:
        raise SceneError(path, "file is empty")
    fmt = detect_format(path)
    reader = {"inria_ply": read_gaussians_ply, "compressed_ply": read_compressed_ply,
              "splat": read_splat, "spz": read_spz}[fmt]
    gaussians = reader(path)
    check_values(path, gaussians)
    return Capture(gaussians, fmt, path)
