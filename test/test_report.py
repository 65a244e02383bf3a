"""`airplay report`: one self-contained HTML page from real `airplay eval` folders, opened in
headless Chromium; damaged inputs are named in the page and on stderr, and a path that is not a
results folder is an error that writes nothing."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from airplay.cli import main
from airplay.eval.offline_run import UNITS
from airplay.eval.results import read_summary
from airplay.report.analysis_sections import OFFLINE_UNITS
from airplay.scene.synthetic import make_scene
from helpers.headless_chromium import find_chromium, inspect_page

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two policies evaluated in-process on one tiny scene: ``expert`` (1 episode) and ``random`` (2)."""
    root = tmp_path_factory.mktemp("report")
    make_scene("indoor", 1, root / "scenes" / "indoor_1", gaussians_per_m2=4, name="indoor_1")
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRPLAY_CACHE_DIR", str(root / "cache"))
    try:
        for policy, episodes in (("expert", 1), ("random", 2)):
            assert main(["eval", "--scenes", str(root / "scenes"), "--policy", policy, "--episodes", str(episodes),
                         "--seed", "3", "--no-images", "--no-progress", "--bootstrap", "100",
                         "--out", str(root / policy)]) == 0
    finally:
        mp.undo()
    return root


def _report(tmp_path, *paths, capsys=None) -> tuple[int, str, str]:
    out = tmp_path / "report.html"
    rc = main(["report", *map(str, paths), "-o", str(out)])
    err = capsys.readouterr().err if capsys else ""
    return rc, out.read_text(encoding="utf-8") if out.exists() else "", err


def test_eval_records_what_the_report_shows(runs):
    meta = read_summary(runs / "expert")["meta"]
    assert meta["command"].startswith("airplay eval --scenes ") and "--policy expert" in meta["command"]
    assert meta["scene_info"] == {"indoor_1": {"category": "indoor", "split": "seen"}}
    assert set(meta["machine"]) == {"host", "os", "python", "cpu", "cpus"} and meta["machine"]["cpus"] >= 1
    assert meta["commit"] is None or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", meta["commit"])


def test_report_shows_both_policies_side_by_side(runs, tmp_path, capsys):
    rc, page, err = _report(tmp_path, runs / "expert", runs / "random", capsys=capsys)
    assert rc == 0 and err == ""
    assert main(["report", str(runs / "expert"), "--no-topdown", "-o", str(tmp_path / "lean.html")]) == 0
    assert "topdown-" not in (tmp_path / "lean.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page
    summary = read_summary(runs / "random")
    # The main table: policies as columns, the equal-weight row and the scene row, with intervals.
    table = page[page.index('<table class="metrics wide">'):]
    table = table[:table.index("</table>")]
    assert table.count(">expert<") == 4 and table.count(">random<") == 4  # SR, SPL, CR, NE
    ne = summary["overall"]["ne"]
    assert f"{ne['mean']:.2f} <span class=\"ci\">[{ne['ci95'][0]:.2f}, {ne['ci95'][1]:.2f}]</span>" in table
    assert 'href="#scene-indoor_1"' in table and "all (equal weight)" in table
    # Every plot embedded once per run (and the scene from above: its folder is here), every episode
    # row links to its run's plot.
    assert page.count("data:image/png;base64,") == 3 and 'id="topdown-indoor_1"' in page
    assert 'id="plot-0-indoor_1"' in page and 'id="plot-1-indoor_1"' in page
    assert page.count('<a href="#plot-0-indoor_1">') == 1 and page.count('<a href="#plot-1-indoor_1">') == 2
    # The metadata: commit, command and machine of each run.
    meta = read_summary(runs / "expert")["meta"]
    assert "<code>command</code>" in page and json.dumps(meta["command"])[1:-1].replace("'", "&#x27;") in page
    assert "<code>machine.cpu</code>" in page and "<code>commit</code>" in page


@pytest.mark.skipif(find_chromium() is None, reason="no chromium on PATH: `make setup` installs Debian's "
                    "(apt-get, as root); elsewhere install chromium to run this test")
def test_report_opens_in_headless_chromium(runs, tmp_path, capsys):
    rc, _, _ = _report(tmp_path, runs / "expert", runs / "random", capsys=capsys)
    assert rc == 0
    seen = inspect_page(tmp_path / "report.html", selectors_to_count=("table", "img", "#metrics", "#plots",
                                                                     "#episodes", "#metadata", "tr"))
    assert seen.console_errors == []
    assert all(u.startswith(("file:", "data:")) for u in seen.requests), seen.requests  # nothing from a network
    # inputs, main metrics, folded metrics, episode counts, 2 episode tables, metadata
    assert seen.counts["table"] == 7
    assert all(seen.counts[s] == 1 for s in ("#metrics", "#plots", "#episodes", "#metadata"))
    assert seen.counts["img"] == seen.images == seen.images_decoded == 3  # 2 trajectory plots, 1 from above
    assert seen.title == "airplay report"
    assert seen.screenshot_png.startswith(PNG_SIGNATURE)
    (tmp_path / "report.png").write_bytes(seen.screenshot_png)


def test_damaged_inputs_are_named_and_the_rest_renders(runs, tmp_path, capsys):
    newer = shutil.copytree(runs / "expert", tmp_path / "newer")
    doc = json.loads((newer / "summary.json").read_text())
    doc["meta"]["results_format"] = 99
    (newer / "summary.json").write_text(json.dumps(doc))
    no_plot = shutil.copytree(runs / "random", tmp_path / "no_plot")
    (no_plot / "indoor_1_trajectories.png").unlink()
    with (no_plot / "episodes.jsonl").open("a") as f:
        f.write('{"scene": "indoor_1"}\n')
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "episodes.jsonl").write_text("")
    rc, page, err = _report(tmp_path, newer, no_plot, empty, capsys=capsys)
    assert rc == 0
    expected = [f"{newer / 'summary.json'}: results_format 99, this airplay reads 1",
                f"{no_plot / 'indoor_1_trajectories.png'}: missing",
                f"{no_plot / 'episodes.jsonl'}:3: EpisodeResult.from_json: missing field(s)",
                f"{empty}: empty run: no episodes", f"{empty / 'summary.json'}: missing"]
    for message in expected:
        assert f"warning: {message}" in err
        assert message in page.replace("&#x27;", "'")
    # What could be read is still there: both readable runs' columns, the plot that exists, 2 + 2 episode rows.
    assert page.count("data:image/png;base64,") == 2 and "no plot: <code>" in page  # a plot, the scene from above
    assert '<a href="#plot-0-indoor_1">' in page and page.count("<tr><td>0</td>") == 2


def test_a_path_that_is_not_results_is_an_error_and_writes_nothing(runs, tmp_path, capsys):
    out = tmp_path / "report.html"
    out.write_text("the previous report")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("x")
    for bad in (tmp_path / "notes", tmp_path / "missing", runs / "scenes" / "indoor_1" / "scene.yaml"):
        assert main(["report", str(runs / "expert"), str(bad), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {bad}: ") and err.count("\n") == 1
        assert out.read_text() == "the previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes", "report.html"]  # no temporary file left


def test_offline_results_and_folders_of_results(runs, tmp_path, capsys):
    """A folder of result folders (as a sweep writes per-H subfolders) with a summary file of a kind this
    airplay does not know, and an `eval-offline --out` file: each read by its files, none lost."""
    group = tmp_path / "sweep"
    shutil.copytree(runs / "expert", group / "H1" / "expert")
    shutil.copytree(runs / "random", group / "H2" / "random")
    (group / "sweep.json").write_text(json.dumps({"horizons": [1, 2], "kind": "not known yet"}))
    offline = tmp_path / "offline.json"
    metrics = {"ade_cm": 3.25, "fde_cm": 6.5, "p95_cm": 12.0, "yaw_err_deg": 1.5, "corner_fde_cm": None}
    offline.write_text(json.dumps({
        "overall": {**metrics, "scenes": 1, "trajectories": 4, "anchors": 120, "corner_anchors": 7},
        "per_scene": {"indoor_1": {**metrics, "trajectories": 4, "anchors": 120, "corner_anchors": 7}},
        "baselines": {"copycat": {"skill": {"ade": 0.25, "fde": -0.5}, "ratio": {"ade": 0.75, "fde": 1.5}}},
        "meta": {"policy": "act", "checkpoint": "/ckpt/act-small", "dataset": "/data/unseen"}}))
    rc, page, err = _report(tmp_path, group, offline, capsys=capsys)
    assert rc == 0 and err == ""
    assert '<section id="offline">' in page and ">act (act-small)<" in page
    assert "<td>3.25</td>" in page and "<td>+0.25</td>" in page and "<td>-0.50</td>" in page
    assert "sweep.json</code></summary>" in page and "not known yet" in page
    assert OFFLINE_UNITS == UNITS  # the report names the offline figures as `airplay eval-offline` does
    assert 'id="plot-0-indoor_1"' in page and 'id="plot-1-indoor_1"' in page


def test_sweep_and_disturbance_folders(runs, tmp_path, monkeypatch, capsys):
    """`airplay sweep` and `airplay disturb` folders: their tables, the per-H runs as columns, the sweep's
    figures; a disturbance file of another format version is named and still shown."""
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(runs / "cache"))
    common = ["--scenes", str(runs / "scenes"), "--episodes", "1", "--no-images", "--no-progress", "--bootstrap", "20"]
    assert main(["sweep", "--policy", "random", "--horizons", "1", "2", "--out", str(tmp_path / "sweep"), *common]) == 0
    assert main(["disturb", "--policy", "expert", "--out", str(tmp_path / "disturb"), *common]) == 0
    doc = json.loads((tmp_path / "disturb" / "disturb.json").read_text())
    capsys.readouterr()
    rc, page, err = _report(tmp_path / "page", tmp_path / "sweep", tmp_path / "disturb", capsys=capsys)
    assert rc == 0 and err == ""
    assert '<section id="sweep">' in page and '<section id="disturb">' in page
    assert ">random (H=1)<" in page and ">random (H=2)<" in page  # the per-H eval runs are columns
    assert "sweep.png</code>" in page and "pairs_indoor_1.png</code>" in page
    d_min = doc["table"]["all"]["toward"]["d_min"]["mean"]
    assert f"<td>{d_min:.3f}" in page and "<td>toward</td>" in page

    doc["disturb_format"] = 2
    (tmp_path / "disturb" / "disturb.json").write_text(json.dumps(doc))
    rc, page, err = _report(tmp_path / "page", tmp_path / "disturb", capsys=capsys)
    message = f"{tmp_path / 'disturb' / 'disturb.json'}: disturb_format 2, this airplay reads 1"
    assert rc == 0 and f"warning: {message}" in err and message in page and f"<td>{d_min:.3f}" in page
