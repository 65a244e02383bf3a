"""Synthetic scene generator: files, consistency of splat and mesh, determinism, safety."""

from __future__ import annotations

import numpy as np
import pytest

trimesh = pytest.importorskip("trimesh")

from airplay.scene.ply_io import read_gaussians_ply  # noqa: E402
from airplay.scene.spec import parse_scene_yaml  # noqa: E402
from airplay.scene.synthetic import CATEGORIES, make_scene  # noqa: E402

DENSITY = 4.0  # Gaussians per m^2: tiny, for speed
FILES = ("scene.yaml", "splat.ply", "collision.ply")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    root = tmp_path_factory.mktemp("synthetic")
    out = {}
    for category in CATEGORIES:
        spec = make_scene(category, 3, root / category, gaussians_per_m2=DENSITY)
        splat = read_gaussians_ply(root / category / "splat.ply")
        mesh = trimesh.load(root / category / "collision.ply", process=False)
        out[category] = (spec, splat, mesh)
    return out


def _load_mesh(path):
    return trimesh.load(path, process=False)


@pytest.mark.parametrize("category", CATEGORIES)
def test_files_parse_and_agree(scenes, category):
    spec, splat, mesh = scenes[category]
    assert {p.name for p in spec.root.iterdir()} == set(FILES)
    again = parse_scene_yaml(spec.root / "scene.yaml")
    assert again.category == category and again.split == "seen" and again.name == f"{category}_3"
    assert again.splat_alignment.is_identity() and again.collision_alignment.is_identity()
    assert again.splat_alignment.convention == "z_up"
    cam = again.camera
    assert (cam.intrinsics.width, cam.intrinsics.height) == (224, 224)
    assert cam.intrinsics.fx == pytest.approx(112.0)
    assert cam.mount.offset_m == (0.1, 0.0, 0.0) and cam.mount.pitch_deg == 0.0
    assert splat.sh_degree == 1 and len(splat) > 1000
    assert np.isfinite(splat.means).all() and (splat.scales > 0).all()
    assert (splat.opacities > 0.5).all() and (splat.opacities < 1.0).all()
    assert np.abs(splat.sh[:, 1:]).max() > 0.0  # view-dependent terms are used
    assert len(mesh.faces) > 100 and mesh.is_watertight  # closed components, vertices not merged
    assert len(mesh.faces) < 50_000
    s_lo, s_hi = splat.bounds()
    m_lo, m_hi = mesh.bounds
    assert (s_lo < m_hi).all() and (m_lo < s_hi).all()
    assert s_lo[2] > -0.05 and mesh.bounds[0][2] < 0.0 <= s_lo[2] + 0.05  # ground at z = 0


@pytest.mark.parametrize("category", CATEGORIES)
def test_splat_lies_on_the_mesh(scenes, category):
    _, splat, mesh = scenes[category]
    rng = np.random.default_rng(0)
    idx = rng.choice(len(splat), size=min(500, len(splat)), replace=False)
    _, dist, _ = mesh.nearest.on_surface(splat.means[idx].astype(np.float64))
    assert dist.max() < 0.05, f"{category}: a Gaussian is {dist.max():.3f} m off the collision mesh"


@pytest.mark.parametrize("category", CATEGORIES)
def test_navigable_region_has_free_space(scenes, category):
    spec, _, mesh = scenes[category]
    nav = spec.navigable
    assert nav.area_m2 > 100.0 and nav.z_max > nav.z_min
    rng = np.random.default_rng(1)
    lo, hi = nav.polygon.min(axis=0), nav.polygon.max(axis=0)
    xy = rng.uniform(lo, hi, size=(4000, 2))
    xy = xy[nav.contains_xy(xy)][:400]
    pts = np.column_stack([xy, np.full(len(xy), (nav.z_min + nav.z_max) / 2)])
    _, dist, _ = mesh.nearest.on_surface(pts)
    free = (dist > 0.3) & ~mesh.contains(pts)
    assert free.mean() > 0.3, f"{category}: only {free.mean():.0%} free at mid-band"


@pytest.mark.parametrize("category", CATEGORIES)
def test_colours_are_textured(scenes, category):
    _, splat, _ = scenes[category]
    rgb = splat.colors_dc
    assert rgb.std(axis=0).mean() > 0.05
    # not a handful of flat colours either
    assert len(np.unique(np.round(rgb, 2), axis=0)) > 200


@pytest.mark.parametrize("category", CATEGORIES)
def test_same_seed_same_bytes(tmp_path, category):
    a = make_scene(category, 11, tmp_path / "a", gaussians_per_m2=2.0)
    b = make_scene(category, 11, tmp_path / "b", gaussians_per_m2=2.0, name=a.name)
    c = make_scene(category, 12, tmp_path / "c", gaussians_per_m2=2.0, name=a.name)
    for name in FILES:
        assert (a.root / name).read_bytes() == (b.root / name).read_bytes(), name
        assert (a.root / name).read_bytes() != (c.root / name).read_bytes(), name
    # no temporary folders left beside the scenes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]


def test_density_scales_the_splat(tmp_path):
    low = make_scene("indoor", 5, tmp_path / "low", gaussians_per_m2=2.0)
    high = make_scene("indoor", 5, tmp_path / "high", gaussians_per_m2=8.0)
    n_low = len(read_gaussians_ply(low.splat_file))
    n_high = len(read_gaussians_ply(high.splat_file))
    assert n_high > 2.5 * n_low
    # the geometry does not depend on the density
    assert low.collision_file.read_bytes() == high.collision_file.read_bytes()


def test_layout_varies_with_seed(tmp_path):
    sizes = set()
    for seed in range(3):
        spec = make_scene("urban", seed, tmp_path / str(seed), gaussians_per_m2=1.0)
        sizes.add(round(spec.navigable.area_m2, 3))
    assert len(sizes) == 3


def test_remake_over_previous_scene_is_allowed(tmp_path):
    out = tmp_path / "scene"
    make_scene("vegetation", 1, out, gaussians_per_m2=1.0)
    first = (out / "splat.ply").read_bytes()
    spec = make_scene("vegetation", 2, out, gaussians_per_m2=1.0, split="unseen")
    assert spec.split == "unseen" and (out / "splat.ply").read_bytes() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scene"]


def test_refuses_foreign_directory(tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        make_scene("indoor", 0, out, gaussians_per_m2=1.0)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    (out / "notes.txt").unlink()
    (out / "sub").mkdir()
    with pytest.raises(ValueError, match="not empty"):
        make_scene("indoor", 0, out, gaussians_per_m2=1.0)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        make_scene("indoor", 0, a_file, gaussians_per_m2=1.0)


def test_empty_directory_is_used(tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    spec = make_scene("urban", 0, out, gaussians_per_m2=1.0)
    assert spec.root == out.resolve() and (out / "scene.yaml").is_file()


@pytest.mark.parametrize("kwargs, match", [
    ({"category": "desert"}, "unknown scene category"),
    ({"gaussians_per_m2": 0.0}, "positive"),
    ({"split": "train"}, "split"),
    ({"name": "a/b"}, "scene name"),
    ({"seed": -1}, "seed"),
    ({"seed": 1.5}, "seed"),
])
def test_bad_arguments(tmp_path, kwargs, match):
    args = {"category": "indoor", "seed": 0, "out_dir": tmp_path / "x", "gaussians_per_m2": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        make_scene(**args)
    assert not (tmp_path / "x").exists()
