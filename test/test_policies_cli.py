"""``airplay train`` on a LeRobot v3 dataset written by airplay's LeRobot writer, then
``airplay eval --policy P --checkpoint DIR`` in-process, and the ``policy`` node with a
``checkpoint`` and ``execution_horizon`` giving the same episodes as in-process over real DDS.

Images are not rendered in the closed loop (``--no-images``: zeros, in both runtimes); what
is tested is the plumbing of learned policies, not their flying (see docs/policies.md, the benchmark).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch
from helpers.policy_data import TINY_SET, tiny_train_args, write_tiny_dataset

from airplay.cli import main

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return write_tiny_dataset(tmp_path_factory.mktemp("lerobot") / "tiny")


@pytest.fixture(scope="module")
def checkpoints(dataset, tmp_path_factory):
    out = {}
    for kind in TINY_SET:
        folder = tmp_path_factory.mktemp(f"ckpt-{kind}")
        args = tiny_train_args(kind, dataset, folder)
        assert main(args) == 0
        out[kind] = (folder, args)
    return out


def test_train_writes_a_checkpoint_and_resumes(checkpoints, capsys):
    from airplay.policies.checkpoint import read_config

    for kind, (folder, args) in checkpoints.items():
        cls, config = read_config(folder)
        assert cls.name == kind and config.image_size == 32 and config.goal == "point"
        assert (folder / "model.safetensors").is_file()
        assert len((folder / "train_log.csv").read_text().splitlines()) == 4  # header + steps 10, 20, 30
        capsys.readouterr()
        assert main(args) == 0  # all 30 updates done: resumes at the end, trains nothing
        assert "nothing to do" in capsys.readouterr().out


def test_train_on_several_datasets_and_on_the_first_episodes(dataset, tmp_path, capsys):
    base = ["train", "--policy", "cnn_bc", "--steps", "2", "--batch-size", "4", "--image-size", "32x32", "--threads", "1",
            "--no-progress", "--set", "backbone=small", "--set", "backbone_width=8"]
    assert main(base + ["--dataset", str(dataset), str(dataset), "--out", str(tmp_path / "two")]) == 0
    assert "4 episodes, 96 frames" in capsys.readouterr().out
    assert main(base + ["--dataset", str(dataset), str(dataset), "--max-episodes", "3", "--out",
                        str(tmp_path / "three")]) == 0
    assert "3 episodes, 72 frames" in capsys.readouterr().out


def test_train_rejects_a_bad_field_by_name(dataset, tmp_path):
    with pytest.raises(SystemExit, match="'n_heads'"):
        main(["train", "--policy", "act", "--dataset", str(dataset), "--out", str(tmp_path / "x"),
              "--set", "n_heads=7", "--no-progress"])
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("kind", ["cnn_bc", "act", "dp"])
def test_eval_inprocess_with_a_checkpoint(kind, checkpoints, indoor_1, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    folder, _ = checkpoints[kind]
    out = tmp_path / "results"
    assert main(["eval", "--policy", kind, "--checkpoint", str(folder), "--scenes", str(indoor_1),
                 "--episodes", "1", "--out", str(out), "--no-images", "--bootstrap", "10", "--no-progress"]) == 0
    line = json.loads((out / "episodes.jsonl").read_text().splitlines()[0])
    assert line["policy"] == kind and line["steps"] > 0
    meta = json.loads((out / "summary.json").read_text())["meta"]
    assert meta["policy"] == kind and meta["checkpoint"] == str(folder)


@pytest.mark.ros
@pytest.mark.slow
def test_policy_node_with_a_checkpoint_equals_inprocess(checkpoints, indoor_1, tmp_path, monkeypatch):
    """ACT with H = 4 through sim, renderer, policy and evaluator processes over DDS: the same
    episodes.jsonl as in-process."""
    pytest.importorskip("rclpy")
    from conftest import random_ros_domain
    from helpers.ros_nodes import logs, start_node, stop_all

    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    monkeypatch.setenv("ROS_DOMAIN_ID", random_ros_domain())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the same float sums as this process
    folder, _ = checkpoints["act"]
    episodes = 2
    common = {"use_sim_time": True, "scenes": str(indoor_1), "episodes": episodes, "seed": 0,
              "setting": "pointgoal"}
    out = tmp_path / "ros"
    procs = {}
    try:
        procs["sim"] = start_node("sim", {**common, "lockstep": True}, tmp_path)
        procs["renderer"] = start_node("renderer", {**common, "lockstep": True, "render_images": False}, tmp_path)
        procs["policy"] = start_node("policy", {**common, "lockstep": True, "policy": "act",
                                                "checkpoint": str(folder), "execution_horizon": 4}, tmp_path)
        procs["evaluator"] = start_node("evaluator", {**common, "policy": "act", "out": str(out),
                                                      "render_images": False}, tmp_path)
        try:
            code = procs["evaluator"].wait(timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail("the evaluator did not finish in time\n" + logs(tmp_path))
        assert code == 0, logs(tmp_path)
    finally:
        stop_all(procs)
    inproc = tmp_path / "inproc"
    evaluate_inprocess(EvalConfig(scenes=[indoor_1], policy="act", episodes=episodes, render_images=False,
                                  checkpoint=str(folder), execution_horizon=4, bootstrap=10), inproc, progress=False)
    assert (out / "episodes.jsonl").read_text() == (inproc / "episodes.jsonl").read_text()
    steps = [json.loads(line)["steps"] for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(steps) == episodes and min(steps) > 8, steps  # more than two chunks executed


@pytest.mark.ros
def test_policy_node_rejects_a_missing_checkpoint(indoor_1, tmp_path, monkeypatch):
    pytest.importorskip("rclpy")
    from conftest import random_ros_domain
    from helpers.ros_nodes import start_node, stop_all

    monkeypatch.setenv("ROS_DOMAIN_ID", random_ros_domain())
    proc = start_node("policy", {"scenes": str(indoor_1), "episodes": 1, "policy": "dp"}, tmp_path)
    try:
        assert proc.wait(timeout=60) != 0
    finally:
        stop_all({"policy": proc})
    assert "parameter 'checkpoint'" in (tmp_path / "policy.log").read_text()


@pytest.mark.ros
@pytest.mark.slow
def test_eval_ros_runtime_with_a_checkpoint_equals_inprocess(checkpoints, indoor_1, tmp_path, monkeypatch):
    """``airplay eval --runtime ros --policy cnn_bc --checkpoint DIR`` (the launch arguments
    checkpoint:= and execution_horizon:= through graph.py to the policy node): the same
    episodes.jsonl as ``--runtime inprocess``, and the checkpoint in both summaries."""
    pytest.importorskip("rclpy")
    from conftest import random_ros_domain

    monkeypatch.setenv("ROS_DOMAIN_ID", random_ros_domain())
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", str(Path(__file__).parents[1] / "config/fastdds_localhost.xml"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the same float sums as this process
    folder, _ = checkpoints["cnn_bc"]
    common = ["eval", "--policy", "cnn_bc", "--checkpoint", str(folder), "--scenes", str(indoor_1),
              "--episodes", "2", "--no-images", "--bootstrap", "10", "--no-progress"]
    assert main([*common, "--runtime", "ros", "--out", str(tmp_path / "ros")]) == 0
    assert main([*common, "--runtime", "inprocess", "--out", str(tmp_path / "inproc")]) == 0
    ros, inproc = ((tmp_path / d / "episodes.jsonl").read_text() for d in ("ros", "inproc"))
    assert ros == inproc and len(ros.splitlines()) == 2
    assert min(json.loads(line)["steps"] for line in ros.splitlines()) > 1
    meta = json.loads((tmp_path / "ros" / "summary.json").read_text())["meta"]
    assert meta["runtime"] == "ros" and meta["policy"] == "cnn_bc" and meta["checkpoint"] == str(folder.resolve())


def test_decoded_frames_are_cached_and_equal_the_video(dataset, tmp_path, monkeypatch):
    """The second load reads the frame cache (no decoding) and gives the same episodes;
    a changed dataset gets a new cache key."""
    import numpy as np

    from airplay.policies import dataset as dataset_module
    from airplay.policies.dataset import frame_cache_dir, load_lerobot_episodes

    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    first, goal = load_lerobot_episodes(dataset, 32)
    assert (frame_cache_dir(dataset, 32) / "rgb.npy").is_file() and goal == "point"
    uncached, _ = load_lerobot_episodes(dataset, 32, cache=False)
    monkeypatch.setattr(dataset_module, "_write_frame_cache", lambda *a: pytest.fail("decoded again"))
    again, _ = load_lerobot_episodes(dataset, 32, max_episodes=1)
    assert len(again) == 1
    for a, b, c in zip(first, uncached, again):
        for field in ("rgb", "state", "action", "goal"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
            np.testing.assert_array_equal(getattr(a, field), getattr(c, field))
    assert frame_cache_dir(dataset, 32) != frame_cache_dir(dataset, 16)


def test_train_and_eval_a_waypoint_policy(dataset, indoor_1, tmp_path, monkeypatch, capsys):
    """``--set actions=waypoint`` trains on relative future poses and stores the tracker adapter;
    ``airplay eval`` flies it; eval-offline and dagger, defined for velocity commands, refuse it
    by name."""
    from airplay.policies.checkpoint import load_policy
    from airplay.policies.normalize import _name

    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "wp"
    assert main(["train", "--policy", "cnn_bc", "--dataset", str(dataset), "--out", str(folder), "--steps", "3",
                 "--batch-size", "4", "--image-size", "32x32", "--threads", "1", "--no-progress",
                 "--set", "backbone=small", "--set", "backbone_width=8", "--set", "actions=waypoint",
                 "--set", "chunk_size=6", "--set", "execution_horizon=3"]) == 0
    policy = load_policy(folder)
    assert (policy.config.actions, policy.config.adapter, policy.config.chunk_size) == ("waypoint", "tracker", 6)
    # normalization statistics of waypoints: positions within a few centimetres per period, not m/s
    assert float(policy.normalizer.stats[_name("action")].scale[:3].max()) < 0.5
    out = tmp_path / "results"
    assert main(["eval", "--policy", "cnn_bc", "--checkpoint", str(folder), "--scenes", str(indoor_1),
                 "--episodes", "1", "--out", str(out), "--no-images", "--bootstrap", "10", "--no-progress"]) == 0
    assert json.loads((out / "episodes.jsonl").read_text().splitlines()[0])["steps"] > 0
    capsys.readouterr()
    assert main(["eval-offline", "--checkpoint", str(folder), "--dataset", str(dataset)]) == 2
    assert "predicts 'waypoint' actions" in capsys.readouterr().err
    assert main(["dagger", "--checkpoint", str(folder), "--dataset", str(dataset), "--scenes", str(indoor_1),
                 "--out", str(tmp_path / "dagger")]) == 2
    assert "predicts waypoints" in capsys.readouterr().err
    assert not (tmp_path / "dagger").exists()
