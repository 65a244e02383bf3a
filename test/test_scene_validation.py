"""Every malformed scene input gets an error naming the file and the problem, and a non-zero exit."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.malformed_scenes import CASES
from helpers.scene_factory import scene_yaml_dict, write_tiny_scene

from airplay.cli import main as cli_main
from airplay.scene import Scene, SceneError


@pytest.fixture(scope="module")
def valid_scene(tmp_path_factory) -> Path:
    return write_tiny_scene(tmp_path_factory.mktemp("valid") / "scene")


def test_valid_scene_loads(valid_scene: Path):
    scene = Scene.load(valid_scene)
    assert len(scene.gaussians) == 400
    assert scene.mesh.is_watertight
    assert cli_main(["scene", "check", str(valid_scene)]) == 0


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed_scene_is_refused(case, valid_scene: Path, tmp_path: Path, capsys):
    name, breaker, bad_file, words = case
    folder = tmp_path / "scene"
    shutil.copytree(valid_scene, folder)
    breaker(folder)
    with pytest.raises(SceneError) as info:
        Scene.load(folder)
    message = str(info.value)
    assert bad_file in message, f"{name}: message does not name {bad_file}: {message}"
    assert words in message, f"{name}: message lacks {words!r}: {message}"
    # The command line reports the same error and exits non-zero.
    assert cli_main(["scene", "check", str(folder)]) == 1
    assert words in capsys.readouterr().err


def test_at_least_fifteen_malformed_cases():
    assert len(CASES) >= 15


def test_check_console_script_exit_codes(valid_scene: Path, tmp_path: Path):
    exe = Path(sys.executable).parent / "airplay"
    if not exe.exists():
        pytest.skip("the airplay console script is not installed in this environment (pip install -e .)")
    ok = subprocess.run([str(exe), "scene", "check", str(valid_scene)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "gaussians" in ok.stdout and "400" in ok.stdout
    bad = tmp_path / "bad"
    shutil.copytree(valid_scene, bad)
    (bad / "collision.ply").unlink()
    res = subprocess.run([str(exe), "scene", "check", str(bad)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "collision.ply" in res.stderr and "file not found" in res.stderr


def test_yaml_field_errors_name_the_field(valid_scene: Path, tmp_path: Path):
    folder = tmp_path / "s"
    shutil.copytree(valid_scene, folder)
    data = scene_yaml_dict()
    data["camera"] = {"width": -3}
    (folder / "scene.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(SceneError, match=r"camera\.width: must be a positive integer"):
        Scene.load(folder)
