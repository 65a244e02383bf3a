"""Read and write 3D Gaussian Splatting PLY files (the INRIA layout).

Layout of the ``vertex`` element (any property order; extra properties such as
``nx ny nz`` are ignored):

    x y z                      position, metres, in the source frame
    f_dc_0 f_dc_1 f_dc_2       SH DC coefficient per channel (R, G, B)
    f_rest_0 .. f_rest_{M-1}   higher-order SH, channel-major: M = 3 * ((d+1)^2 - 1),
                               i.e. 0, 9, 24 or 45 for degree 0..3
    opacity                    logit of the opacity
    scale_0 scale_1 scale_2    log of the standard deviations, metres
    rot_0 rot_1 rot_2 rot_3    quaternion (w, x, y, z), not necessarily normalised

Binary little- and big-endian and ASCII files are read; files are written binary
little-endian, float32, which is what the INRIA code, gsplat and every viewer expect.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from airplay.scene.errors import SceneError
from airplay.scene.gaussians import SH_COEFFS_FOR_DEGREE, Gaussians, rgb_to_sh_dc

_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1",
    "short": "i2", "int16": "i2", "ushort": "u2", "uint16": "u2",
    "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}
_FORMATS = {"binary_little_endian": "<", "binary_big_endian": ">", "ascii": None}
_MAX_HEADER_BYTES = 1 << 20


def _parse_header(path: Path, raw: bytes) -> tuple[str, list[tuple[str, int, list[tuple[str, str]]]], int]:
    """Returns (format, [(element, count, [(prop, dtype)])], header length in bytes)."""
    if not raw.startswith(b"ply\n") and not raw.startswith(b"ply\r\n"):
        raise SceneError(path, "not a PLY file (it does not start with the line 'ply')")
    end = raw.find(b"end_header")
    if end < 0:
        raise SceneError(path, "PLY header has no 'end_header' line (file truncated or not a PLY)")
    newline = raw.find(b"\n", end)
    if newline < 0:
        raise SceneError(path, "PLY header ends without a newline after 'end_header' (file truncated)")
    header_len = newline + 1
    fmt = None
    elements: list[tuple[str, int, list[tuple[str, str]]]] = []
    for lineno, line in enumerate(raw[:end].decode("ascii", errors="replace").splitlines()[1:], start=2):
        words = line.split()
        if not words or words[0] in ("comment", "obj_info"):
            continue
        if words[0] == "format":
            if len(words) < 2 or words[1] not in _FORMATS:
                raise SceneError(path, f"PLY header line {lineno}: unsupported format {line.strip()!r}")
            fmt = words[1]
        elif words[0] == "element":
            if len(words) != 3 or not words[2].isdigit():
                raise SceneError(path, f"PLY header line {lineno}: malformed element line {line.strip()!r}")
            elements.append((words[1], int(words[2]), []))
        elif words[0] == "property":
            if not elements:
                raise SceneError(path, f"PLY header line {lineno}: property before any element")
            if words[1] == "list":
                elements[-1][2].append((words[-1], "list"))
                continue
            if len(words) != 3 or words[1] not in _PLY_TYPES:
                raise SceneError(path, f"PLY header line {lineno}: unknown property type in {line.strip()!r}")
            elements[-1][2].append((words[2], _PLY_TYPES[words[1]]))
        else:
            raise SceneError(path, f"PLY header line {lineno}: unexpected keyword {words[0]!r}")
    if fmt is None:
        raise SceneError(path, "PLY header has no 'format' line")
    return fmt, elements, header_len


def read_ply_vertices(path: str | Path) -> dict[str, np.ndarray]:
    """The ``vertex`` element of a PLY file as {property name: (N,) array}.

    Raises :class:`SceneError` naming the file for a missing file, a bad header, a missing
    vertex element, a list property in it, or a body shorter than the header promises.
    """
    path = Path(path)
    if not path.is_file():
        raise SceneError(path, "file not found")
    raw = path.read_bytes()
    fmt, elements, header_len = _parse_header(path, raw[:_MAX_HEADER_BYTES])
    names = [e[0] for e in elements]
    if "vertex" not in names:
        raise SceneError(path, f"PLY has no 'vertex' element (elements: {names})")
    if names[0] != "vertex":
        raise SceneError(path, "PLY 'vertex' element must come first to be read as a splat")
    _, count, props = elements[0]
    if count == 0:
        raise SceneError(path, "PLY 'vertex' element has 0 entries (empty splat)")
    if any(t == "list" for _, t in props):
        raise SceneError(path, "PLY 'vertex' element has a list property; a splat has only scalars")
    seen: set[str] = set()
    for name, _ in props:
        if name in seen:
            raise SceneError(path, f"PLY property {name!r} appears twice")
        seen.add(name)
    body = raw[header_len:]
    if fmt == "ascii":
        rows = body.decode("ascii", errors="replace").split("\n")
        values = []
        for i in range(count):
            if i >= len(rows) or not rows[i].strip():
                raise SceneError(path, f"PLY truncated: header promises {count} vertices, found {i}")
            parts = rows[i].split()
            if len(parts) != len(props):
                raise SceneError(path, f"PLY vertex {i}: {len(parts)} values, header has {len(props)} properties")
            values.append([float(p) for p in parts])
        table = np.asarray(values, dtype=np.float64)
        return {name: table[:, j].astype(dtype) for j, (name, dtype) in enumerate(props)}
    dtype = np.dtype([(name, _FORMATS[fmt] + t) for name, t in props])
    need = count * dtype.itemsize
    if len(body) < need:
        raise SceneError(
            path,
            f"PLY truncated: header promises {count} vertices x {dtype.itemsize} bytes = {need} bytes, "
            f"file has {len(body)} bytes after the header",
        )
    table = np.frombuffer(body, dtype=dtype, count=count)
    return {name: np.ascontiguousarray(table[name]).astype(table[name].dtype.newbyteorder("=")) for name in table.dtype.names}


def read_ply_elements(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """Every element of a binary PLY file as {element: {property: (count,) array}}, in file order.

    For layouts with more than one element (PlayCanvas's compressed PLY: ``chunk``, ``vertex``,
    ``sh``). Only scalar properties; an ASCII file is read through :func:`read_ply_vertices`
    (its vertex element only). :class:`SceneError` names the file, the element and the
    shortfall for a truncated body.
    """
    path = Path(path)
    if not path.is_file():
        raise SceneError(path, "file not found")
    raw = path.read_bytes()
    fmt, elements, header_len = _parse_header(path, raw[:_MAX_HEADER_BYTES])
    if fmt == "ascii":
        return {"vertex": read_ply_vertices(path)}
    out: dict[str, dict[str, np.ndarray]] = {}
    offset = header_len
    for name, count, props in elements:
        if any(t == "list" for _, t in props):
            raise SceneError(path, f"PLY element {name!r} has a list property; a splat has only scalars")
        dtype = np.dtype([(p, _FORMATS[fmt] + t) for p, t in props])
        need = count * dtype.itemsize
        if len(raw) - offset < need:
            have = max(0, len(raw) - offset)
            raise SceneError(
                path,
                f"PLY truncated in element {name!r}: header promises {count} records x {dtype.itemsize} bytes "
                f"= {need} bytes, file has {have} (record {have // max(dtype.itemsize, 1)} is the first missing)",
            )
        table = np.frombuffer(raw, dtype=dtype, count=count, offset=offset)
        offset += need
        out[name] = {p: np.ascontiguousarray(table[p]).astype(table[p].dtype.newbyteorder("=")) for p in dtype.names}
    return out


def _require(path: Path, props: dict[str, np.ndarray], names: list[str]) -> None:
    missing = [n for n in names if n not in props]
    if missing:
        have = ", ".join(sorted(props)[:12])
        raise SceneError(path, f"missing PLY properties {missing} (present: {have}{', ...' if len(props) > 12 else ''})")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(np.float32)


def read_gaussians_ply(path: str | Path) -> Gaussians:
    """Load an INRIA-layout 3DGS PLY into :class:`Gaussians` (activated values).

    Every defect is a :class:`SceneError` naming the file: missing or misnamed properties,
    an f_rest count that is not 0/9/24/45, gaps in the f_rest numbering, NaN or infinite
    values, quaternions of zero norm.
    """
    path = Path(path)
    props = read_ply_vertices(path)
    if "f_dc_0" not in props and all(c in props for c in ("red", "green", "blue")):
        # nerfstudio's exporter with ply_color_mode=rgb: 8-bit (or float) colour, no SH.
        for c, name in enumerate(("red", "green", "blue")):
            raw = props.pop(name)
            rgb = raw.astype(np.float32) / (255.0 if np.issubdtype(raw.dtype, np.integer) else 1.0)
            props[f"f_dc_{c}"] = rgb_to_sh_dc(rgb)
    base = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity",
            "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    _require(path, props, base)
    rest_names = [n for n in props if n.startswith("f_rest_")]
    n_rest = len(rest_names)
    expected_rest = {3 * (k - 1): d for d, k in SH_COEFFS_FOR_DEGREE.items()}
    if n_rest not in expected_rest:
        raise SceneError(
            path,
            f"{n_rest} f_rest_* properties; a splat of SH degree 0, 1, 2 or 3 has 0, 9, 24 or 45",
        )
    wanted = [f"f_rest_{i}" for i in range(n_rest)]
    if sorted(rest_names) != sorted(wanted):
        raise SceneError(path, f"f_rest_* properties are not numbered 0..{n_rest - 1}: {sorted(rest_names)[:6]}...")
    n = len(props["x"])
    k = n_rest // 3 + 1
    means = np.stack([props["x"], props["y"], props["z"]], axis=1).astype(np.float32)
    sh = np.empty((n, k, 3), dtype=np.float32)
    sh[:, 0, :] = np.stack([props[f"f_dc_{c}"] for c in range(3)], axis=1)
    if n_rest:
        rest = np.stack([props[f"f_rest_{i}"] for i in range(n_rest)], axis=1).astype(np.float32)
        # Stored channel-major: (3, K-1) per Gaussian.
        sh[:, 1:, :] = rest.reshape(n, 3, k - 1).transpose(0, 2, 1)
    log_scales = np.stack([props[f"scale_{i}"] for i in range(3)], axis=1).astype(np.float32)
    quats = np.stack([props[f"rot_{i}"] for i in range(4)], axis=1).astype(np.float32)
    logit = props["opacity"].astype(np.float32)
    for name, arr in (("x/y/z", means), ("f_dc/f_rest", sh), ("scale_*", log_scales),
                      ("rot_*", quats), ("opacity", logit)):
        bad = ~np.isfinite(arr)
        if bad.any():
            idx = int(np.argwhere(bad.reshape(n, -1).any(axis=1))[0, 0])
            raise SceneError(path, f"{int(bad.reshape(n, -1).any(axis=1).sum())} Gaussians have NaN or infinite {name} (first: index {idx})")
    norms = np.linalg.norm(quats.astype(np.float64), axis=1)
    bad_q = ~(norms > 1e-8)
    if bad_q.any():
        raise SceneError(path, f"{int(bad_q.sum())} Gaussians have a rot_* quaternion of zero norm (first: index {int(np.argmax(bad_q))})")
    scales = np.exp(log_scales.astype(np.float64))
    if not np.isfinite(scales).all() or (scales <= 0).any():
        raise SceneError(path, "scale_* (log scales) overflow to infinite or zero size")
    return Gaussians(
        means=means,
        scales=scales.astype(np.float32),
        quats_wxyz=(quats / norms[:, None]).astype(np.float32),
        opacities=_sigmoid(logit),
        sh=sh,
    )


def write_gaussians_ply(path: str | Path, gaussians: Gaussians) -> None:
    """Write ``gaussians`` as a binary little-endian INRIA-layout PLY, atomically.

    The file is written next to ``path`` and renamed into place, so a crash never leaves a
    half-written splat. Output bytes depend only on the input arrays.
    """
    path = Path(path)
    g = gaussians
    n, k = len(g), g.sh.shape[1]
    rest_names = [f"f_rest_{i}" for i in range(3 * (k - 1))]
    names = ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2", *rest_names,
             "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    table = np.zeros(n, dtype=np.dtype([(name, "<f4") for name in names]))
    for i, axis in enumerate("xyz"):
        table[axis] = g.means[:, i]
    for c in range(3):
        table[f"f_dc_{c}"] = g.sh[:, 0, c]
    if k > 1:
        rest = g.sh[:, 1:, :].transpose(0, 2, 1).reshape(n, -1)
        for i, name in enumerate(rest_names):
            table[name] = rest[:, i]
    op = np.clip(g.opacities.astype(np.float64), 1e-6, 1 - 1e-6)
    table["opacity"] = np.log(op / (1 - op))
    for i in range(3):
        table[f"scale_{i}"] = np.log(g.scales[:, i].astype(np.float64))
        table[f"rot_{i}"] = g.quats_wxyz[:, i]
    table["rot_3"] = g.quats_wxyz[:, 3]
    header = "ply\nformat binary_little_endian 1.0\n"
    header += f"element vertex {n}\n" + "".join(f"property float {name}\n" for name in names) + "end_header\n"
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(header.encode("ascii"))
            f.write(table.tobytes())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
