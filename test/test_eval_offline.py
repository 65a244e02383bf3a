"""Offline metrics (airplay.eval.offline) against hand-computed cases, and ``airplay eval-offline``
end to end on a tiny LeRobot dataset, checked against the policy acting through ``select_action``
on the same recorded observations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from airplay.eval import offline
from airplay.eval.offline import (anchor_commands, anchor_metrics, corner_anchors, dtw_banded, episode_anchors,
                                  hierarchical_mean, integrate_commands, lag_ade, prediction_frames,
                                  scene_percentile_mean, summarize)

DT = 0.02


def const(cmd, k=10, n=1):
    return np.tile(np.asarray(cmd, float), (n, k, 1))


def test_integration_moves_in_the_heading_frame_then_turns():
    pos, yaw = integrate_commands(np.array([[1.0, 0, 0, (math.pi / 2) / DT], [1.0, 0, 0, 0], [0, 1.0, 0.5, 0]]))
    # control 0: 2 cm forward (x), then a quarter turn; control 1: "forward" is now +y; control 2: "left" is -x
    np.testing.assert_allclose(pos, [[0, 0, 0], [0.02, 0, 0], [0.02, 0.02, 0], [0.0, 0.02, 0.01]], atol=1e-12)
    np.testing.assert_allclose(yaw, [0, math.pi / 2, math.pi / 2, math.pi / 2])
    pos, _ = integrate_commands(const([1.0, 0, 0, 0], n=3))
    assert pos.shape == (3, 11, 3) and np.allclose(pos[:, -1], [0.2, 0, 0])


def test_identical_commands_score_zero():
    rng = np.random.default_rng(0)
    cmds = rng.uniform(-1, 1, (5, 10, 4))
    m = anchor_metrics(cmds, cmds)
    for key in ("ade_m", "fde_m", "yaw_err_rad", "dtw_m", "lateral_dir_err", "yaw_dir_err"):
        assert np.allclose(m[key], 0.0), key


def test_forward_against_hover_and_forward_against_left():
    m = anchor_metrics(const([1.0, 0, 0, 0]), const([0.0, 0, 0, 0]))
    # error at control k is 0.02 k m: ADE = 0.02 * mean(1..10) = 0.11 m, FDE 0.2 m
    assert m["ade_m"][0] == pytest.approx(0.11) and m["fde_m"][0] == pytest.approx(0.2)
    assert math.isnan(m["motion_dir_err_deg"][0])  # the recorded displacement is 0: no direction
    assert m["lateral_dir_err"][0] == 0 and m["yaw_dir_err"][0] == 0  # both "none"
    assert m["dtw_m"][0] == pytest.approx(0.11)  # monotone distances: the diagonal is the best path
    m = anchor_metrics(const([1.0, 0, 0, 0]), const([0.0, 1.0, 0, 0]))
    assert m["ade_m"][0] == pytest.approx(0.11 * math.sqrt(2)) and m["fde_m"][0] == pytest.approx(0.2 * math.sqrt(2))
    assert m["motion_dir_err_deg"][0] == pytest.approx(90.0)
    assert m["lateral_dir_err"][0] == 1  # none vs left


def test_yaw_error_is_wrapped_and_direction_classes_use_the_dead_band():
    m = anchor_metrics(const([0, 0, 0, 1.0]), const([0, 0, 0, -1.0]))
    assert m["yaw_err_rad"][0] == pytest.approx(0.4) and m["yaw_dir_err"][0] == 1
    m = anchor_metrics(const([0, 0, 0, 3.0 / 0.2]), const([0, 0, 0, -3.0 / 0.2]))  # +3 rad vs -3 rad
    assert m["yaw_err_rad"][0] == pytest.approx(2 * math.pi - 6.0)
    m = anchor_metrics(const([0, 0, 0, 0.05]), const([0, 0, 0, -0.05]))  # +-0.01 rad: both within 0.02
    assert m["yaw_dir_err"][0] == 0
    m = anchor_metrics(const([0, 0.05, 0, 0]), const([0, 0.15, 0, 0]))  # 1 cm (none) vs 3 cm (left)
    assert m["lateral_dir_err"][0] == 1


def test_banded_dtw_by_hand():
    a, b = np.array([[0.0], [1.0], [2.0], [3.0]]), np.array([[0.0], [0.0], [1.0], [2.0]])
    assert dtw_banded(a, b, band=1) == pytest.approx(1.0)  # (0,0) (0,0) (1,1) (2,2) (3,2)
    assert dtw_banded(a, b, band=0) == pytest.approx(3.0)  # lock-step: 0 + 1 + 1 + 1
    assert dtw_banded(a, b) == pytest.approx(1.0)  # default band max(1, ceil(0.4)) = 1


def test_hierarchical_mean_weights_trajectories_then_scenes():
    values = np.array([1.0, 3.0, 10.0, 0.0, 0.0, 0.0, 4.0, np.nan])
    scenes = np.array(["A", "A", "A", "B", "B", "B", "B", "B"])
    trajs = np.array([1, 1, 2, 3, 3, 3, 3, 3])
    # A: trajectories 2 and 10 -> 6; B: 1 (the NaN is left out) -> (6 + 1) / 2
    assert hierarchical_mean(values, scenes, trajs) == pytest.approx(3.5)
    assert math.isnan(hierarchical_mean(np.array([np.nan]), np.array(["A"]), np.array([0])))


def test_p95_per_scene_then_averaged():
    values = np.concatenate([np.arange(1.0, 101.0), [2.0, 4.0]])
    scenes = np.array(["A"] * 100 + ["B"] * 2)
    assert scene_percentile_mean(values, scenes) == pytest.approx((95.05 + 3.9) / 2)


def test_corner_anchors_on_a_right_angle():
    # 1 m/s along x for 30 frames (0.02 m each), then along y for 100 frames
    steps = np.array([[0.02, 0, 0]] * 30 + [[0, 0.02, 0]] * 100)
    pos = np.concatenate([[[0.0, 0, 0]], np.cumsum(steps, 0)])
    anchors = np.array([0, 20, 40, 100])
    # 0: first 0.1 s along x, last along y -> corner; 20: likewise; 40: all along y; 100: no second left
    assert corner_anchors(pos, anchors).tolist() == [True, True, False, False]
    hover = np.zeros((80, 3))
    assert corner_anchors(hover, np.array([0])).tolist() == [False]  # displacements under 2 cm


def test_anchor_commands_reexecute_every_h_controls():
    chunks = {f: np.arange(8)[:, None] * np.ones(4) + 100 * f for f in range(30)}  # value = 100 f + j
    cmds = anchor_commands(chunks, np.array([3]), horizon=10, execution_horizon=4)
    assert cmds[0, :, 0].tolist() == [300, 301, 302, 303, 700, 701, 702, 703, 1100, 1101]
    assert prediction_frames(np.array([3, 5]), 10, 4).tolist() == [3, 5, 7, 9, 11, 13]
    assert prediction_frames(np.array([0]), 10, 50).tolist() == [0]
    assert episode_anchors(24, 10).tolist() == list(range(14)) and len(episode_anchors(10, 10)) == 0
    with pytest.raises(ValueError, match="fewer than H"):
        anchor_commands({0: np.zeros((2, 4))}, np.array([0]), horizon=10, execution_horizon=4)


def test_lag_is_zero_when_the_states_follow_the_commands_exactly():
    cmds = np.tile([1.0, 0.5, 0.1, 0.8], (40, 1))
    local, yaw = integrate_commands(cmds[None])
    yaw0, origin = 0.7, np.array([3.0, -2.0, 1.5])
    c, s = math.cos(yaw0), math.sin(yaw0)
    positions = origin + local[0] @ np.array([[c, s, 0], [-s, c, 0], [0, 0, 1]])  # heading frame -> map
    yaws = yaw0 + yaw[0]
    anchors = np.array([0, 5, 20])
    recorded = np.stack([cmds[t:t + 10] for t in anchors])
    assert np.allclose(lag_ade(recorded, positions, yaws, anchors), 0.0, atol=1e-12)


def test_summarize_reports_every_metric_in_its_unit():
    pred, rec = const([1.0, 0, 0, 0], n=4), const([0.0, 0, 0, 0], n=4)
    per = anchor_metrics(pred, rec)
    corner = np.array([True, False, False, False])
    out = summarize(per, np.array(["A", "A", "B", "B"]), np.array([0, 0, 1, 1]), corner)
    assert set(offline.METRICS) <= set(out)
    assert out["ade_cm"] == pytest.approx(11.0) and out["fde_cm"] == pytest.approx(20.0)
    assert out["p95_cm"] == pytest.approx(20.0) and out["corner_fde_cm"] == pytest.approx(20.0)
    assert out["yaw_err_deg"] == 0 and out["lateral_dir_err_pct"] == 0 and math.isnan(out["motion_dir_err_deg"])
    assert math.isnan(summarize(per, np.array(["A"] * 4), np.zeros(4), np.zeros(4, bool))["corner_fde_cm"])


# -- the command, end to end ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A 3-episode LeRobot dataset (scenes a, a, b) and tiny CNN-BC and ACT checkpoints trained on it."""
    import torch
    from policy_data import tiny_episodes

    from airplay.cli import main
    from airplay.data.lerobot import LeRobotWriter

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("offline") / "held_out"
    with LeRobotWriter(root, image_shape=(32, 32)) as writer:
        for ep, scene in zip(tiny_episodes(3, length=30), ("a", "a", "b")):
            writer.add_episode(ep.rgb, ep.state, ep.action, goal=ep.goal, meta={"scene": scene})
    sets = {"cnn_bc": ["backbone=small", "backbone_width=8", "image_features=32", "hidden_dim=64"],
            "act": ["backbone=small", "backbone_width=8", "chunk_size=8", "execution_horizon=4", "dim_model=32",
                    "n_heads=4", "dim_feedforward=64", "n_encoder_layers=1", "n_vae_encoder_layers=1", "latent_dim=8"]}
    ckpts = {}
    for kind, fields in sets.items():
        out = tmp_path_factory.mktemp(f"offline-{kind}")
        args = ["train", "--policy", kind, "--dataset", str(root), "--out", str(out), "--steps", "20", "--batch-size",
                "8", "--image-size", "32", "--threads", "1", "--save-every", "0", "--no-progress"]
        for item in fields:
            args += ["--set", item]
        assert main(args) == 0
        ckpts[kind] = out
    return root, ckpts


@pytest.mark.parametrize("kind", ["cnn_bc", "act"])
def test_eval_offline_equals_the_policy_acting_on_the_recorded_observations(kind, tiny, capsys):
    """The command's ADE/FDE/yaw error equal those of the commands that ``select_action`` gives
    on the recorded observations from each anchor (after a reset there): CNN-BC acts on every
    frame, ACT (H = 4) executes 4 controls of each chunk, so frames t, t + 4, t + 8 predict."""
    from policy_data import env_obs

    from airplay.cli import main
    from airplay.policies.checkpoint import load_policy
    from airplay.policies.dataset import load_lerobot_episodes

    root, ckpts = tiny
    assert main(["eval-offline", "--checkpoint", str(ckpts[kind]), "--dataset", str(root), "--json",
                 "--threads", "1"]) == 0
    result = json.loads(capsys.readouterr().out)
    overall = result["overall"]
    assert overall["trajectories"] == 3 and overall["anchors"] == 3 * (30 - 10) and overall["scenes"] == 2
    assert set(result["per_scene"]) == {"a", "b"} and result["per_scene"]["a"]["trajectories"] == 2
    assert result["meta"]["execution_horizon"] == (1 if kind == "cnn_bc" else 4)

    policy = load_policy(ckpts[kind])
    episodes, _ = load_lerobot_episodes(root, 32, "point")
    per_scene = {}
    for e, (ep, scene) in enumerate(zip(episodes, ("a", "a", "b"))):
        pred, rec = [], []
        for t in range(30 - 10):
            policy.reset()
            pred.append([policy.select_action(env_obs(ep, t + k)) for k in range(10)])
            rec.append(ep.action[t:t + 10])
        m = anchor_metrics(np.array(pred, float), np.array(rec, float))
        per_scene.setdefault(scene, []).append({k: float(np.mean(v)) for k, v in m.items()})
    ade = np.mean([np.mean([t["ade_m"] for t in trajs]) for trajs in per_scene.values()]) * 100
    fde = np.mean([np.mean([t["fde_m"] for t in trajs]) for trajs in per_scene.values()]) * 100
    yaw = np.mean([np.mean([t["yaw_err_rad"] for t in trajs]) for trajs in per_scene.values()]) * 180 / math.pi
    assert overall["ade_cm"] == pytest.approx(ade, abs=2e-4) and overall["fde_cm"] == pytest.approx(fde, abs=2e-4)
    assert overall["yaw_err_deg"] == pytest.approx(yaw, abs=2e-4)
    assert overall["ade_cm"] > 0 and overall["lag_ade_cm"] >= 0


def test_eval_offline_table_and_errors(tiny, capsys, tmp_path):
    from airplay.cli import main

    root, ckpts = tiny
    out = tmp_path / "offline.json"
    assert main(["eval-offline", "--checkpoint", str(ckpts["cnn_bc"]), "--dataset", str(root), "--stride", "5",
                 "--out", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "ADE cm" in text and "FDE cm" in text and "P95 cm" in text and "all (equal weight)" in text
    assert json.loads(out.read_text())["overall"]["anchors"] == 3 * 4  # anchors 0, 5, 10, 15 of each episode
    assert main(["eval-offline", "--checkpoint", str(tmp_path), "--dataset", str(root)]) == 2
    assert "config.json" in capsys.readouterr().err
    assert main(["eval-offline", "--checkpoint", str(ckpts["cnn_bc"]), "--dataset", str(tmp_path)]) == 2
    assert "info.json" in capsys.readouterr().err
