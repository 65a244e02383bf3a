"""Niantic ``.spz``: a gzip stream holding a 16-byte header and one array per attribute.

Header (little-endian): magic ``0x5053474e`` ("NGSP"), version (2 or 3), number of points,
SH degree (0-3), fractional bits, flags (bit 0: trained with antialiasing), reserved (0).

Arrays, in order, N = number of points:

    positions  N x 3 x int24   fixed point: value = int / 2**fractional_bits, source units
    alphas     N x uint8       opacity after the sigmoid, byte / 255
    colors     N x 3 x uint8   DC colour: f_dc = (byte / 255 - 0.5) / 0.15
    scales     N x 3 x uint8   log scale = byte / 16 - 10
    rotations  version 2: N x 3 x uint8, (x, y, z) = byte / 127.5 - 1, w = sqrt(1 - |xyz|^2);
               version 3: N x uint32, bits 30-31 the index of the largest of (x, y, z, w),
               then the other three from index 3 down to 0, each 9 bits of magnitude
               (over [0, 1/sqrt 2]) and a sign bit, lowest bits first
    sh         N x (K - 1) x 3 x uint8, coefficient-major with RGB inner: value = (byte - 128) / 128

The specification says the stream is right-up-back (OpenGL axes); files in the wild do not
always follow it, which is why ``airplay scene import`` finds the up axis itself. The
zstd-compressed version 4 is not read (a clear error says so). The writer exists to make
test fixtures.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import Gaussians

MAGIC = 0x5053474E
HEADER = struct.Struct("<IIIBBBB")
COLOR_SCALE = 0.15
_SQRT1_2 = float(np.sqrt(0.5))


def _decompress(path: Path, raw: bytes) -> bytes:
    if raw[:4] == b"NGSP":
        raise SceneError(path, "SPZ version 4 (zstd streams) is not supported; convert it to version 3 or to PLY")
    if raw[:2] != b"\x1f\x8b":
        raise SceneError(path, "not an .spz file (no gzip stream at the start)")
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:
        raise SceneError(path, f"SPZ gzip stream is corrupt or truncated ({err})") from None


def read_spz(path: str | Path) -> Gaussians:
    """Load a ``.spz`` file (version 2 or 3) into :class:`Gaussians`, source frame.

    :class:`SceneError` names the file and the field: bad magic or version, a body shorter
    than the header promises (naming the array and the first missing record), SH degree > 3.
    """
    path = Path(path)
    if not path.is_file():
        raise SceneError(path, "file not found")
    data = _decompress(path, path.read_bytes())
    if len(data) < HEADER.size:
        raise SceneError(path, f"SPZ header needs {HEADER.size} bytes, the stream has {len(data)}")
    magic, version, n, sh_degree, frac_bits, _flags, _reserved = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise SceneError(path, f"SPZ magic is {magic:#x}, expected {MAGIC:#x}", "header.magic")
    if version not in (2, 3):
        raise SceneError(path, f"SPZ version {version} is not supported (2 or 3)", "header.version")
    if sh_degree > 3:
        raise SceneError(path, f"SH degree {sh_degree}; SPZ holds 0-3", "header.sh_degree")
    if n == 0:
        raise SceneError(path, "SPZ holds 0 points (empty splat)", "header.num_points")
    k = (sh_degree + 1) ** 2
    rot_bytes = 4 if version >= 3 else 3
    sizes = (("positions", 9), ("alphas", 1), ("colors", 3), ("scales", 3), ("rotations", rot_bytes),
             ("sh", 3 * (k - 1)))
    arrays: dict[str, np.ndarray] = {}
    offset = HEADER.size
    for name, per in sizes:
        need = n * per
        have = len(data) - offset
        if have < need:
            raise SceneError(path, f"SPZ truncated: {name} needs {need} bytes for {n} points, stream has {max(have, 0)} "
                             f"(first missing record {max(have, 0) // max(per, 1)})", name)
        arrays[name] = np.frombuffer(data, dtype=np.uint8, count=need, offset=offset).reshape(n, per) if per else \
            np.zeros((n, 0), np.uint8)
        offset += need
    p = arrays["positions"].reshape(n, 3, 3).astype(np.int32)
    fixed = p[..., 0] | (p[..., 1] << 8) | (p[..., 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    means = fixed.astype(np.float64) / float(1 << frac_bits)
    opacity = arrays["alphas"][:, 0].astype(np.float32) / 255.0
    dc = (arrays["colors"].astype(np.float32) / 255.0 - 0.5) / COLOR_SCALE
    scales = np.exp(arrays["scales"].astype(np.float64) / 16.0 - 10.0)
    r = arrays["rotations"]
    xyzw = np.zeros((n, 4))
    if version == 2:
        xyz = r.astype(np.float64) / 127.5 - 1.0
        xyzw[:, :3] = xyz
        xyzw[:, 3] = np.sqrt(np.maximum(0.0, 1.0 - (xyz ** 2).sum(axis=1)))
    else:
        comp = r[:, 0].astype(np.uint64) | (r[:, 1].astype(np.uint64) << 8) | (r[:, 2].astype(np.uint64) << 16) \
            | (r[:, 3].astype(np.uint64) << 24)
        largest = (comp >> np.uint64(30)).astype(np.int64)
        sum_sq = np.zeros(n)
        for i in range(3, -1, -1):
            active = largest != i
            mag = (comp & np.uint64(511)).astype(np.float64)
            neg = ((comp >> np.uint64(9)) & np.uint64(1)).astype(bool)
            val = _SQRT1_2 * mag / 511.0 * np.where(neg, -1.0, 1.0)
            xyzw[active, i] = val[active]
            sum_sq += np.where(active, val * val, 0.0)
            comp = np.where(active, comp >> np.uint64(10), comp)
        xyzw[np.arange(n), largest] = np.sqrt(np.maximum(0.0, 1.0 - sum_sq))
    quats = xyzw[:, [3, 0, 1, 2]]
    norms = np.linalg.norm(quats, axis=1)
    if (norms < 1e-8).any():
        raise SceneError(path, f"point {int(np.argmax(norms < 1e-8))}: rotation decodes to a zero quaternion", "rotations")
    sh = np.empty((n, k, 3), dtype=np.float32)
    sh[:, 0, :] = dc
    if k > 1:
        sh[:, 1:, :] = (arrays["sh"].reshape(n, k - 1, 3).astype(np.float32) - 128.0) / 128.0
    return Gaussians(means=means.astype(np.float32), scales=scales.astype(np.float32),
                     quats_wxyz=(quats / norms[:, None]).astype(np.float32), opacities=opacity, sh=sh)


def write_spz(path: str | Path, gaussians: Gaussians, *, version: int = 3, fractional_bits: int = 12) -> None:
    """Write ``gaussians`` as ``.spz`` (for fixtures and round trips), atomically.

    Positions must fit 24-bit fixed point: |x| < 2**(23 - fractional_bits).
    """
    g, path = gaussians, Path(path)
    n, k = len(g), g.sh.shape[1]
    if version not in (2, 3):
        raise ValueError(f"write_spz: version must be 2 or 3, got {version}")
    fixed = np.rint(g.means.astype(np.float64) * (1 << fractional_bits)).astype(np.int64)
    if np.abs(fixed).max() >= (1 << 23):
        raise ValueError("write_spz: positions do not fit 24-bit fixed point; lower fractional_bits")
    fixed &= 0xFFFFFF
    pos = np.stack([(fixed >> s) & 0xFF for s in (0, 8, 16)], axis=-1).astype(np.uint8).reshape(n, 9)
    alpha = np.clip(np.rint(g.opacities.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
    color = np.clip(np.rint((g.sh[:, 0, :].astype(np.float64) * COLOR_SCALE + 0.5) * 255.0), 0, 255).astype(np.uint8)
    scale = np.clip(np.rint((np.log(g.scales.astype(np.float64)) + 10.0) * 16.0), 0, 255).astype(np.uint8)
    q = g.quats_wxyz.astype(np.float64)
    xyzw = (q / np.linalg.norm(q, axis=1, keepdims=True))[:, [1, 2, 3, 0]]
    if version == 2:
        xyzw = np.where(xyzw[:, 3:4] < 0, -xyzw, xyzw)
        rot = np.clip(np.rint((xyzw[:, :3] + 1.0) * 127.5), 0, 255).astype(np.uint8)
    else:
        largest = np.argmax(np.abs(xyzw), axis=1)
        xyzw = np.where(xyzw[np.arange(n), largest][:, None] < 0, -xyzw, xyzw)
        comp = largest.astype(np.uint64)
        for i in range(4):
            active = largest != i
            mag = np.clip(np.rint(np.abs(xyzw[:, i]) / _SQRT1_2 * 511.0), 0, 511).astype(np.uint64)
            neg = (xyzw[:, i] < 0).astype(np.uint64)
            comp = np.where(active, (comp << np.uint64(10)) | (neg << np.uint64(9)) | mag, comp)
        rot = np.stack([(comp >> np.uint64(s)) & np.uint64(0xFF) for s in (0, 8, 16, 24)], axis=1).astype(np.uint8)
    sh = np.clip(np.rint(g.sh[:, 1:, :].astype(np.float64) * 128.0 + 128.0), 0, 255).astype(np.uint8).reshape(n, -1)
    header = HEADER.pack(MAGIC, version, n, round(np.sqrt(k)) - 1, fractional_bits, 0, 0)
    body = header + pos.tobytes() + alpha.tobytes() + color.tobytes() + scale.tobytes() + rot.tobytes() + sh.tobytes()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(gzip.compress(body, mtime=0))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
