"""The one YAML configuration loader and its one error type, naming the file and the field."""

from __future__ import annotations

import pytest

from airplay.scene.errors import SceneError
from airplay.scene.spec import parse_scene_yaml
from airplay.sim.dynamics import load_vehicle_params
from airplay.tasks.protocol import load_protocol
from airplay.vln.actions import load_vln_config
from airplay.yaml_config import ConfigError, load_yaml


def test_load_yaml_gives_the_mapping(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("a: 1\nb: {c: [1, 2]}\n")
    assert load_yaml(path) == {"a": 1, "b": {"c": [1, 2]}}
    path.write_text("")
    assert load_yaml(path, empty_ok=True) == {}


@pytest.mark.parametrize("content, words", [
    (None, "settings file not found"),
    (b"\xff\xfe\x00bad", "not a text file"),
    ("a: [1, 2\nb: 3\n", "invalid YAML at line 2, column 2"),
    ("", "file is empty"),
    ("- a\n- b\n", "must be a YAML mapping, got a list"),
])
def test_load_yaml_errors_name_the_file(tmp_path, content, words):
    path = tmp_path / "settings.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as info:
        load_yaml(path, what="settings file")
    assert str(info.value) == f"{path}: {info.value.problem}"
    assert info.value.path == path and info.value.field is None and words in info.value.problem


def test_a_field_error_reads_file_field_problem(tmp_path):
    err = ConfigError(tmp_path / "x.yaml", "must be positive, got -1", "task.grid_resolution_m")
    assert str(err) == f"{tmp_path / 'x.yaml'}: task.grid_resolution_m: must be positive, got -1"
    assert isinstance(err, ValueError)


@pytest.mark.parametrize("load", [load_protocol, load_vehicle_params, load_vln_config, parse_scene_yaml],
                         ids=["protocol", "vehicle", "vln", "scene"])
def test_every_config_loader_raises_the_one_error_type(tmp_path, load):
    path = tmp_path / "bad.yaml"
    path.write_text("a: [1, 2\nb: 3\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML at line 2, column 2"):
        load(path)
    with pytest.raises(ConfigError, match=r"nope\.yaml: .*not found"):
        load(tmp_path / "nope.yaml")


@pytest.mark.parametrize("load, text, field", [
    (load_protocol, "task: {grid_resolution_m: -1}\ntime_limit: {}\n", "task.grid_resolution_m"),
    (load_vehicle_params, "radius_m: fast\n", "radius_m"),
    (load_vln_config, "reference: {max_steps: 0}\n", "reference.max_steps"),
    (parse_scene_yaml, "format_version: 1\nname: x\n", "splat"),
], ids=["protocol", "vehicle", "vln", "scene"])
def test_field_errors_name_the_field(tmp_path, load, text, field):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.path == path and info.value.field == field
    assert str(info.value).startswith(f"{path}: {field}: ")


def test_scene_errors_are_config_errors(tmp_path):
    assert issubclass(SceneError, ConfigError)
    with pytest.raises(SceneError, match="file not found"):
        parse_scene_yaml(tmp_path)  # a folder without scene.yaml
