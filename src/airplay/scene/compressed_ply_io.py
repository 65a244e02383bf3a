"""PlayCanvas / SuperSplat "compressed PLY": 16 bytes per Gaussian, quantised in chunks of 256.

Layout (binary little-endian PLY, three elements in this order):

    element chunk   ceil(N / 256) records of 18 float32:
                    min_x min_y min_z max_x max_y max_z           position bounds, source units
                    min_scale_x .. max_scale_z                    log-scale bounds
                    min_r min_g min_b max_r max_g max_b           colour bounds (SH_C0 * f_dc + 0.5)
    element vertex  N records of 4 uint32:
                    packed_position  x:11 y:10 z:11 bits (high to low), unorm in the chunk's bounds
                    packed_rotation  2-bit index of the largest component (bits 30-31), then the
                                     other three of (rot_0..rot_3) = (w, x, y, z) in order, 10 bits
                                     each, unorm over [-1/sqrt 2, 1/sqrt 2]; the largest is positive
                    packed_scale     like packed_position, over the chunk's log-scale bounds
                    packed_color     r g b (8 bits each, over the chunk's colour bounds), then the
                                     opacity after the sigmoid (8 bits over [0, 1])
    element sh      optional, N records of uint8 ``f_rest_0..f_rest_{M-1}`` (INRIA order),
                    value = (byte / 256 - 0.5) * 8

Precision is what the format gives: about 1/2047 of a chunk's extent for positions. The
writer exists to make test fixtures; it follows the same layout.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import SH_C0, SH_COEFFS_FOR_DEGREE, Gaussians
from airplay.scene.ply_io import read_ply_elements

CHUNK_SIZE = 256
CHUNK_PROPS = ("min_x", "min_y", "min_z", "max_x", "max_y", "max_z",
               "min_scale_x", "min_scale_y", "min_scale_z", "max_scale_x", "max_scale_y", "max_scale_z",
               "min_r", "min_g", "min_b", "max_r", "max_g", "max_b")
VERTEX_PROPS = ("packed_position", "packed_rotation", "packed_scale", "packed_color")
_NORM = np.sqrt(2.0)  # stored components span [-1/sqrt 2, 1/sqrt 2]


def is_compressed_layout(elements: dict[str, dict[str, np.ndarray]]) -> bool:
    """True when the PLY elements are PlayCanvas's compressed layout."""
    return "chunk" in elements and all(p in elements.get("vertex", {}) for p in VERTEX_PROPS)


def _unorm(value: np.ndarray, shift: int, bits: int) -> np.ndarray:
    return ((value >> np.uint32(shift)) & np.uint32((1 << bits) - 1)).astype(np.float64) / ((1 << bits) - 1)


def read_compressed_ply(path: str | Path, elements: dict[str, dict[str, np.ndarray]] | None = None) -> Gaussians:
    """Decode a compressed PLY into :class:`Gaussians` (source frame, activated values).

    :class:`SceneError` names the file and the field for a missing property, too few chunks
    for the vertices, or non-finite chunk bounds (naming the chunk).
    """
    path = Path(path)
    elements = read_ply_elements(path) if elements is None else elements
    chunk, vertex = elements.get("chunk", {}), elements.get("vertex", {})
    missing = [f"chunk.{p}" for p in CHUNK_PROPS if p not in chunk] + [f"vertex.{p}" for p in VERTEX_PROPS if p not in vertex]
    if missing:
        raise SceneError(path, f"compressed PLY lacks properties {missing}")
    n = len(vertex["packed_position"])
    n_chunks = len(chunk["min_x"])
    if n == 0:
        raise SceneError(path, "compressed PLY has 0 vertices (empty splat)")
    if n_chunks * CHUNK_SIZE < n:
        raise SceneError(path, f"compressed PLY: {n} vertices need {-(-n // CHUNK_SIZE)} chunks, file has {n_chunks}",
                         "chunk")
    bounds = np.stack([chunk[p].astype(np.float64) for p in CHUNK_PROPS], axis=1)
    bad = ~np.isfinite(bounds)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise SceneError(path, f"chunk {row} has a non-finite value ({bounds[row, col]})", f"chunk.{CHUNK_PROPS[col]}")
    ci = np.arange(n) // CHUNK_SIZE
    b = bounds[ci]
    pos, rot, scl, col = (vertex[p].astype(np.uint32) for p in VERTEX_PROPS)

    def lerp(lo: np.ndarray, hi: np.ndarray, t: np.ndarray) -> np.ndarray:
        return lo * (1.0 - t) + hi * t

    t_pos = np.stack([_unorm(pos, 21, 11), _unorm(pos, 11, 10), _unorm(pos, 0, 11)], axis=1)
    means = lerp(b[:, 0:3], b[:, 3:6], t_pos)
    t_scl = np.stack([_unorm(scl, 21, 11), _unorm(scl, 11, 10), _unorm(scl, 0, 11)], axis=1)
    log_scales = lerp(b[:, 6:9], b[:, 9:12], t_scl)
    rgb = lerp(b[:, 12:15], b[:, 15:18], np.stack([_unorm(col, 24, 8), _unorm(col, 16, 8), _unorm(col, 8, 8)], axis=1))
    opacity = np.clip(_unorm(col, 0, 8), 0.0, 1.0)
    # Rotation: three stored components around the largest one (index in the top two bits).
    stored = np.stack([(_unorm(rot, 20, 10) - 0.5) * _NORM, (_unorm(rot, 10, 10) - 0.5) * _NORM,
                       (_unorm(rot, 0, 10) - 0.5) * _NORM], axis=1)
    largest = np.sqrt(np.maximum(0.0, 1.0 - (stored ** 2).sum(axis=1)))
    which = (rot >> np.uint32(30)).astype(np.int64)
    quats = np.empty((n, 4))
    for k in range(4):
        others = [j for j in range(4) if j != k]
        sel = which == k
        quats[sel, k] = largest[sel]
        quats[np.ix_(sel, others)] = stored[sel]
    scales = np.exp(log_scales)
    if not np.isfinite(scales).all() or (scales <= 0).any():
        idx = int(np.argwhere(~(np.isfinite(scales) & (scales > 0)).all(axis=1))[0, 0])
        raise SceneError(path, f"vertex {idx}: scale decodes to zero or infinity", "vertex.packed_scale")
    sh_el = elements.get("sh", {})
    rest_names = sorted((p for p in sh_el if p.startswith(("f_rest_", "coeff_"))), key=lambda s: int(s.rsplit("_", 1)[1]))
    n_rest = len(rest_names)
    degree_for_rest = {3 * (k - 1): d for d, k in SH_COEFFS_FOR_DEGREE.items()}
    if n_rest not in degree_for_rest:
        raise SceneError(path, f"{n_rest} SH properties; a splat of SH degree 0-3 has 0, 9, 24 or 45", "sh")
    k = n_rest // 3 + 1
    sh = np.empty((n, k, 3), dtype=np.float32)
    sh[:, 0, :] = (rgb - 0.5) / SH_C0
    if n_rest:
        if len(sh_el[rest_names[0]]) != n:
            raise SceneError(path, f"sh element has {len(sh_el[rest_names[0]])} records, vertex has {n}", "sh")
        rest = np.stack([(sh_el[p].astype(np.float32) / 256.0 - 0.5) * 8.0 for p in rest_names], axis=1)
        sh[:, 1:, :] = rest.reshape(n, 3, k - 1).transpose(0, 2, 1)
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    return Gaussians(means=means.astype(np.float32), scales=scales.astype(np.float32),
                     quats_wxyz=quats.astype(np.float32), opacities=opacity.astype(np.float32), sh=sh)


def _pack_unorm3(t: np.ndarray) -> np.ndarray:
    q = [np.clip(np.rint(t[:, i] * m), 0, m).astype(np.uint32) for i, m in enumerate((2047, 1023, 2047))]
    return (q[0] << np.uint32(21)) | (q[1] << np.uint32(11)) | q[2]


def write_compressed_ply(path: str | Path, gaussians: Gaussians) -> None:
    """Write ``gaussians`` in the compressed layout (for fixtures and round trips), atomically."""
    g, path = gaussians, Path(path)
    n = len(g)
    n_chunks = -(-n // CHUNK_SIZE)
    ci = np.arange(n) // CHUNK_SIZE
    rgb = g.sh[:, 0, :].astype(np.float64) * SH_C0 + 0.5
    log_s = np.log(g.scales.astype(np.float64))
    fields = np.concatenate([g.means.astype(np.float64), log_s, rgb], axis=1)  # (n, 9)
    lo = np.full((n_chunks, 9), np.inf)
    hi = np.full((n_chunks, 9), -np.inf)
    np.minimum.at(lo, ci, fields)
    np.maximum.at(hi, ci, fields)
    span = np.where(hi - lo > 1e-12, hi - lo, 1.0)
    t = (fields - lo[ci]) / span[ci]
    q = g.quats_wxyz.astype(np.float64) / np.linalg.norm(g.quats_wxyz, axis=1, keepdims=True)
    which = np.argmax(np.abs(q), axis=1)
    q = np.where(q[np.arange(n), which][:, None] < 0, -q, q)
    others = np.array([[j for j in range(4) if j != k] for k in range(4)])[which]
    stored = np.take_along_axis(q, others, axis=1)
    qs = np.clip(np.rint((stored / _NORM + 0.5) * 1023), 0, 1023).astype(np.uint32)
    packed_rot = (which.astype(np.uint32) << np.uint32(30)) | (qs[:, 0] << np.uint32(20)) | (qs[:, 1] << np.uint32(10)) | qs[:, 2]
    c8 = np.clip(np.rint(t[:, 6:9] * 255), 0, 255).astype(np.uint32)
    a8 = np.clip(np.rint(g.opacities.astype(np.float64) * 255), 0, 255).astype(np.uint32)
    packed_col = (c8[:, 0] << np.uint32(24)) | (c8[:, 1] << np.uint32(16)) | (c8[:, 2] << np.uint32(8)) | a8
    chunk = np.zeros(n_chunks, dtype=[(p, "<f4") for p in CHUNK_PROPS])
    order = [0, 1, 2]
    for j, axis in enumerate("xyz"):
        chunk[f"min_{axis}"], chunk[f"max_{axis}"] = lo[:, order[j]], hi[:, order[j]]
        chunk[f"min_scale_{axis}"], chunk[f"max_scale_{axis}"] = lo[:, 3 + j], hi[:, 3 + j]
    for j, c in enumerate("rgb"):
        chunk[f"min_{c}"], chunk[f"max_{c}"] = lo[:, 6 + j], hi[:, 6 + j]
    vertex = np.zeros(n, dtype=[(p, "<u4") for p in VERTEX_PROPS])
    vertex["packed_position"] = _pack_unorm3(t[:, 0:3])
    vertex["packed_scale"] = _pack_unorm3(t[:, 3:6])
    vertex["packed_rotation"] = packed_rot
    vertex["packed_color"] = packed_col
    k = g.sh.shape[1]
    header = "ply\nformat binary_little_endian 1.0\n"
    header += f"element chunk {n_chunks}\n" + "".join(f"property float {p}\n" for p in CHUNK_PROPS)
    header += f"element vertex {n}\n" + "".join(f"property uint {p}\n" for p in VERTEX_PROPS)
    body = chunk.tobytes() + vertex.tobytes()
    if k > 1:
        rest = g.sh[:, 1:, :].transpose(0, 2, 1).reshape(n, -1).astype(np.float64)
        header += f"element sh {n}\n" + "".join(f"property uchar f_rest_{i}\n" for i in range(rest.shape[1]))
        body += np.clip(np.trunc((rest / 8.0 + 0.5) * 256.0), 0, 255).astype(np.uint8).tobytes()
    header += "end_header\n"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(header.encode("ascii") + body)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
