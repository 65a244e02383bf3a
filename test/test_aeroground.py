"""The AeroGround benchmark end to end on two tiny scenes (one seen, one unseen): capture,
build, check, score, the human page, and the tiny Qwen2.5-VL through both backends.

One module-scoped capture and build (64x64 aerial, 64x48 ground images) feeds every test.
"""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from airplay.cli import main

GROUPS = 3


def _tree_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    from airplay.scene.synthetic import make_scene

    root = tmp_path_factory.mktemp("aeroground")
    make_scene("urban", 1, root / "scenes" / "urban_1", gaussians_per_m2=2)
    make_scene("vegetation", 1, root / "scenes" / "vegetation_1", gaussians_per_m2=2, split="unseen")
    cap, items = root / "capture", root / "items"
    assert main(["aeroground", "capture", "--scenes", str(root / "scenes"), "--out", str(cap), "--groups",
                 str(GROUPS), "--aerial-size", "64x64", "--ground-size", "64x48", "--no-progress"]) == 0
    assert main(["aeroground", "build", "--capture", str(cap), "--out", str(items), "--no-progress"]) == 0
    return root


def _items(bench):
    from airplay.aeroground.build import load_items

    return load_items(bench / "items")


def test_capture_is_deterministic_and_resumes(bench, tmp_path):
    cap = bench / "capture"
    before = _tree_hashes(cap)
    assert any(k.endswith("ground.png") for k in before) and any("nadir" in k for k in before)
    shutil.rmtree(cap / "urban_1" / "0001")
    (cap / "vegetation_1" / "0002" / "group.json").unlink()  # an interrupted group: images but no record
    assert main(["aeroground", "capture", "--scenes", str(bench / "scenes"), "--out", str(cap), "--groups",
                 str(GROUPS), "--aerial-size", "64x64", "--ground-size", "64x48", "--no-progress"]) == 0
    assert _tree_hashes(cap) == before
    assert main(["aeroground", "capture", "--scenes", str(bench / "scenes"), "--out", str(cap), "--groups",
                 "1", "--aerial-size", "32x32", "--no-progress"]) == 2  # other settings: refused


def test_ground_truth_of_a_group(bench):
    from airplay.aeroground.cameras import GROUND_CAMERA_HEIGHT_M

    cap = bench / "capture"
    instances = json.loads((cap / "urban_1" / "instances.json").read_text())
    assert instances and {"category", "centre_m", "footprint_m"} <= set(instances[0])
    rec = json.loads((cap / "urban_1" / "0000" / "group.json").read_text())
    pose, views = rec["ground_pose"], rec["views"]
    assert abs(pose["z"]) < 0.5  # on the street, not on a roof
    for inst in instances:  # not inside any object
        x0, y0, x1, y1 = inst["footprint_m"]
        assert not (x0 <= pose["x"] <= x1 and y0 <= pose["y"] <= y1)
    g = views["ground"]
    assert g["position_m"][2] == pytest.approx(pose["z"] + GROUND_CAMERA_HEIGHT_M, abs=1e-3)
    assert (g["camera"]["width"], g["camera"]["height"]) == (64, 48)
    aerial = [v for v in views.values() if v["kind"] == "aerial"]
    assert {v["config"] for v in aerial} == {"nadir", "oblique"} and len({v["position_m"][2] for v in aerial}) == 2
    seen = [b for v in views.values() for b in v["instances"].values() if b["pixels"] > 0]
    assert seen and all(b["visible_box"][2] > b["visible_box"][0] for b in seen)


def test_items_cover_the_tasks_and_the_split(bench):
    from airplay.aeroground.tasks import TASKS

    summary = json.loads((bench / "items" / "build.json").read_text())
    items = _items(bench)
    assert summary["items"] == len(items) > 20
    assert sum(1 for n in summary["per_task"].values() if n > 0) >= 9
    assert set(summary["per_split"]) == {"seen", "unseen"}
    assert summary["rejected"] and all(": " in k for k in summary["rejected"])
    for it in items:
        assert it["task"] in TASKS and it["level"] == TASKS[it["task"]]["level"]
        assert all((bench / "items" / im["path"]).is_file() for im in it["images"])
        assert (it["split"] == "unseen") == (it["scene"] == "vegetation_1")


def test_build_is_deterministic_per_seed(bench, tmp_path):
    assert main(["aeroground", "build", "--capture", str(bench / "capture"), "--out", str(tmp_path / "same"),
                 "--no-progress"]) == 0
    assert _tree_hashes(tmp_path / "same") == _tree_hashes(bench / "items")
    assert main(["aeroground", "build", "--capture", str(bench / "capture"), "--out", str(tmp_path / "other"),
                 "--seed", "1", "--no-progress", "--tasks", "localization", "relative_orientation"]) == 0
    other = (tmp_path / "other" / "items.jsonl").read_text()
    assert other and other != (bench / "items" / "items.jsonl").read_text()


def test_checker_recomputes_every_answer(bench, capsys):
    from airplay.aeroground.checker import check_item

    assert main(["aeroground", "check", "--items", str(bench / "items"), "--capture", str(bench / "capture")]) == 0
    assert " 0 problems" in capsys.readouterr().out
    it = next(i for i in _items(bench) if i["answer_type"] == "choice")
    wrong = dict(it, answer=next(k for k in it["options"] if k != it["answer"]))
    assert check_item(wrong)


def test_oracle_scores_100_and_random_lands_on_chance(bench):
    from airplay.aeroground.checker import oracle_response
    from airplay.aeroground.scoring import random_response, summarize

    items = _items(bench)
    oracle = summarize(items, {it["id"]: oracle_response(it) for it in items}, bootstrap=200)
    assert oracle["overall"]["accuracy"]["mean"] == 1.0
    assert all(e["accuracy"]["mean"] == 1.0 and e["caa"] == 1.0 for e in oracle["per_task"].values())
    rng = np.random.default_rng(7)
    many = [dict(it, id=f"{it['id']}#{k}") for k in range(20) for it in items]  # 20 random replies per item
    rand = summarize(many, {it["id"]: random_response(it, rng) for it in many}, bootstrap=200)
    lo, hi = rand["overall"]["accuracy"]["ci95"]
    assert lo <= rand["overall"]["chance"] <= hi
    sim_lo, sim_hi = rand["random_simulated_ci95"]  # the scorer's own simulated random answerer
    assert sim_lo <= rand["overall"]["chance"] <= sim_hi
    bad = ["", "A B", "Z", "\u0410", "maybe"] * 99
    malformed = summarize(items, {it["id"]: reply for it, reply in zip(items, bad)}, bootstrap=0)
    assert malformed["overall"]["accuracy"]["mean"] == 0.0


def test_reference_answerers_through_the_cli(bench, tmp_path):
    assert main(["aeroground", "eval", "--backend", "oracle", "--items", str(bench / "items"), "--out",
                 str(tmp_path / "oracle"), "--bootstrap", "50", "--no-progress"]) == 0
    summary = json.loads((tmp_path / "oracle" / "summary.json").read_text())
    assert summary["overall"]["accuracy"]["mean"] == 1.0 and summary["answered"] == summary["items"]
    assert set(summary["breakdowns"]) >= {"view_config", "aerial_ground_distance_m", "target_pixel_area"}
    assert main(["aeroground", "eval", "--backend", "random", "--items", str(bench / "items"), "--out",
                 str(tmp_path / "random"), "--bootstrap", "50", "--no-progress"]) == 0
    page = (tmp_path / "random" / "results.html").read_text()
    assert "24.6 %" in page and "average (all questions)" in page


def test_parquet_and_human_page(bench):
    pq = pytest.importorskip("pyarrow.parquet")
    items = _items(bench)
    table = pq.read_table(bench / "items" / "items.parquet")
    assert table.num_rows == len(items) and table.column("id").to_pylist() == [it["id"] for it in items]
    assert main(["aeroground", "human", "--items", str(bench / "items"), "--sample", "5"]) == 0
    page = (bench / "items" / "human.html").read_text()
    assert "human_answers.jsonl" in page and page.count('"question"') == 5
    assert '"answer"' not in page and '"evidence"' not in page


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["transformers", "openai"])
def test_tiny_model_end_to_end(backend, bench, tiny_vl_model, tmp_path):
    from airplay.vln.backends import TransformersBackend
    from airplay.vln.server import ChatServer

    out = tmp_path / "results"
    args = ["aeroground", "eval", "--backend", backend, "--items", str(bench / "items"), "--out", str(out),
            "--limit", "1", "--tasks", "single_target_matching", "multi_target_matching", "--bootstrap", "50",
            "--max-new-tokens", "8", "--no-progress"]
    if backend == "transformers":
        assert main([*args, "--model", str(tiny_vl_model)]) == 0
    else:
        with ChatServer(TransformersBackend(tiny_vl_model, max_new_tokens=8), "127.0.0.1", 0) as server:
            assert main([*args, "--endpoint", server.url]) == 0
            assert server.requests >= 2
    rows = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    assert {r["task"] for r in rows} == {"single_target_matching", "multi_target_matching"}
    assert all(isinstance(r["reply"], str) and r["correct"] in (0, 1) for r in rows)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["answered"] == len(rows) == summary["items"]
    assert "AeroGround results" in (out / "results.html").read_text()


def test_bad_input_names_the_file_and_field(tmp_path):
    from airplay.aeroground.build import load_items
    from airplay.aeroground.instances import scene_instances

    with pytest.raises(ValueError, match=r"scene.yaml: landmarks\[1\]: 'size'"):
        scene_instances([{"kind": "car", "name": "red car", "position": [0, 0, 0], "size": [1, 1, 1]},
                         {"kind": "car", "name": "blue car", "position": [0, 0, 0]}], "scene.yaml")
    (tmp_path / "items.jsonl").write_text('{"id": 1}\n{not json\n')
    with pytest.raises(ValueError, match=r"items.jsonl:2: not JSON"):
        load_items(tmp_path)
    with pytest.raises(ValueError, match="run `airplay aeroground build"):
        load_items(tmp_path / "missing")


def test_a_ground_pose_outside_the_scene_is_refused_naming_the_coordinate(bench):
    from airplay.aeroground.ground import check_in_scene
    from airplay.scene.scene import Scene

    scene = Scene.load(bench / "scenes" / "urban_1")
    group = json.loads(next((bench / "capture" / "urban_1").glob("*/group.json")).read_text())
    x, y, z = (group["ground_pose"][k] for k in ("x", "y", "z"))
    check_in_scene(scene, x, y, z)  # a captured pose is in the scene
    lo, hi = scene.mesh.bounds[:, 2]
    for (px, py, pz), words in [((x + 1e3, y, z), "(x, y) = "), ((x, y, lo - 1.0), "z = "),
                                ((x, y, hi + 1.0), "z = "), ((x, float("nan"), z), "not finite")]:
        with pytest.raises(ValueError) as err:
            check_in_scene(scene, px, py, pz)
        assert words in str(err.value) and ("urban_1" in str(err.value) or words == "not finite")
