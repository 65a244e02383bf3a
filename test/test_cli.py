"""The airplay command end to end: make, check, render (RGB, depth, alignment panel), demo."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from airplay.cli import main


@pytest.fixture(scope="module")
def urban(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli") / "urban"
    assert main(["scene", "make", "--category", "urban", "--seed", "1", "--density", "12", str(folder)]) == 0
    return folder


def test_scene_check_json(urban, capsys):
    capsys.readouterr()
    assert main(["scene", "check", "--json", str(urban)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["category"] == "urban" and summary["gaussians"] > 1000 and summary["sh_degree"] == 1
    assert summary["mesh_watertight_components"] == summary["mesh_components"]
    assert summary["navigable_area_m2"] > 100


@pytest.mark.slow
def test_render_writes_a_real_picture(urban, tmp_path):
    from airplay.scene import Scene
    from airplay.scene.viewpoints import free_viewpoints

    x, y, z, yaw = free_viewpoints(Scene.load(urban), 1, seed=0)[0]
    out, depth, panel = tmp_path / "view.png", tmp_path / "depth.png", tmp_path / "panel.png"
    args = ["render", str(urban), "--pose", str(x), str(y), str(z), str(np.degrees(yaw)), "--out", str(out),
            "--backend", "cpu", "--depth-out", str(depth), "--depth-source", "mesh", "--compare-mesh", str(panel)]
    assert main(args) == 0
    rgb = np.asarray(Image.open(out))
    assert rgb.shape == (224, 224, 3)
    assert rgb.reshape(-1, 3).std(axis=0).mean() > 10, "the picture is (nearly) flat"
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 500, "too few distinct colours for a textured scene"
    assert np.asarray(Image.open(depth)).shape == (224, 224, 3)
    assert np.asarray(Image.open(panel)).shape == (224, 672, 3)


def test_render_bare_splat_file(tmp_path):
    from helpers.scene_factory import box_gaussians
    from airplay.scene.ply_io import write_gaussians_ply

    write_gaussians_ply(tmp_path / "g.ply", box_gaussians(np.random.default_rng(0)))
    assert main(["render", str(tmp_path / "g.ply"), "--pose", "-8", "0", "2", "0", "--out",
                 str(tmp_path / "v.png"), "--width", "64", "--height", "48", "--backend", "cpu"]) == 0
    img = np.asarray(Image.open(tmp_path / "v.png"))
    assert img.shape == (48, 64, 3) and img[24, 32].sum() > 0  # the box is straight ahead


def test_render_refuses_a_broken_scene(urban, tmp_path, capsys):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(urban, bad)
    (bad / "splat.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\n")
    assert main(["render", str(bad), "--pose", "0", "0", "2", "0", "--out", str(tmp_path / "x.png")]) == 2
    assert "splat.ply" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_demo_makes_scene_and_pictures(tmp_path, capsys):
    scenes, out = tmp_path / "scenes", tmp_path / "out"
    assert main(["demo", "--scenes", str(scenes), "--out", str(out), "--categories", "indoor",
                 "--views", "2", "--backend", "cpu"]) == 0
    assert (scenes / "indoor_0" / "scene.yaml").is_file()
    assert len(list(out.glob("indoor_*_rgb.png"))) == 2
    text = capsys.readouterr().out
    assert "render FPS" in text and "indoor" in text
