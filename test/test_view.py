"""``airplay view``: an episode bag, a LeRobot dataset and an eval results folder written as rerun
recordings (.rrd) and read back with rerun's own reader (``rerun.chunk.RrdReader``): the expected
entities with one row per frame; bad input exits 2 naming the file and leaves no .rrd behind.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest
from helpers.episodes import META, synthetic_episode
from helpers.ports import free_port, listening
from helpers.rrd import column, read_rrd
from helpers.scene_factory import write_tiny_scene

from airplay.cli import main
from airplay.data.bag import write_episode_bag

T = 30


@pytest.fixture
def rerun_sdk():
    """The round trips need rerun-sdk (the `dev` and `view` extras; `make setup` installs it)."""
    return pytest.importorskip("rerun", reason="rerun-sdk is not installed (make setup installs it)")


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    root = tmp_path_factory.mktemp("view")
    scene = write_tiny_scene(root / "scenes" / "tiny")
    ep, records = synthetic_episode(T)
    path = write_episode_bag(root / "bags", "tiny", "tiny-imagegoal-0-3", records,
                             metadata={**META, "scene": "tiny", "task_id": "tiny-imagegoal-0-3"})
    return root, path, scene, ep


def test_bag_round_trip(rerun_sdk, bag, capsys):
    root, path, scene, ep = bag
    out = root / "bag.rrd"
    assert main(["view", str(path), "-o", str(out), "--scenes", str(scene.parent), "--points", "100"]) == 0
    assert "scene(s) drawn: tiny" in capsys.readouterr().out
    assert not [p for p in root.iterdir() if p.name.startswith(".")]  # no temporary file left
    rows, static, batches = read_rrd(out)
    for entity in ("/world/vehicle", "/world/vehicle/camera/rgb", "/world/vehicle/camera/depth",
                   "/command/vx", "/command/vy", "/command/vz", "/command/yaw_rate"):
        assert rows[entity] == T, entity
    assert rows["/status"] == 2  # started, success
    for entity in ("/world", "/world/trajectory", "/world/goal", "/goal_image", "/metadata",
                   "/world/vehicle/camera", "/world/scene/tiny/mesh", "/world/scene/tiny/splat"):
        assert static[entity] == 1, entity
    strip, = column(batches, "/world/trajectory", "LineStrips3D:strips")[0]
    np.testing.assert_allclose(np.array(strip), ep["state"][:T, :3], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(column(batches, "/world/goal", "Points3D:positions")[0][0], ep["goal"], rtol=1e-6)
    vx = [v[0] for v in column(batches, "/command/vx", "Scalars:scalars")]
    np.testing.assert_allclose(sorted(vx), sorted(ep["action"][:, 0]), rtol=1e-6)
    assert len(column(batches, "/world/scene/tiny/mesh", "Mesh3D:triangle_indices")[0]) == 12  # the cube
    assert len(column(batches, "/world/scene/tiny/splat", "Points3D:positions")[0]) == 100  # of 400
    times = sorted(t for b in batches["/world/vehicle/camera/rgb"]
                   for t in b.column("sim_time").cast(pa.int64()).to_pylist())
    assert times == list(ep["stamps"][:T])  # the bag's sim time, ns
    status = [json.loads(t[0]) for t in column(batches, "/status", "TextLog:text")]
    assert {s["status"] for s in status} == {"started", "success"}


def test_results_round_trip(rerun_sdk, tmp_path, capsys):
    from airplay.eval.journal import save_trajectory
    from airplay.eval.metrics import EpisodeResult
    from airplay.eval.results import write_results

    results, lengths = [], {"t0": 40, "t1": 25}
    for i, (tid, n) in enumerate(lengths.items()):
        status = "success" if i == 0 else "collision"
        results.append(EpisodeResult(scene="tiny", task_id=tid, setting="pointgoal", status=status, steps=n,
                                     path_length_m=1.0, shortest_length_m=1.0, euclidean_distance_m=1.0,
                                     final_distance_m=0.5, min_distance_m=0.2, seed=0,
                                     time_to_success_s=n * 0.02 if status == "success" else None))
        save_trajectory(tmp_path / "run", "tiny", tid, np.linspace([0, 0, 1], [1, 2, 1], n))
    results.append(EpisodeResult(scene="tiny", task_id="t2", setting="pointgoal", status="timeout", steps=5,
                                 path_length_m=1.0, shortest_length_m=1.0, euclidean_distance_m=1.0,
                                 final_distance_m=0.5, min_distance_m=0.2, seed=0, time_to_success_s=None))
    write_results(tmp_path / "run", results, {}, meta={"scenes": [str(tmp_path / "not-here")]})
    out = tmp_path / "run.rrd"
    assert main(["view", str(tmp_path / "run"), "-o", str(out)]) == 0
    assert "3 episode(s), 65 sample(s)" in capsys.readouterr().out
    rows, static, batches = read_rrd(out)
    assert rows["/world/tiny/t0/position"] == 40 and rows["/world/tiny/t1/position"] == 25
    assert static["/world/tiny/t0"] == static["/world/tiny/t1"] == 1 and "/world/tiny/t2" not in static
    assert rows["/status"] == 3  # every episode, the one without a trajectory too


def test_dataset_round_trip(rerun_sdk, tmp_path):
    from helpers.policy_data import tiny_episodes

    from airplay.data.lerobot import LeRobotWriter

    with LeRobotWriter(tmp_path / "ds", image_shape=(32, 32)) as writer:
        for ep in tiny_episodes(2, length=12):
            writer.add_episode(ep.rgb, ep.state, ep.action, goal=ep.goal, meta={"scene": "tiny", "status": "success"})
    out = tmp_path / "ds.rrd"
    assert main(["view", str(tmp_path / "ds"), "--episode", "1", "-o", str(out)]) == 0
    rows, static, _ = read_rrd(out)
    assert rows["/world/vehicle/camera/rgb"] == rows["/world/vehicle"] == rows["/command/yaw_rate"] == 12
    assert static["/world/trajectory"] == static["/world/goal"] == 1
    assert main(["view", str(tmp_path / "ds"), "--episode", "2", "-o", str(out)]) == 2


def test_bad_input_exits_2_naming_the_file(tmp_path, capsys):
    """Read before rerun is needed: runs without rerun-sdk too."""
    out = tmp_path / "x.rrd"
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "empty") in err and "not an episode bag" in err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "broken_0.mcap").write_bytes(b"not an mcap file at all")
    assert main(["view", str(broken), "-o", str(out)]) == 2
    assert str(broken) in capsys.readouterr().err
    assert main(["view", str(tmp_path / "missing"), "-o", str(out)]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "empty"]  # no .rrd, no temporary file


def test_serve_binds_loopback_and_the_viewer_page_loads(rerun_sdk, bag, tmp_path):
    """`--serve`: the rerun CLI serves the recording to its web viewer, both servers on 127.0.0.1
    only; the page loads in headless Chromium (where one is installed) with rerun's viewer in it."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import urllib.request

    from helpers.headless_chromium import find_chromium, inspect_page

    _, path, _, _ = bag
    web, grpc = free_port(), free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-m", "airplay.cli", "view", str(path), "-o", str(tmp_path / "s.rrd"),
                             "--serve", "--web-port", str(web), "--grpc-port", str(grpc)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, page = time.monotonic() + 30, None
        while page is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                page = urllib.request.urlopen(f"http://127.0.0.1:{web}/", timeout=2).read().decode()
            except OSError:
                time.sleep(0.3)
        assert page is not None, f"no web viewer on port {web}: {proc.poll()}"
        assert "re_viewer" in page
        assert listening(web) == {"127.0.0.1"} and listening(grpc) == {"127.0.0.1"}
        if find_chromium() is None:
            pytest.skip("no chromium: the viewer page was fetched but not opened in a browser")
        url = f"http://127.0.0.1:{web}/?url=rerun%2Bhttp%3A%2F%2F127.0.0.1%3A{grpc}%2Fproxy"
        report = inspect_page(url, selectors_to_count=("canvas",))
        assert report.title == "Rerun Viewer" and report.counts == {"canvas": 1}
        assert f"http://127.0.0.1:{web}/re_viewer_bg.wasm" in report.requests
        # The viewer also asks outside hosts (fonts, rerun's telemetry, GitHub releases): offline those
        # requests fail and are left out here; any other error fails the test.
        errors = [e for e in report.console_errors
                  if "ERR_NAME_NOT_RESOLVED" not in e and not e.startswith("TypeError: Failed to fetch")]
        assert not errors, errors
        (tmp_path / "viewer.png").write_bytes(report.screenshot_png)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        out = proc.communicate(timeout=20)[0].decode(errors="replace")
    assert f"serving {tmp_path / 's.rrd'}" in out
