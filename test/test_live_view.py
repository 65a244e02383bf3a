"""The live view of a running evaluation (airplay.view.live): ``airplay eval --view-out`` in process
writes a rerun recording that rerun's own reader reads back with one row per observation and
command, the episode's path and status, over the scene; the run's results are the same with and
without it; bad combinations exit 2 naming the flag. (The ROS graph's ``viewer:=true`` against
this in-process view: test_ros_graph.py::test_graph_equals_inprocess.)
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pyarrow as pa
import pytest
from scene_factory import write_tiny_scene
from test_view import column, read_rrd

from airplay.cli import main


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    root = tmp_path_factory.mktemp("live")
    write_tiny_scene(root / "scenes" / "tiny")
    return root / "scenes"


@pytest.fixture(autouse=True)
def _cache(scenes, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(scenes.parent / "cache"))


def _eval(scenes, out, *extra):
    return main(["eval", "--scenes", str(scenes), "--episodes", "1", "--seed", "3", "--out", str(out), "--no-images",
                 "--bootstrap", "20", "--no-progress", *extra])


@pytest.mark.slow  # ~7 s on 2 loaded cores: two evaluations
def test_eval_view_out_records_the_run_in_process(scenes, tmp_path, capsys):
    pytest.importorskip("rerun", reason="rerun-sdk is not installed (make setup installs it)")
    rrd = tmp_path / "live.rrd"
    assert _eval(scenes, tmp_path / "viewed", "--view-out", str(rrd)) == 0
    assert f"live view recorded in {rrd}" in capsys.readouterr().out
    assert _eval(scenes, tmp_path / "plain") == 0
    # watching changes nothing
    assert (tmp_path / "viewed" / "episodes.jsonl").read_text() == (tmp_path / "plain" / "episodes.jsonl").read_text()
    episode = json.loads((tmp_path / "viewed" / "episodes.jsonl").read_text())
    steps, task_id = episode["steps"], episode["task_id"]
    rows, static, batches = read_rrd(rrd)
    assert rows["/world/vehicle"] == steps + 1  # the start and every step's observation
    for name in ("vx", "vy", "vz", "yaw_rate"):
        assert rows[f"/command/{name}"] == steps
    assert rows["/world/goal"] == 1 and rows["/status"] == 2
    assert "/world/vehicle/camera/rgb" not in rows  # --no-images: no camera images
    for entity in ("/world", "/world/scene/tiny/mesh", "/world/scene/tiny/splat", "/world/vehicle/camera",
                   f"/world/tiny/{task_id}"):
        assert static[entity] == 1, entity
    times = sorted(t for b in batches["/world/vehicle"] if "sim_time" in b.schema.names
                   for t in b.column("sim_time").cast(pa.int64()).to_pylist())
    assert times == [k * 20_000_000 for k in range(steps + 1)]  # the ROS graph's stamps
    path, = column(batches, f"/world/tiny/{task_id}", "LineStrips3D:strips")[0:1]
    trajectory = np.load(tmp_path / "viewed" / "trajectories" / "tiny" / f"{task_id}.npy")
    np.testing.assert_allclose(np.array(path[0]), trajectory, atol=1e-5)
    status = [json.loads(t[0]) for t in column(batches, "/status", "TextLog:text")]
    assert [s["status"] for s in status] == ["started", episode["status"]]
    assert status[1]["steps"] == steps


def test_live_view_logs_images_goal_and_the_episode_path(tmp_path):
    """LiveView itself: camera images, goal image, the running and the final path."""
    pytest.importorskip("rerun", reason="rerun-sdk is not installed (make setup installs it)")
    from airplay.scene.camera import PinholeCamera
    from airplay.view.live import TRAJECTORY_EVERY, LiveView

    live = LiveView(out=tmp_path / "x.rrd")
    camera = PinholeCamera.from_fov(8, 6, 90.0)
    live.start_episode(100_000_000, 4, "room", "room-imagegoal-0-4", goal=[1.0, 2.0, 1.5],
                       goal_image=np.zeros((6, 8, 3), np.uint8), camera=camera)
    n = 2 * TRAJECTORY_EVERY + 3
    for k in range(n):
        t = 100_000_000 + k * 20_000_000
        live.observe(t, [0.1 * k, 0.0, 1.0], 0.0, rgb=np.full((6, 8, 3), k, np.uint8),
                     depth=np.full((6, 8, 1), 2.0, np.float32))
        if k < n - 1:
            live.command(t, [1.0, 0.0, 0.0, 0.1])
    live.end_episode(100_000_000 + (n - 1) * 20_000_000, "collision")
    live.close()
    rows, static, batches = read_rrd(tmp_path / "x.rrd")
    assert rows["/world/vehicle/camera/rgb"] == rows["/world/vehicle/camera/depth"] == rows["/world/vehicle"] == n
    assert rows["/command/vx"] == n - 1 and rows["/goal_image"] == 1 and rows["/status"] == 2
    assert rows["/world/trajectory"] == 2 + 1  # every TRAJECTORY_EVERY observations, and the end
    assert static["/world/room/room-imagegoal-0-4"] == 1
    steps = sorted(s for b in batches["/world/vehicle"] for s in b.column("step").to_pylist())
    assert steps == list(range(n))
    episodes = {e for b in batches["/world/vehicle"] for e in b.column("episode").to_pylist()}
    assert episodes == {4}
    pinhole = column(batches, "/world/vehicle/camera", "Pinhole:resolution")
    assert pinhole == [[[8.0, 6.0]]]


def test_view_refusals_name_the_flag(scenes, tmp_path, capsys):
    assert _eval(scenes, tmp_path / "o", "--view-out", str(tmp_path / "x.rrd"), "--workers", "2") == 2
    assert "--view/--view-out: not available for --workers N / --ray" in capsys.readouterr().err
    pytest.importorskip("rerun", reason="rerun-sdk is not installed (make setup installs it)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert _eval(scenes, tmp_path / "o", "--view", "--view-web-port", str(port)) == 2
    assert f"error: --view: port {port} on 127.0.0.1 is in use" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "x.rrd").exists()
