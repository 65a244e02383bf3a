"""`airplay scene import` (issue 42): capture readers, bad input, the found frame, the derived
collision geometry against truth, and the real captures in ../shared/data/real/.

Fixtures are made here: tiny random splats for the format round trips, a small "capture" (a
12 m ground square with a 2 m box on it, rotated and scaled at random) for the pipeline and
the bad-input cases, and a degraded synthetic urban scene (floaters, noise, holes, a far
shell, a random similarity) whose true mesh the import is measured against.
"""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from airplay.capture_import import ImportOptions, import_capture
from airplay.scene.capture_formats import read_capture
from airplay.scene.compressed_ply_io import write_compressed_ply
from airplay.scene.errors import SceneError
from airplay.scene.gaussians import Gaussians, quat_wxyz_to_matrix
from airplay.scene.ply_io import write_gaussians_ply
from airplay.scene.splat_io import SPLAT_DTYPE, write_splat
from airplay.scene.spz_io import write_spz

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
FAST = {"voxel_m": 0.2, "camera_points": 8, "view_px": 64, "max_faces": 40_000, "progress": False}


def random_gaussians(n: int, sh_degree: int, seed: int = 0) -> Gaussians:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 4))
    return Gaussians(means=rng.uniform(-3, 3, (n, 3)).astype(np.float32),
                     scales=np.exp(rng.uniform(-5, -1, (n, 3))).astype(np.float32),
                     quats_wxyz=(q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32),
                     opacities=rng.uniform(0.05, 0.95, n).astype(np.float32),
                     sh=(0.5 * rng.uniform(-1, 1, (n, (sh_degree + 1) ** 2, 3))).astype(np.float32))


def _flat(rng, centres: np.ndarray, normal_axis: int, spacing: float) -> Gaussians:
    """Flat Gaussians (thin along ``normal_axis``) at ``centres``."""
    n = len(centres)
    scales = np.full((n, 3), 0.7 * spacing)
    scales[:, normal_axis] = 0.002
    q = np.tile([1.0, 0.0, 0.0, 0.0], (n, 1))
    return Gaussians(centres.astype(np.float32), scales.astype(np.float32), q.astype(np.float32),
                     rng.uniform(0.8, 1.0, n).astype(np.float32),
                     (0.5 * rng.uniform(-1, 1, (n, 1, 3))).astype(np.float32))


def ground_and_box(seed: int = 0, spacing: float = 0.12) -> Gaussians:
    """A 12 m x 12 m ground at z = 0 and a 2 m box standing at (2, 1), map frame (truth)."""
    rng = np.random.default_rng(seed)
    g = np.arange(-6, 6, spacing)
    gx, gy = np.meshgrid(g, g, indexing="ij")
    ground = np.stack([gx.ravel(), gy.ravel(), np.zeros(gx.size)], axis=1)
    ground = ground[~((np.abs(ground[:, 0] - 2) < 1) & (np.abs(ground[:, 1] - 1) < 1))]
    parts = [_flat(rng, ground, 2, spacing)]
    s = np.arange(-1, 1, spacing) + spacing / 2
    a, b = np.meshgrid(s, s + 1.0, indexing="ij")  # side faces: z from 0 to 2
    for axis in (0, 1):
        for sign in (-1, 1):
            pts = np.zeros((a.size, 3))
            pts[:, axis] = sign * 1.0
            pts[:, 1 - axis] = a.ravel()
            pts[:, 2] = b.ravel()
            parts.append(_flat(rng, pts + [2, 1, 0], axis, spacing))
    top = np.stack([a.ravel(), (b - 1.0).ravel(), np.full(a.size, 2.0)], axis=1)
    parts.append(_flat(rng, top + [2, 1, 0], 2, spacing))
    return Gaussians.concatenate(parts)


SIM_SCALE = 0.37
SIM_ROT = quat_wxyz_to_matrix(np.array([0.8, 0.3, -0.4, 0.33]))
SIM_T = np.array([1.0, -2.0, 0.5])


@pytest.fixture(scope="module")
def capture_file(tmp_path_factory) -> Path:
    """The ground-and-box capture under a known similarity (source = s R truth + t), as a PLY."""
    path = tmp_path_factory.mktemp("capture") / "capture.ply"
    g = ground_and_box().transformed(SIM_SCALE, SIM_ROT, SIM_T)
    write_gaussians_ply(path, Gaussians(g.means, g.scales, g.quats_wxyz, g.opacities, g.sh))
    return path


def _to_source(p):
    return SIM_SCALE * (np.asarray(p, float) @ SIM_ROT.T) + SIM_T


@pytest.fixture(scope="module")
def imported(capture_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("imp") / "scene"
    p1, p2 = _to_source([[-5, 0, 0], [5, 0, 0]])
    result = import_capture(capture_file, out, ImportOptions(known_distance=(*p1, *p2, 10.0), **FAST))
    return result


# -- formats -----------------------------------------------------------------------------

WRITERS = {
    "inria_ply": (".ply", write_gaussians_ply),
    "compressed_ply": (".ply", write_compressed_ply),
    "spz": (".spz", write_spz),
    "spz_v2": (".spz", lambda p, g: write_spz(p, g, version=2)),
    "splat": (".splat", write_splat),
}
# (position m, log-scale, opacity, quaternion |dot| - 1, DC colour, higher SH) tolerances per format
TOL = {
    "inria_ply": (1e-6, 1e-5, 1e-5, 1e-6, 1e-6, 1e-6),
    "compressed_ply": (6e-3, 4e-3, 3e-3, 1e-4, 4e-3, 0.04),
    "spz": (2.5e-4, 0.035, 3e-3, 1e-4, 0.02, 0.005),
    "spz_v2": (2.5e-4, 0.035, 3e-3, 0.01, 0.02, 0.005),
    "splat": (1e-6, 1e-6, 3e-3, 1e-4, 0.01, None),
}


@pytest.mark.parametrize("sh_degree", [0, 1, 2, 3])
@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_format_round_trip(tmp_path, fmt, sh_degree):
    suffix, write = WRITERS[fmt]
    g = random_gaussians(600, sh_degree, seed=sh_degree)
    path = tmp_path / f"capture{suffix}"
    write(path, g)
    cap = read_capture(path)
    h = cap.gaussians
    assert cap.format == fmt.replace("_v2", "") and len(h) == len(g)
    tol = TOL[fmt]
    assert np.abs(h.means - g.means).max() <= tol[0]
    assert np.abs(np.log(h.scales / g.scales)).max() <= tol[1]
    assert np.abs(h.opacities - g.opacities).max() <= tol[2]
    assert np.abs(np.abs((h.quats_wxyz * g.quats_wxyz).sum(axis=1)) - 1).max() <= tol[3]
    assert np.abs(h.sh[:, 0] - g.sh[:, 0]).max() <= tol[4]
    if tol[5] is None:
        assert h.sh_degree == 0
    else:
        assert h.sh_degree == sh_degree
        if sh_degree:
            assert np.abs(h.sh[:, 1:] - g.sh[:, 1:]).max() <= tol[5]


def _write_ply(path: Path, columns: dict[str, np.ndarray], fmt: str = "binary_little_endian") -> None:
    """A PLY with exactly these vertex properties (dtype from each array), in this order."""
    kinds = {"f4": "float", "f8": "double", "u1": "uchar", "i4": "int"}
    n = len(next(iter(columns.values())))
    endian = "<" if fmt == "binary_little_endian" else ">"
    dtype = np.dtype([(k, endian + v.dtype.str[1:]) for k, v in columns.items()])
    table = np.zeros(n, dtype)
    for k, v in columns.items():
        table[k] = v
    header = f"ply\nformat {fmt} 1.0\nelement vertex {n}\n"
    header += "".join(f"property {kinds[v.dtype.str[1:]]} {k}\n" for k, v in columns.items()) + "end_header\n"
    path.write_bytes(header.encode() + table.tobytes())


def _inria_columns(g: Gaussians) -> dict[str, np.ndarray]:
    cols = {a: g.means[:, i] for i, a in enumerate("xyz")}
    cols.update({f"f_dc_{c}": g.sh[:, 0, c] for c in range(3)})
    cols["opacity"] = np.log(g.opacities / (1 - g.opacities))
    cols.update({f"scale_{i}": np.log(g.scales[:, i]) for i in range(3)})
    cols.update({f"rot_{i}": g.quats_wxyz[:, i] for i in range(4)})
    return cols


def test_exporter_variants(tmp_path):
    """nerfstudio (normals, rgb colour mode), gsplat (no normals, any order), doubles, big-endian."""
    g = random_gaussians(200, 0)
    cols = _inria_columns(g)
    # gsplat-like: shuffled order, no normals; doubles; big-endian
    order = list(reversed(list(cols)))
    _write_ply(tmp_path / "gsplat.ply", {k: cols[k].astype(np.float32) for k in order})
    _write_ply(tmp_path / "double.ply", {k: cols[k].astype(np.float64) for k in cols})
    _write_ply(tmp_path / "be.ply", {k: cols[k].astype(np.float32) for k in cols}, fmt="binary_big_endian")
    for name in ("gsplat.ply", "double.ply", "be.ply"):
        h = read_capture(tmp_path / name).gaussians
        assert np.allclose(h.means, g.means, atol=1e-5) and np.allclose(h.opacities, g.opacities, atol=1e-5)
    # nerfstudio, ply_color_mode=rgb: normals and 8-bit colour instead of f_dc
    rgb = np.clip(np.rint(g.colors_dc * 255), 0, 255).astype(np.uint8)
    ns = {**{k: cols[k] for k in "xyz"}, "nx": np.zeros(200, np.float32), "ny": np.zeros(200, np.float32),
          "nz": np.zeros(200, np.float32), "red": rgb[:, 0], "green": rgb[:, 1], "blue": rgb[:, 2],
          **{k: cols[k] for k in cols if k[0] in "osr"}}
    _write_ply(tmp_path / "ns.ply", ns)
    h = read_capture(tmp_path / "ns.ply").gaussians
    assert np.abs(h.colors_dc - g.colors_dc).max() < 3e-3


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real captures not found at {REAL}")
def test_real_files_read():
    seal = read_capture(REAL / "luma-seal.splat")
    assert seal.format == "splat" and len(seal.gaussians) == 101_780
    train = read_capture(REAL / "train-1000.ply")
    assert train.format == "inria_ply" and len(train.gaussians) == 1000 and train.gaussians.sh_degree == 3


# -- bad input -----------------------------------------------------------------------------

def _assert_bad(path: Path, out: Path, *words: str, **opts) -> SceneError:
    with pytest.raises(SceneError) as info:
        import_capture(path, out, ImportOptions(**{**FAST, **opts}))
    msg = str(info.value)
    assert path.name in msg or out.name in msg, msg
    for w in words:
        assert w in msg, msg
    assert not out.exists(), "nothing may be written when the import fails"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.import-")], "temp folder left"
    return info.value


def test_truncated_files(tmp_path):
    g = random_gaussians(300, 1)
    out = tmp_path / "out"
    write_gaussians_ply(tmp_path / "a.ply", g)
    raw = (tmp_path / "a.ply").read_bytes()
    (tmp_path / "a.ply").write_bytes(raw[:-1000])
    _assert_bad(tmp_path / "a.ply", out, "truncated", "300 vertices")
    write_compressed_ply(tmp_path / "b.ply", g)
    raw = (tmp_path / "b.ply").read_bytes()
    (tmp_path / "b.ply").write_bytes(raw[:-400])
    _assert_bad(tmp_path / "b.ply", out, "truncated", "'sh'")
    write_splat(tmp_path / "c.splat", g)
    (tmp_path / "c.splat").write_bytes((tmp_path / "c.splat").read_bytes()[:-5])
    _assert_bad(tmp_path / "c.splat", out, "multiple of 32")
    write_spz(tmp_path / "d.spz", g)
    (tmp_path / "d.spz").write_bytes((tmp_path / "d.spz").read_bytes()[:-30])
    _assert_bad(tmp_path / "d.spz", out, "truncated")
    write_spz(tmp_path / "e.spz", g)
    payload = gzip.decompress((tmp_path / "e.spz").read_bytes())
    (tmp_path / "e.spz").write_bytes(gzip.compress(payload[:-100]))
    err = _assert_bad(tmp_path / "e.spz", out, "truncated", "first missing record")
    assert err.field == "sh"


def test_nan_and_bad_scales(tmp_path):
    out = tmp_path / "out"
    g = random_gaussians(100, 0)
    cols = _inria_columns(g)
    cols["y"] = cols["y"].copy()
    cols["y"][17] = np.nan
    _write_ply(tmp_path / "nan.ply", {k: v.astype(np.float32) for k, v in cols.items()})
    _assert_bad(tmp_path / "nan.ply", out, "NaN", "x/y/z", "index 17")
    table = np.zeros(100, SPLAT_DTYPE)
    table["position"] = g.means
    table["scale"] = g.scales
    table["rot"] = 128
    table["rot"][:, 0] = 255
    table["scale"][42, 1] = -0.1
    (tmp_path / "neg.splat").write_bytes(table.tobytes())
    _assert_bad(tmp_path / "neg.splat", out, "negative", "index 42")
    table["scale"][42, 1] = 0.1
    table["position"][7, 2] = np.inf
    (tmp_path / "inf.splat").write_bytes(table.tobytes())
    _assert_bad(tmp_path / "inf.splat", out, "infinite", "index 7")
    cols = _inria_columns(g)
    cols["scale_2"] = cols["scale_2"].copy()
    cols["scale_2"][3] = -np.inf  # log scale of a zero-size Gaussian
    _write_ply(tmp_path / "zero.ply", {k: v.astype(np.float32) for k, v in cols.items()})
    _assert_bad(tmp_path / "zero.ply", out, "scale")


def test_unknown_layouts(tmp_path):
    out = tmp_path / "out"
    _write_ply(tmp_path / "odd.ply", {"a": np.zeros(5, np.float32), "b": np.zeros(5, np.float32)})
    _assert_bad(tmp_path / "odd.ply", out, "missing PLY properties", "f_dc_0")
    (tmp_path / "what.bin").write_bytes(b"\x00\x01garbage" * 10)
    _assert_bad(tmp_path / "what.bin", out, "unknown capture format")
    (tmp_path / "v9.spz").write_bytes(gzip.compress(b"NGSP" + b"\x09\x00\x00\x00" + bytes(8)))
    err = _assert_bad(tmp_path / "v9.spz", out, "version 9")
    assert err.field == "header.version"


def test_no_ground(tmp_path):
    rng = np.random.default_rng(3)
    g = random_gaussians(4000, 0)
    d = rng.normal(size=(4000, 3))
    g = Gaussians((3.0 * d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32) * rng.uniform(0.2, 1, (4000, 1)).astype(np.float32),
                  g.scales * 0.1, g.quats_wxyz, np.full(4000, 0.9, np.float32), g.sh)
    write_gaussians_ply(tmp_path / "blob.ply", g)
    err = _assert_bad(tmp_path / "blob.ply", tmp_path / "out", "no ground plane")
    assert err.field == "ground"


def test_absurd_scale_and_busy_output(capture_file, tmp_path):
    for scale in (1000.0, 1e-4):
        err = _assert_bad(capture_file, tmp_path / "out", "m across", scale=scale)
        assert err.field == "scale"
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep me")
    with pytest.raises(SceneError, match="not an empty folder"):
        import_capture(capture_file, busy, ImportOptions(**FAST))
    assert (busy / "mine.txt").read_text() == "keep me"


# -- the pipeline on a small capture -------------------------------------------------------

def test_frame_found(imported):
    f = imported.frame
    true_up = SIM_ROT @ np.array([0.0, 0.0, 1.0])
    assert math.degrees(math.acos(min(1.0, abs(float(true_up @ f.up_src))))) < 1.0
    assert float(true_up @ f.up_src) > 0, "up must point away from the ground, not into it"
    assert f.scale * SIM_SCALE == pytest.approx(1.0, rel=1e-9)
    ground = f.apply(_to_source([[-4, -4, 0], [4, 4, 0], [-3, 5, 0]]))
    assert np.abs(ground[:, 2]).max() < 0.02, "floor at z = 0"
    assert abs(f.yaw_deg) <= 45.0


def test_scene_folder_is_ordinary(imported):
    from airplay.scene.check import check_scene
    from airplay.sim.sdf import SignedDistanceField

    out = imported.out_dir
    summary = check_scene(out)
    assert summary.mesh_faces <= FAST["max_faces"] and summary.mesh_watertight_components == summary.mesh_components
    assert summary.navigable_area_m2 > 50
    figures = json.loads((out / "import" / "import.json").read_text())
    assert figures["kept_for_collision"] + sum(figures["dropped"].values()) == figures["gaussians"]
    for name in ("report.html", "topdown.png", "heights.png", "overview.png"):
        assert (out / "import" / name).is_file(), name
    assert set(figures["stage_s"]) >= {"read", "clean", "frame", "fuse", "mesh", "region"}
    from airplay.scene.scene import Scene

    scene = Scene.load(out)
    f = imported.frame
    box_centre = f.apply(_to_source([[2.0, 1.0, 1.0]]))[0]
    open_air = f.apply(_to_source([[-3.0, -3.0, 1.2]]))[0]
    sdf = SignedDistanceField.from_mesh(scene.mesh, box_centre - 3.0, box_centre + 3.0, 0.1)
    assert sdf.query(box_centre[None])[0] < 0, "the box is an obstacle"
    sdf2 = SignedDistanceField.from_mesh(scene.mesh, open_air - 2.0, open_air + 2.0, 0.1)  # the ground is inside
    assert sdf2.query(open_air[None])[0] > 0.3, "open air stays free"
    nav = scene.spec.navigable
    assert nav.z_min >= 0.3 and nav.z_max > nav.z_min + 0.9


def test_cli_import(capture_file, tmp_path):
    out = tmp_path / "cli_scene"
    proc = subprocess.run([sys.executable, "-m", "airplay.cli", "scene", "import", str(capture_file), "--out", str(out),
                           "--scale", "2.7", "--voxel", "0.25", "--max-faces", "20000", "--name", "box",
                           "--camera-points", "6"],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "imported" in proc.stdout and (out / "scene.yaml").is_file()
    assert "fuse" in proc.stderr  # stage times and progress go to stderr
    bad = subprocess.run([sys.executable, "-m", "airplay.cli", "scene", "import", str(capture_file), "--out",
                          str(tmp_path / "x"), "--scale", "5000"], check=False, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "m across" in bad.stderr and not (tmp_path / "x").exists()


# -- the capture's own cameras (--cameras) ---------------------------------------------------

CAM_HEIGHT_M = 1.5


def _true_cameras(count: int = 16, seed: int = 0) -> np.ndarray:
    """(K, 4, 4) camera-to-world poses (OpenCV axes), truth frame: a hand-held orbit of the box at
    1.5 m +- 5 cm, looking at it slightly downwards, with a few degrees of roll."""
    from airplay.scene.camera import look_at_viewmat

    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        a = 2 * math.pi * i / count
        eye = np.array([2 + 3.2 * math.cos(a), 1 + 3.2 * math.sin(a), CAM_HEIGHT_M + rng.normal(0, 0.05)])
        c2w = np.linalg.inv(look_at_viewmat(eye, np.array([2.0, 1.0, 1.0]) + rng.normal(0, 0.1, 3)))
        roll = math.radians(rng.uniform(-3, 3))
        c2w[:3, :3] = c2w[:3, :3] @ np.array([[math.cos(roll), -math.sin(roll), 0], [math.sin(roll), math.cos(roll), 0],
                                               [0, 0, 1]])
        out.append(c2w)
    return np.asarray(out)


def _cameras_in_source(c2w: np.ndarray) -> np.ndarray:
    """The same poses in the capture's (source) frame: p_src = SIM_SCALE SIM_ROT p + SIM_T."""
    out = c2w.copy()
    out[:, :3, :3] = SIM_ROT @ c2w[:, :3, :3]
    out[:, :3, 3] = _to_source(c2w[:, :3, 3])
    return out


def write_colmap(folder: Path, c2w_cv: np.ndarray, binary: bool = True) -> Path:
    """A COLMAP sparse model (one PINHOLE camera, an image per pose) written with pycolmap."""
    import pycolmap

    rec = pycolmap.Reconstruction()
    rec.add_camera_with_trivial_rig(pycolmap.Camera.create_from_model_name(1, "PINHOLE", 320.0, 640, 480))
    for i, m in enumerate(c2w_cv):
        w2c = np.linalg.inv(m)
        image = pycolmap.Image(name=f"img{i:03d}.jpg", camera_id=1, image_id=i + 1)
        rec.add_image_with_trivial_frame(image, pycolmap.Rigid3d(pycolmap.Rotation3d(w2c[:3, :3]), w2c[:3, 3]))
    folder.mkdir(parents=True, exist_ok=True)
    (rec.write_binary if binary else rec.write_text)(str(folder))
    return folder


# nerfstudio's ns-process-data: transforms.json world = A @ COLMAP world (y and z swapped, then z negated)
APPLIED = np.eye(4)[[0, 2, 1, 3]]
APPLIED[2] *= -1


def write_transforms_json(path: Path, c2w_cv: np.ndarray, applied: bool = False, **extra) -> Path:
    """A nerfstudio-style transforms.json (camera-to-world, OpenGL camera axes); with ``applied``
    the poses are moved by nerfstudio's applied_transform and it is recorded."""
    gl = c2w_cv @ np.diag([1.0, -1.0, -1.0, 1.0])
    if applied:
        gl = APPLIED @ gl
        extra["applied_transform"] = APPLIED[:3].tolist()
    frames = [{"file_path": f"images/img{i:03d}.jpg", "transform_matrix": m.tolist()} for i, m in enumerate(gl)]
    path.write_text(json.dumps({"fl_x": 320.0, "fl_y": 320.0, "cx": 320, "cy": 240, "w": 640, "h": 480,
                                "frames": frames, **extra}))
    return path


CAM_FAST = {**FAST, "camera_points": 4, "max_capture_views": 8}


def _up_error_deg(frame) -> float:
    true_up = SIM_ROT @ np.array([0.0, 0.0, 1.0])
    return math.degrees(math.acos(min(1.0, float(true_up @ frame.up_src))))


def test_camera_readers(tmp_path):
    """COLMAP (binary and text, via pycolmap) and transforms.json give the same poses; nerfstudio's
    applied_transform is undone and its dataparser transform applied."""
    from airplay.scene.capture_cameras import read_cameras

    src = _cameras_in_source(_true_cameras())
    write_colmap(tmp_path / "bin" / "sparse" / "0", src)
    for cams in (read_cameras(tmp_path / "bin"),  # finds sparse/0
                 read_cameras(write_colmap(tmp_path / "txt", src, binary=False)),
                 read_cameras(write_transforms_json(tmp_path / "t.json", src)),
                 read_cameras(write_transforms_json(tmp_path / "a.json", src, applied=True), undo_applied_transform=True)):
        assert len(cams) == 16
        assert np.allclose(cams.positions, src[:, :3, 3], atol=1e-6), cams.format
        assert np.allclose(cams.rotations, src[:, :3, :3], atol=1e-6), cams.format
        assert np.allclose(cams.ups, -src[:, :3, 1], atol=1e-6)
        assert np.allclose(cams.hfov_deg, math.degrees(2 * math.atan(640 / 640)))
    assert read_cameras(tmp_path / "txt").format == "colmap" and cams.format == "transforms_json"
    (tmp_path / "dp.json").write_text(json.dumps({"transform": APPLIED[:3].tolist(), "scale": 0.5}))
    moved = read_cameras(tmp_path / "t.json", dataparser_transforms=tmp_path / "dp.json")
    assert np.allclose(moved.positions, 0.5 * src[:, :3, 3] @ APPLIED[:3, :3].T, atol=1e-6)
    assert np.allclose(moved.viewmats()[0] @ np.r_[moved.positions[0], 1.0], [0, 0, 0, 1], atol=1e-9)


def test_import_with_colmap_cameras(capture_file, tmp_path):
    """Up from the ground plane the cameras point to, the scale from their height (1.5 m assumed,
    true here), the cameras rendered as depth views and marked in the report."""
    model = write_colmap(tmp_path / "sparse", _cameras_in_source(_true_cameras()))
    result = import_capture(capture_file, tmp_path / "out", ImportOptions(cameras=model, **CAM_FAST))
    f, fig = result.frame, result.figures
    assert _up_error_deg(f) < 1.0 and f.up_from == "ground plane (picked by the cameras)"
    assert fig["cameras_up_vs_ground_deg"] < 3.0
    assert f.scale * SIM_SCALE == pytest.approx(1.0, rel=0.03), fig["scale_source"]
    assert fig["scale_source"].startswith("camera height") and fig["camera_height_m"] == pytest.approx(CAM_HEIGHT_M)
    assert fig["capture_views"] == 8 and fig["views"] == 8 + fig["free_space_views"]
    assert fig["cameras"]["count"] == 16 and fig["cameras"]["format"] == "colmap"
    html_text = (tmp_path / "out" / "import" / "report.html").read_text()
    assert "up_axis_from" in html_text and "cameras_up_vs_ground_deg" in html_text
    from airplay.scene.check import check_scene

    assert check_scene(tmp_path / "out").navigable_area_m2 > 50


def test_cli_import_with_transforms_json(capture_file, tmp_path, capsys):
    """In-process CLI: a nerfstudio transforms.json whose applied_transform is undone, up from the
    cameras' mean up alone (a few degrees of roll and pitch), scale from their height."""
    from airplay.cli import main

    tj = write_transforms_json(tmp_path / "transforms.json", _cameras_in_source(_true_cameras(seed=1)), applied=True)
    rc = main(["scene", "import", str(capture_file), "--out", str(tmp_path / "out"), "--cameras", str(tj),
               "--cameras-frame", "colmap", "--up-from", "cameras", "--capture-views", "6", "--camera-points", "4",
               "--voxel", "0.2", "--max-faces", "40000"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    assert "16 cameras (transforms_json), 6 of them rendered, up from the cameras' mean up" in out.out
    fig = json.loads((tmp_path / "out" / "import" / "import.json").read_text())
    assert fig["up_axis_from"] == "cameras' mean up" and fig["capture_views"] == 6
    true_up = SIM_ROT @ np.array([0.0, 0.0, 1.0])
    assert math.degrees(math.acos(min(1.0, float(true_up @ np.array(fig["up_axis_source"]))))) < 3.0
    assert fig["scale"] * SIM_SCALE == pytest.approx(1.0, rel=0.05)
    assert any("applied_transform undone" in n for n in fig["notes"])


def test_camera_errors(capture_file, tmp_path):
    from airplay.scene.capture_cameras import read_cameras

    src = _cameras_in_source(_true_cameras())
    model = write_colmap(tmp_path / "m", src)
    (model / "images.bin").unlink()
    with pytest.raises(SceneError, match="images.bin: images: missing"):
        read_cameras(model)
    tj = write_transforms_json(tmp_path / "t.json", src)
    meta = json.loads(tj.read_text())
    del meta["frames"][1]["transform_matrix"]
    tj.write_text(json.dumps(meta))
    with pytest.raises(SceneError, match=r"frames\[1\] \(images/img001.jpg\).transform_matrix: missing"):
        read_cameras(tj)
    meta = json.loads(write_transforms_json(tj, src).read_text())
    meta["frames"][0]["transform_matrix"][0][0] *= 1.5  # a scaled, no longer rigid, pose
    tj.write_text(json.dumps(meta))
    with pytest.raises(SceneError, match=r"frames\[0\].*not a rigid pose"):
        read_cameras(tj)
    tj.write_text('{"frames": [')
    with pytest.raises(SceneError, match="not valid JSON"):
        read_cameras(tj)
    with pytest.raises(SceneError, match="applied_transform: missing"):
        read_cameras(write_transforms_json(tj, src), undo_applied_transform=True)
    with pytest.raises(SceneError, match="not found"):
        read_cameras(tmp_path / "nowhere")
    # through the import: the error names the cameras file, and nothing is written
    out = tmp_path / "out"
    far = src.copy()
    far[:, :3, 3] += 100.0
    under = _true_cameras()
    under[:, 2, 3] = -0.5  # under the floor
    for cameras, words, field in ((write_transforms_json(tmp_path / "far.json", far),
                                   ("far.json", "not in the splat's frame", "--cameras-transform"), "frame"),
                                  (write_colmap(tmp_path / "low", _cameras_in_source(under)),
                                   ("low", "do not stand over it", "--scale"), "camera height")):
        with pytest.raises(SceneError) as info:
            import_capture(capture_file, out, ImportOptions(cameras=cameras, **CAM_FAST))
        assert info.value.field == field and all(w in str(info.value) for w in words), str(info.value)
        assert not out.exists() and not list(tmp_path.glob(".out.import-*"))
    _assert_bad(capture_file, out, "needs --cameras", core_from_cameras=2.0)
    _assert_bad(capture_file, out, "needs --cameras", up_from="cameras")
    _assert_bad(capture_file, out, "--up-from must be one of", up_from="sky")


def test_core_from_cameras():
    """With a core from the cameras, the far background is what lies outside it."""
    from airplay.capture_import.clean import camera_core, clean_capture

    rng = np.random.default_rng(0)
    scene = ground_and_box(spacing=0.25)
    d = rng.normal(size=(500, 3))
    shell = random_gaussians(500, 0)
    shell = Gaussians((40.0 * d / np.linalg.norm(d, axis=1, keepdims=True)).astype(np.float32), shell.scales * 0.01,
                      shell.quats_wxyz, np.full(500, 0.9, np.float32), shell.sh)
    g = Gaussians.concatenate([scene, shell])
    core = camera_core(_true_cameras()[:, :3, 3], 2.5)
    assert core[1] == pytest.approx(2.5 * 3.2, rel=0.05)
    counts = clean_capture(g, core=core).counts
    outside = np.linalg.norm(g.means - core[0], axis=1) > core[1]
    assert counts["far_background"] == int(outside.sum()) >= 500


# -- against truth: a degraded synthetic capture ---------------------------------------------

@pytest.mark.slow
def test_degraded_synthetic_against_truth(tmp_path):
    """A degraded urban scene, imported from the splat alone (with one known distance), against its
    true mesh. Thresholds are what this version reaches at 0.2 m voxels with 10 camera points
    (bench/scene_import.py measures the issue's goals at full settings): the frame is exact, the
    collision geometry errs on the blocked side."""
    from airplay.capture_import.quality import (
        degrade,
        frame_errors,
        import_to_truth,
        occupancy_and_segments,
        truth_points_in_source,
    )
    from airplay.scene.mesh_io import load_collision_mesh
    from airplay.scene.spec import NavigableRegion
    from airplay.scene.synthetic import generate

    layout, g, true_mesh = generate("urban", 0, 20.0)
    gd, deg = degrade(g, seed=1)
    write_gaussians_ply(tmp_path / "cap.ply", gd)
    p = truth_points_in_source(deg, np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0]]))
    result = import_capture(tmp_path / "cap.ply", tmp_path / "out",
                            ImportOptions(known_distance=(*p[0], *p[1], 10.0), voxel_m=0.2, camera_points=10,
                                          view_px=96, max_faces=80_000, progress=False))
    up_err, scale_err = frame_errors(deg, result.frame)
    assert up_err < 2.0 and scale_err < 0.02
    counts = result.figures["dropped"]
    assert counts["far_background"] >= 0.9 * deg.shell, counts
    assert counts["isolated"] >= 0.5 * deg.floaters, counts
    mesh = load_collision_mesh(tmp_path / "out" / "collision.ply")
    mesh.vertices = import_to_truth(deg, result.frame, mesh.vertices)
    region = NavigableRegion(layout.polygon, layout.z_min, layout.z_max)
    q = occupancy_and_segments(mesh, true_mesh, region, voxel_m=0.2, segments=2000)
    assert q["derived_free_truly_colliding"] <= 0.01, q
    assert q["collision_agreement"] >= 0.7, q


# -- the real captures -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not REAL.is_dir(), reason=f"real captures not found at {REAL}")
def test_luma_seal_imports_and_flies(tmp_path):
    out = tmp_path / "seal"
    result = import_capture(REAL / "luma-seal.splat", out, ImportOptions(progress=False, camera_points=9, view_px=96))
    f = result.frame
    assert float(f.up_src @ np.array([0.0, -1.0, 0.0])) > math.cos(math.radians(10)), "the file's y points down"
    assert result.figures["mesh_faces"] <= 200_000
    proc = subprocess.run([sys.executable, "-m", "airplay.cli", "eval", "--scenes", str(out), "--policy", "expert",
                           "--episodes", "2", "--out", str(tmp_path / "eval"), "--no-progress"],
                          check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    episodes = [json.loads(line) for line in (tmp_path / "eval" / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 2


@pytest.mark.skipif(not REAL.is_dir(), reason=f"real captures not found at {REAL}")
def test_train_fragment_imports(tmp_path):
    result = import_capture(REAL / "train-1000.ply", tmp_path / "train", ImportOptions(**FAST))
    assert (tmp_path / "train" / "scene.yaml").is_file() and result.figures["gaussians"] == 1000
