"""`airplay eval --runtime inprocess`: the closed loop end to end and its results files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from airplay.cli import main
from airplay.eval.results import read_episodes, read_summary
from airplay.scene.synthetic import make_scene

METRICS = ("ne", "sr", "osr", "spl", "astar_spl", "cr", "ob", "tts")


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalscenes")
    make_scene("indoor", 1, root / "indoor_1", gaussians_per_m2=4, name="indoor_1")
    make_scene("vegetation", 1, root / "vegetation_1", gaussians_per_m2=4, name="vegetation_1")
    return root


@pytest.mark.slow
def test_eval_writes_results_table_and_plots(scenes, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "results"
    assert main(["eval", "--runtime", "inprocess", "--policy", "expert", "--scenes", str(scenes),
                 "--episodes", "3", "--seed", "4", "--out", str(out), "--no-images",
                 "--bootstrap", "200", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "all (equal weight)" in printed and "indoor_1" in printed and "vegetation_1" in printed

    episodes = read_episodes(out)
    assert len(episodes) == 6
    lines = (out / "episodes.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    for key in ("scene", "task_id", "setting", "status", "steps", "path_length_m", "shortest_length_m",
                "final_distance_m", "time_to_success_s", "seed"):
        assert key in first
    assert {e.status for e in episodes} <= {"success", "collision", "out_of_bounds", "timeout"}

    summary = read_summary(out)
    for metric in METRICS:
        assert metric in summary["overall"]
        assert set(summary["per_scene"]) == {"indoor_1", "vegetation_1"}
    sr = summary["overall"]["sr"]
    per_scene = [summary["per_scene"][s]["sr"]["mean"] for s in ("indoor_1", "vegetation_1")]
    assert sr["mean"] == pytest.approx(np.mean(per_scene))
    assert sr["ci95"][0] <= sr["mean"] <= sr["ci95"][1]
    assert summary["meta"]["runtime"] == "inprocess" and summary["meta"]["policy"] == "expert"

    for scene in ("indoor_1", "vegetation_1"):
        png = out / f"{scene}_trajectories.png"
        assert png.is_file()
        assert Image.open(png).size[0] >= 400


def test_eval_is_reproducible(scenes, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    runs = []
    for k in range(2):
        out = tmp_path / f"r{k}"
        assert main(["eval", "--scenes", str(scenes / "indoor_1"), "--episodes", "2", "--seed", "9",
                     "--out", str(out), "--no-images", "--no-progress", "--bootstrap", "50"]) == 0
        runs.append((out / "episodes.jsonl").read_text())
    assert runs[0] == runs[1]


def test_eval_rejects_a_folder_without_scenes(tmp_path, capsys):
    assert main(["eval", "--scenes", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "not a scene folder" in capsys.readouterr().err
