"""The live view of a running evaluation (airplay.view.live): ``airplay eval --view-out`` in process
writes a rerun recording that rerun's own reader reads back with one row per observation and
command, the episode's path and status, over the scene; the run's results are the same with and
without it; ``airplay eval --view`` serves rerun's web viewer on 127.0.0.1, whose page loads in
headless Chromium and reads the run from the gRPC server while an episode is in flight, as does a
rerun client that subscribes then; bad combinations exit 2 naming the flag. (The ROS graph's ``viewer:=true`` against this in-process view:
test_ros_graph.py::test_graph_equals_inprocess.)
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.headless_chromium import find_chromium, inspect_page
from helpers.ports import free_port, listening
from helpers.rrd import column, read_rrd

from airplay.cli import main


@pytest.fixture(scope="module")
def scenes(tiny_scenes):
    return tiny_scenes


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


HELD_AT = 100
"""The step of the first episode at which :data:`HELD_EXPERT` waits (the episode has 277)."""

HELD_EXPERT = f'''
"""The expert, waiting at its {HELD_AT}th step until $AIRPLAY_TEST_GATE/go exists (it writes .../paused)."""
import os
import time
from pathlib import Path

from airplay.policies.expert import ExpertNavigator


class Held(ExpertNavigator):
    steps = 0

    def select_action(self, obs):
        if Held.steps == {HELD_AT}:
            gate = Path(os.environ["AIRPLAY_TEST_GATE"])
            (gate / "paused").touch()
            deadline = time.monotonic() + 300
            while not (gate / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        Held.steps += 1
        return super().select_action(obs)


def make(world):
    return Held(world)
'''


def _received(path: Path, entity: str, expected: int, client, timeout_s: float = 60.0):
    """The rows per entity (``read_rrd``) that a ``rerun --save`` client has written to ``path``, once
    ``entity`` has ``expected`` rows (read from a copy: the client is still writing)."""
    import shutil

    copy, rows = path.with_suffix(".copy.rrd"), {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert client.poll() is None, client.stderr.read().decode(errors="replace")
        if path.exists():
            shutil.copyfile(path, copy)
            try:
                with warnings.catch_warnings():  # the client's file has no footer until it ends
                    warnings.simplefilter("ignore")
                    rows = read_rrd(copy)[0]
            except Exception:  # noqa: BLE001 - a chunk half-written by the client: read again
                rows = {}
            if rows.get(entity, 0) >= expected:
                return rows
        time.sleep(0.5)
    pytest.fail(f"the rerun client received {rows.get(entity, 0)} of {expected} rows of {entity}: {rows}")


def _line(proc, prefix: str, seen: list[str]) -> str:
    """The next line of ``proc``'s output that starts with ``prefix`` (the lines before it kept in ``seen``)."""
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return line.rstrip("\n")
    pytest.fail(f"`airplay eval --view` ended ({proc.wait()}) before printing {prefix!r}:\n{''.join(seen)}")


@pytest.mark.slow  # ~8 s on an idle machine: rerun's WebAssembly viewer (43 MB) compiles and starts in Chromium
@pytest.mark.skipif(find_chromium() is None, reason="no chromium on PATH: `make setup` installs Debian's "
                    "(apt-get, as root); elsewhere install chromium to run this test")
def test_eval_view_web_viewer_loads_in_headless_chromium(scenes, tmp_path):
    """A real `airplay eval --view` (2 episodes) on free ports, its first episode held mid-flight (the
    policy waits at its 100th step until the test lets it go on). While it is held:

    - a rerun client (``rerun --save``, rerun's own) subscribed to the gRPC server has received the
      episode so far: the 101 observations, 100 commands, its start and no end;
    - the web viewer page, opened in headless Chromium, loads its script and WebAssembly from 127.0.0.1
      (HTTP 200), connects to the gRPC server and receives the data; no console error but those of the
      outside hosts the viewer asks (fonts, rerun's analytics, release checks), which the browser here
      blocks; both servers listen on 127.0.0.1 only.

    Let go, the run ends with its results, the client has received both episodes whole, and Ctrl-C
    (SIGINT) ends the serving."""
    pytest.importorskip("rerun", reason="rerun-sdk is not installed (make setup installs it)")
    from airplay.view.command import rerun_executable

    web, grpc = free_port(), free_port()
    out, gate = tmp_path / "run", tmp_path / "gate"
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "held_expert.py").write_text(HELD_EXPERT)
    gate.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "plugins"), *sys.path]),
               AIRPLAY_TEST_GATE=str(gate))
    proc = subprocess.Popen([sys.executable, "-m", "airplay.cli", "eval", "--scenes", str(scenes), "--episodes", "2",
                             "--seed", "3", "--out", str(out), "--no-images", "--bootstrap", "20", "--no-progress",
                             "--policy", "held_expert:make",
                             "--view", "--view-web-port", str(web), "--view-grpc-port", str(grpc)],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # Ctrl-C, even where
    # this test runs with SIGINT ignored (started in the background by a shell)
    seen: list[str] = []
    client = None
    try:
        url = _line(proc, "live view: open ", seen).removeprefix("live view: open ")
        assert url == (f"http://127.0.0.1:{web}/?url=rerun%2Bhttp%3A%2F%2F127.0.0.1%3A{grpc}%2Fproxy")
        assert listening(web) == {"127.0.0.1"} and listening(grpc) == {"127.0.0.1"}
        deadline = time.monotonic() + 120
        while not (gate / "paused").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "not held mid-flight:\n" + "".join(seen)
            time.sleep(0.1)
        # Held at step HELD_AT of episode 0: a rerun client subscribes now and gets the flight so far.
        client = subprocess.Popen([rerun_executable(), "--save", str(tmp_path / "client.rrd"),
                                   f"rerun+http://127.0.0.1:{grpc}/proxy"], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        rows = _received(tmp_path / "client.rrd", "/world/vehicle", HELD_AT + 1, client)
        assert rows["/world/vehicle"] == HELD_AT + 1 and rows["/command/vx"] == HELD_AT
        assert rows["/status"] == 1  # started, not ended
        assert not (out / "episodes.jsonl").exists() or not (out / "episodes.jsonl").read_text()
        # Every outside host is https here; the browser refuses them (nothing leaves this machine).
        page = inspect_page(url, selectors_to_count=("canvas",), block_urls=("https://*",),
                            wait_for_data=f"http://127.0.0.1:{grpc}/", timeout_s=90)
        assert proc.poll() is None, "airplay eval --view ended while its page was open:\n" + "".join(seen)
        assert not (out / "episodes.jsonl").exists() or not (out / "episodes.jsonl").read_text()  # still held
        assert page.title == "Rerun Viewer" and page.counts == {"canvas": 1}
        site = f"http://127.0.0.1:{web}/"
        for asset in (url, site + "re_viewer.js", site + "re_viewer_bg.wasm"):
            assert page.statuses.get(asset) == 200, (asset, page.statuses)
            assert page.received.get(asset, 0) > 0, asset
        assert page.received[site + "re_viewer_bg.wasm"] > 10_000_000  # the viewer itself
        data = [u for u in page.statuses if u.startswith(f"http://127.0.0.1:{grpc}/")]
        assert data and all(page.statuses[u] == 200 for u in data), page.statuses
        assert sum(page.received.get(u, 0) for u in data) > 10_000  # the scene's mesh and points, the episodes
        outside = [u for u in page.requests if not u.startswith(("http://127.0.0.1:", "data:", "blob:"))]
        assert all(u.startswith("https://") and u in page.failed for u in outside), (outside, page.failed)
        errors = [e for e in page.console_errors
                  if not (e.startswith("network: ") and e.rsplit(" ", 1)[-1] in outside)]
        failed_fetches = [e for e in errors if e.startswith("TypeError: Failed to fetch")]
        assert len(failed_fetches) <= len(outside), errors  # at most one per refused request
        assert [e for e in errors if e not in failed_fetches] == []
        assert page.screenshot_png.startswith(b"\x89PNG\r\n\x1a\n")
        (tmp_path / "live_viewer.png").write_bytes(page.screenshot_png)
        # Let go: the run ends with its results; the viewer keeps serving until Ctrl-C.
        (gate / "go").touch()
        _line(proc, "the run has ended; the web viewer keeps serving", seen)
        assert "Results in" in "".join(seen)
        episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
        assert len(episodes) == 2 and (out / "summary.json").is_file()
        steps = sum(e["steps"] for e in episodes)
        rows = _received(tmp_path / "client.rrd", "/world/vehicle", steps + 2, client)
        assert rows["/command/vx"] == steps and rows["/status"] == 4  # both episodes, whole
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0, "".join(seen)
        deadline = time.monotonic() + 5
        while (listening(web) or listening(grpc)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not listening(web) and not listening(grpc)  # the rerun server ended with it
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        if client is not None:
            client.kill()
            client.communicate()


def test_rerun_server_runs_with_rerun_analytics_off():
    """The rerun processes airplay starts get ``CI`` set, which turns rerun's usage analytics off
    (nothing of airplay's may send a packet off this machine); so does airplay's own process."""
    pytest.importorskip("rerun", reason="rerun-sdk is not installed (make setup installs it)")
    from airplay.view.live import RerunServer

    assert "CI" in os.environ or os.environ.get("FORCE_RERUN_ANALYTICS")
    server = RerunServer(free_port(), free_port())
    try:
        env = Path(f"/proc/{server.proc.pid}/environ").read_bytes().split(b"\0")
        assert any(v.startswith(b"CI=") for v in env), "the rerun server runs without CI set"
    finally:
        server.stop()
