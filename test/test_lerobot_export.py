"""LeRobot v3.0 export: the writer's layout and metadata, airplay's reader (exact vectors, video
within codec tolerance), file rolling into chunks, bad input, and bags -> datasets per split
through ``airplay dataset export`` / ``stats``. (The standalone lerobot-dataset package
reading the same files: test_lerobot_compat.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from helpers.export_bags import BAG_PLAN, H, W, episode_records, flight_states, smooth_frames, write_bags

from airplay.data import messages as M
from airplay.data.bag import write_episode_bag
from airplay.data.export import ExportError, export_bags
from airplay.data.keys import ACTION_KEY, DEPTH_KEY, GOAL_IMAGE_KEY, GOAL_KEY, RGB_KEY, STATE_KEY
from airplay.data.lerobot import TASK_TEXT, DatasetError, LeRobotDataset, LeRobotWriter
from airplay.frames import headings_from_quats_xyzw
from airplay.world.env import goal_in_heading_frame

V3_EPISODE_COLUMNS = ["episode_index", "tasks", "length", "data/chunk_index", "data/file_index",
                      "dataset_from_index", "dataset_to_index", "meta/episodes/chunk_index",
                      "meta/episodes/file_index"]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b.astype(np.float64)) ** 2).mean())
    return 10 * np.log10(255.0 ** 2 / max(mse, 1e-12))


# -- the writer and the reader ------------------------------------------------------------------------
def write_synthetic(root: Path, lengths=(30, 45, 17), **kwargs):
    rng = np.random.default_rng(3)
    sources = []
    with LeRobotWriter(root, image_shape=(H, W), goal_image=True, depth=True, **kwargs) as writer:
        for e, t in enumerate(lengths):
            src = {"rgb": smooth_frames(t, e), "state": flight_states(t, rng),
                   "action": rng.normal(size=(t, 4)).astype(np.float32), "goal": rng.normal(size=(t, 3)),
                   "goal_image": smooth_frames(1, 10 + e)[0],
                   "depth": rng.uniform(0.2, 30, (t, H, W)).astype(np.float32),
                   "task": TASK_TEXT["imagegoal"] if e == 1 else TASK_TEXT["pointgoal"]}
            assert writer.add_episode(src["rgb"], src["state"], src["action"], goal=src["goal"],
                                      goal_image=src["goal_image"], depth=src["depth"], task=src["task"],
                                      meta={"scene": f"scene_{e}", "success": e != 2, "task": {"k": e}}) == e
            sources.append(src)
    return sources


def test_writer_layout_metadata_and_reader(tmp_path):
    root = tmp_path / "ds"
    sources = write_synthetic(root)
    lengths = [len(s["action"]) for s in sources]
    for rel in ("meta/info.json", "meta/stats.json", "meta/tasks.parquet", "meta/episodes/chunk-000/file-000.parquet",
                "data/chunk-000/file-000.parquet", f"videos/{RGB_KEY}/chunk-000/file-000.mp4",
                f"videos/{GOAL_IMAGE_KEY}/chunk-000/file-000.mp4"):
        assert (root / rel).is_file(), rel

    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == 50
    assert info["total_episodes"] == 3 and info["total_frames"] == sum(lengths) and info["total_tasks"] == 2
    assert info["splits"] == {"train": "0:3"}
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    f = info["features"]
    assert f[RGB_KEY]["dtype"] == "video" and f[RGB_KEY]["shape"] == [H, W, 3]
    assert f[RGB_KEY]["info"]["video.codec"] == "h264" and f[RGB_KEY]["info"]["video.pix_fmt"] == "yuv420p"
    assert f[RGB_KEY]["info"]["video.fps"] == 50 and f[RGB_KEY]["info"]["video.width"] == W
    assert f[STATE_KEY] == {"dtype": "float32", "shape": [13], "names": ["x", "y", "z", "qx", "qy", "qz", "qw",
                                                                          "vx", "vy", "vz", "wx", "wy", "wz"]}
    assert f[ACTION_KEY]["names"] == ["vx", "vy", "vz", "yaw_rate"] and f[GOAL_KEY]["shape"] == [3]
    assert f[DEPTH_KEY]["shape"] == [H, W]
    assert {k: f[k]["dtype"] for k in ("timestamp", "frame_index", "episode_index", "index", "task_index")} == {
        "timestamp": "float32", "frame_index": "int64", "episode_index": "int64", "index": "int64",
        "task_index": "int64"}

    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for col in V3_EPISODE_COLUMNS + [f"videos/{RGB_KEY}/{c}" for c in
                                     ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]:
        assert col in eps[0], col
    starts = np.concatenate([[0], np.cumsum(lengths)])
    for e, row in enumerate(eps):
        assert row["length"] == lengths[e] and row["tasks"] == [sources[e]["task"]]
        assert (row["dataset_from_index"], row["dataset_to_index"]) == (starts[e], starts[e + 1])
        assert row[f"videos/{RGB_KEY}/from_timestamp"] == pytest.approx(starts[e] / 50)
        assert row[f"videos/{RGB_KEY}/to_timestamp"] == pytest.approx(starts[e + 1] / 50)
        assert row[f"stats/{ACTION_KEY}/count"] == [lengths[e]]
        np.testing.assert_allclose(row[f"stats/{ACTION_KEY}/mean"], sources[e]["action"].mean(0), rtol=1e-5)
        assert np.asarray(row[f"stats/{RGB_KEY}/mean"]).shape == (3, 1, 1)
        assert row["airplay/scene"] == f"scene_{e}" and json.loads(row["airplay/task"]) == {"k": e}
    import av

    with av.open(str(root / f"videos/{RGB_KEY}/chunk-000/file-000.mp4")) as c:  # episodes start on key frames
        keys = {round(float(f.pts * f.time_base) * 50) for f in c.decode(video=0) if f.key_frame}
    assert set(starts[:-1].tolist()) <= keys
    tasks = pq.read_table(root / "meta/tasks.parquet").to_pydict()
    assert dict(zip(tasks["task"], tasks["task_index"])) == {TASK_TEXT["pointgoal"]: 0, TASK_TEXT["imagegoal"]: 1}
    assert b"pandas" in pq.read_schema(root / "meta/tasks.parquet").metadata  # LeRobot reads it with pandas

    stats = json.loads((root / "meta/stats.json").read_text())
    all_actions = np.concatenate([s["action"] for s in sources]).astype(np.float64)
    np.testing.assert_allclose(stats[ACTION_KEY]["mean"], all_actions.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats[ACTION_KEY]["std"], all_actions.std(0), rtol=1e-6)
    np.testing.assert_allclose(stats[ACTION_KEY]["q50"], np.quantile(all_actions, 0.5, axis=0), rtol=1e-6)
    rgb_all = np.concatenate([s["rgb"] for s in sources]).reshape(-1, 3) / 255.0
    np.testing.assert_allclose(np.asarray(stats[RGB_KEY]["mean"]).reshape(3), rgb_all.mean(0), rtol=1e-9)
    assert stats[RGB_KEY]["count"] == [sum(lengths)]
    depth_all = np.concatenate([s["depth"] for s in sources]).astype(np.float64)  # per pixel, as LeRobot does
    np.testing.assert_allclose(stats[DEPTH_KEY]["mean"], depth_all.mean(0), rtol=1e-9)
    np.testing.assert_allclose(stats[DEPTH_KEY]["std"], depth_all.std(0), rtol=1e-6)
    np.testing.assert_allclose(stats[DEPTH_KEY]["max"], depth_all.max(0), rtol=1e-9)

    ds = LeRobotDataset(root)
    assert len(ds) == sum(lengths) and ds.num_episodes == 3 and ds.fps == 50
    for e, src in enumerate(sources):
        ep = ds.episode(e)
        assert np.array_equal(ep[ACTION_KEY], src["action"])
        assert np.array_equal(ep[STATE_KEY], src["state"].astype(np.float32))
        assert np.array_equal(ep[GOAL_KEY], src["goal"].astype(np.float32))
        assert np.array_equal(ep[DEPTH_KEY], src["depth"])
        assert np.array_equal(ep["frame_index"], np.arange(lengths[e]))
        assert ep["task"] == src["task"] and ep["meta"]["scene"] == f"scene_{e}"
        assert psnr(ep[RGB_KEY], src["rgb"]) > 33.0
        assert np.abs(ep[RGB_KEY].astype(int) - src["rgb"]).mean() < 3.5
        assert psnr(ep[GOAL_IMAGE_KEY], np.broadcast_to(src["goal_image"], src["rgb"].shape)) > 33.0
    item = ds[int(starts[1]) + 5]  # by global index: episode 1, frame 5
    assert item["episode_index"] == 1 and item["frame_index"] == 5 and item["index"] == starts[1] + 5
    assert item["timestamp"] == pytest.approx(0.1) and item["task"] == TASK_TEXT["imagegoal"]
    assert np.array_equal(item[ACTION_KEY], sources[1]["action"][5])
    assert np.array_equal(item[RGB_KEY], ds.episode(1)[RGB_KEY][5])
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_files_roll_into_new_files_and_chunks(tmp_path):
    """Tiny size limits: every episode starts a new data and video file; 2 files per chunk.

    (Episodes longer than the H.264 look-ahead: the size counts what the encoder has emitted.)
    """
    root = tmp_path / "ds"
    sources = write_synthetic(root, lengths=(45, 41, 50), chunks_size=2, data_files_size_in_mb=1e-4,
                              video_files_size_in_mb=1e-4)
    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    where = [(r["data/chunk_index"], r["data/file_index"], r[f"videos/{RGB_KEY}/chunk_index"],
              r[f"videos/{RGB_KEY}/file_index"], r[f"videos/{RGB_KEY}/from_timestamp"]) for r in eps]
    assert where == [(0, 0, 0, 0, 0.0), (0, 1, 0, 1, 0.0), (1, 0, 1, 0, 0.0)]
    assert (root / "data/chunk-001/file-000.parquet").is_file()
    assert (root / f"videos/{RGB_KEY}/chunk-001/file-000.mp4").is_file()
    ds = LeRobotDataset(root)
    for e, src in enumerate(sources):
        ep = ds.episode(e)
        assert np.array_equal(ep[ACTION_KEY], src["action"]) and psnr(ep[RGB_KEY], src["rgb"]) > 33.0
        assert np.array_equal(ep["index"], np.arange(eps[e]["dataset_from_index"], eps[e]["dataset_to_index"]))


def test_writer_rejects_bad_input_and_leaves_nothing(tmp_path):
    t = 5
    good = {"rgb": smooth_frames(t, 0), "state": np.zeros((t, 13)), "action": np.zeros((t, 4), np.float32),
            "goal": np.zeros((t, 3))}
    with pytest.raises(DatasetError, match="even"):
        LeRobotWriter(tmp_path / "odd", image_shape=(47, 64))
    w = LeRobotWriter(tmp_path / "a", image_shape=(H, W))
    with pytest.raises(DatasetError, match="'rgb' has dtype float32"):
        w.add_episode(**{**good, "rgb": good["rgb"].astype(np.float32)})
    with pytest.raises(DatasetError, match="'action' has non-finite"):
        w.add_episode(**{**good, "action": np.full((t, 4), np.nan, np.float32)})
    with pytest.raises(DatasetError, match="'goal' is required"):
        w.add_episode(**{**good, "goal": None})
    with pytest.raises(DatasetError, match=r"'state' has shape \(4, 13\)"):
        w.add_episode(**{**good, "state": np.zeros((4, 13))})
    w.abort()
    assert not (tmp_path / "a").exists()

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        LeRobotWriter(tmp_path / "full", image_shape=(H, W))
    assert (tmp_path / "full" / "x").read_text() == "keep me"

    with pytest.raises(RuntimeError, match="boom"):  # an error inside the context removes the folder
        with LeRobotWriter(tmp_path / "b", image_shape=(H, W)) as w:
            w.add_episode(**good)
            raise RuntimeError("boom")
    assert not (tmp_path / "b").exists()

    root = tmp_path / "c"
    with LeRobotWriter(root, image_shape=(H, W)) as w:
        w.add_episode(**good)
    (root / "meta/info.json").write_text(json.dumps({**json.loads((root / "meta/info.json").read_text()),
                                                     "codebase_version": "v2.1"}))
    with pytest.raises(DatasetError, match=r"info.json: codebase_version 'v2.1'"):
        LeRobotDataset(root)


# -- bags -> datasets ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bags(tmp_path_factory):
    root = tmp_path_factory.mktemp("bags")
    sources = write_bags(root, BAG_PLAN)
    unfinished = root / "indoor_1" / "indoor_1-pointgoal-0-9"  # a bag whose writer was killed: no metadata.yaml
    recs, _ = episode_records(8, seed=99, setting="pointgoal")
    write_episode_bag(root, "indoor_1", unfinished.name, recs)
    (unfinished / "metadata.yaml").unlink()
    return root, sources


def test_export_bags_one_dataset_per_split(bags, tmp_path):
    root, sources = bags
    out = tmp_path / "export"
    summary = export_bags([root], out, progress=False)
    assert sorted(summary["datasets"]) == ["seen", "unseen"]
    assert summary["datasets"]["seen"]["episodes"] == 3 and summary["datasets"]["unseen"]["episodes"] == 2
    assert summary["datasets"]["seen"]["scenes"] == ["indoor_1", "urban_2"]
    reasons = sorted(s["reason"] for s in summary["skipped"])
    assert reasons == ["bag was never finalized (writer interrupted)", "flight outcome 'collision' (not a success)"]
    assert json.loads((out / "export.json").read_text())["bags"] == 7
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())  # no partial folder left

    for split, setting in (("seen", "pointgoal"), ("unseen", "imagegoal")):
        ds = LeRobotDataset(out / split)
        assert ds.info["splits"] == {split: f"0:{ds.num_episodes}"}
        assert ds.info["airplay"]["split"] == split and ds.info["airplay"]["setting"] == setting
        assert (GOAL_IMAGE_KEY in ds.features) == (setting == "imagegoal")
        for e in range(ds.num_episodes):
            ep = ds.episode(e)
            src = sources[ep["meta"]["task_id"]]
            t = len(src["action"])  # the terminal observation (no command) is dropped
            assert ep["meta"]["split"] == split and ep["task"] == TASK_TEXT[setting]
            assert np.array_equal(ep[ACTION_KEY], src["action"])
            assert np.array_equal(ep[STATE_KEY], src["state"][:t].astype(np.float32))
            assert psnr(ep[RGB_KEY], src["rgb"][:t]) > 33.0
            for k in (0, t // 2, t - 1):  # the goal in the heading frame, as AirPlayEnv computes it
                yaw = headings_from_quats_xyzw(src["state"][k:k + 1, 3:7])[0]
                expected = goal_in_heading_frame(src["state"][k, :3], yaw, src["goal"])
                np.testing.assert_allclose(ep[GOAL_KEY][k], expected, atol=1e-5)
            if setting == "imagegoal":
                assert psnr(ep[GOAL_IMAGE_KEY][0], src["goal_image"]) > 33.0

    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        export_bags([root], out, progress=False)
    only = export_bags([root], tmp_path / "unseen_only", split="unseen", progress=False)
    assert list(only["datasets"]) == ["unseen"]
    with_failures = export_bags([root], tmp_path / "all", split="seen", include_failures=True, progress=False)
    assert with_failures["datasets"]["seen"]["episodes"] == 4


def test_format_1_and_2_bags_export_the_same_state(tmp_path):
    """observation.state holds the map-frame velocity from both bag formats: a format 1 bag (older
    airplay: /odom's twist in map, no bag_format) and a format 2 bag (REP-105: twist in base_link)
    of the same flight export to the same float32 states (the source's, velocity to float32
    rounding of a value a few float64 ulp away)."""
    from airplay.data.bag import BagWriter

    def format1_odometry_cdr(state, stamp_ns):
        odom = M.decode("nav_msgs/msg/Odometry", M.odometry_cdr(state, stamp_ns))
        v = odom.twist.twist.linear
        v.x, v.y, v.z = (float(c) for c in state[7:10])  # the map velocity, as airplay wrote it before
        return bytes(M.typestore().serialize_cdr(odom, "nav_msgs/msg/Odometry"))

    meta = {"scene": "indoor_1", "scene_dir": "/scenes/indoor_1", "split": "seen", "setting": "pointgoal", "seed": 0,
            "index": 0, "task_id": "t", "task": {"task_id": "t"}, "status": "success", "success": True, "steps": 40,
            "fps": 50, "source": "airplay collect", "airplay_version": "test"}
    states = {}
    for fmt, odometry in ((1, format1_odometry_cdr), (2, M.odometry_cdr)):
        recs, src = episode_records(40, seed=5, setting="pointgoal", odometry=odometry)
        writer = BagWriter(tmp_path / f"bags{fmt}" / "indoor_1" / "t", bag_format=None if fmt == 1 else fmt)
        for topic, stamp, cdr in recs:
            writer.write(topic, stamp, cdr)
        writer.set_metadata(meta)
        writer.close()
        export_bags([tmp_path / f"bags{fmt}"], tmp_path / f"out{fmt}", progress=False)
        states[fmt] = LeRobotDataset(tmp_path / f"out{fmt}" / "seen").episode(0)[STATE_KEY]
    want = src["state"][:40].astype(np.float32)
    assert np.array_equal(states[1], want)  # format 1: the map velocity as written
    assert np.array_equal(states[2][:, :7], want[:, :7]) and np.array_equal(states[2][:, 10:], want[:, 10:])
    np.testing.assert_array_max_ulp(states[2][:, 7:10], want[:, 7:10], maxulp=1)


def test_export_twice_gives_byte_identical_files(tmp_path):
    """Two exports of the same bags, each in a fresh process, write the same bytes (videos included).

    The processes run with different MALLOC_PERTURB_ (glibc fills new heap blocks with it), so
    a byte the encoder reads before writing it differs between them, as leftover heap does
    between real runs; 64x48 images are a size at which x264's macroblock-tree rate control
    does read such memory.
    """
    root = tmp_path / "bags"
    write_bags(root, BAG_PLAN[:3] + BAG_PLAN[4:])
    files = []
    for k, perturb in enumerate(("1", "170")):
        out = tmp_path / f"export_{k}"
        env = dict(os.environ, MALLOC_PERTURB_=perturb)
        proc = subprocess.run([sys.executable, "-m", "airplay.cli", "dataset", "export", str(root), str(out),
                               "--quiet"], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        files.append({str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
                      for p in sorted(out.rglob("*")) if p.is_file() and p.name != "export.json"})
    videos = [name for name in files[0] if name.endswith(".mp4")]
    assert len(videos) == 3  # seen rgb, unseen rgb and goal image
    assert files[0] == files[1]


def test_export_refuses_mixed_image_sizes_atomically(tmp_path):
    root = tmp_path / "bags"
    write_bags(root, BAG_PLAN[:1])
    recs, _ = episode_records(5, seed=5, setting="pointgoal")
    big = [(tp, s, M.image_rgb_cdr(smooth_frames(1, 0, 2 * H, 2 * W)[0], s) if tp == "/camera/image_raw" else c)
           for tp, s, c in recs]
    write_episode_bag(root, "urban_9", "urban_9-pointgoal-0-0", big,
                      metadata={"scene": "urban_9", "split": "seen", "setting": "pointgoal", "success": True,
                                "status": "success", "task_id": "urban_9-pointgoal-0-0"})
    with pytest.raises(ExportError, match=r"urban_9-pointgoal-0-0: images are 128x96"):
        export_bags([root], tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists() and not (tmp_path / ".out.partial").exists()
    with pytest.raises(ExportError, match="split 'train'"):
        export_bags([root], tmp_path / "out", split="train", progress=False)


def test_cli_dataset_export_and_stats(bags, tmp_path, capsys):
    from airplay.cli import main

    root, _ = bags
    out = tmp_path / "ds"
    assert main(["dataset", "export", str(root), str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "seen" in text and "2 of 7 bags skipped" in text
    png = tmp_path / "plots" / "actions.png"
    assert main(["dataset", "stats", str(out), "--plot", str(png)]) == 0
    text = capsys.readouterr().out
    assert "== seen" in text and "== unseen" in text and "episodes 3  frames 51" in text
    assert "scenes: indoor_1 (2), urban_2 (1)" in text
    seen = LeRobotDataset(out / "seen").column(ACTION_KEY)
    row = next(line for line in text.splitlines() if line.startswith("action") and " yaw_rate " in line)
    assert float(row.split()[2]) == pytest.approx(seen[:, 3].astype(np.float64).mean(), abs=1e-4)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert main(["dataset", "export", str(root), str(out), "--quiet"]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert main(["dataset", "stats", str(tmp_path / "nothing")]) == 2
