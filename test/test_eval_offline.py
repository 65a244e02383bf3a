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
from airplay.policies.motion import copycat_commands

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
    """A 3-episode LeRobot dataset (scenes a, a, b) and tiny CNN-BC (two: reading no state, the
    default, and the full state) and ACT checkpoints trained on it."""
    import torch
    from helpers.policy_data import tiny_episodes

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
    # A CNN-BC that reads the full state (the default reads none), for the rollout test.
    sets["cnn_bc_state"] = sets["cnn_bc"] + ["state_features=full"]
    ckpts = {}
    for kind, fields in sets.items():
        out = tmp_path_factory.mktemp(f"offline-{kind}")
        args = ["train", "--policy", kind.removesuffix("_state"), "--dataset", str(root), "--out", str(out),
                "--steps", "20", "--batch-size", "8", "--image-size", "32x32", "--threads", "1",
                "--save-every", "0", "--no-progress"]
        for item in fields:
            args += ["--set", item]
        assert main(args) == 0
        ckpts[kind] = out
    return root, ckpts


@pytest.mark.parametrize("rollout", ["reobserve", "open-loop"])
@pytest.mark.parametrize("kind", ["cnn_bc", "act"])
def test_eval_offline_equals_the_policy_acting_on_the_recorded_observations(kind, rollout, tiny, capsys):
    """reobserve: the command's ADE/FDE/yaw error equal those of the commands that
    ``select_action`` gives on the recorded observations from each anchor (after a reset there):
    CNN-BC acts on every frame, ACT (H = 4) executes 4 controls of each chunk, so frames t, t + 4,
    t + 8 predict. open-loop: those of the one chunk predicted at the anchor (CNN-BC: 1 command,
    ACT: 8), its last command held up to 10."""
    from helpers.policy_data import env_obs

    from airplay.cli import main
    from airplay.policies.checkpoint import load_policy
    from airplay.policies.dataset import load_lerobot_episodes

    root, ckpts = tiny
    assert main(["eval-offline", "--checkpoint", str(ckpts[kind]), "--dataset", str(root), "--json",
                 "--threads", "1", "--rollout", rollout]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["meta"]["rollout"] == rollout
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
            if rollout == "reobserve":
                pred.append([policy.select_action(env_obs(ep, t + k)) for k in range(10)])
            else:
                policy.observe(env_obs(ep, t))
                chunk = policy.predict_action_chunk(env_obs(ep, t))
                pred.append([chunk[min(k, len(chunk) - 1)] for k in range(10)])
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


# -- baselines, rollouts, offline vs closed loop ----------------------------------------------------
def level_quat(yaw):
    yaw = np.asarray(yaw, float)
    return np.stack([np.zeros_like(yaw), np.zeros_like(yaw), np.sin(yaw / 2), np.cos(yaw / 2)], -1)


def test_copycat_turns_the_map_velocity_into_the_heading_frame():
    rng = np.random.default_rng(1)
    yaw = rng.uniform(-3, 3, 20)
    v_head, rate = rng.uniform(-1, 1, (20, 3)), rng.uniform(-1, 1, 20)
    c, s = np.cos(yaw), np.sin(yaw)
    v_map = np.stack([c * v_head[:, 0] - s * v_head[:, 1], s * v_head[:, 0] + c * v_head[:, 1], v_head[:, 2]], 1)
    states = np.concatenate([rng.uniform(-5, 5, (20, 3)), level_quat(yaw), v_map, np.zeros((20, 2)), rate[:, None]], 1)
    np.testing.assert_allclose(copycat_commands(states), np.concatenate([v_head, rate[:, None]], 1),
                               atol=1e-12)
    # Tilted by 0.3 rad of roll, turning about the world z axis at 0.7 rad/s: body rates (0, sin, cos) * 0.7.
    q = np.array([math.sin(0.15), 0, 0, math.cos(0.15)])  # roll about x, yaw 0
    state = np.concatenate([np.zeros(3), q, [1.0, 0, 0], 0.7 * np.array([0, math.sin(0.3), math.cos(0.3)])])
    np.testing.assert_allclose(copycat_commands(state), [1.0, 0, 0, 0.7], atol=1e-12)
    with pytest.raises(ValueError, match="13"):
        copycat_commands(np.zeros((2, 12)))


def test_open_loop_reads_only_the_anchor_chunk_and_holds_its_last_command():
    chunks = {3: np.arange(4)[:, None] * np.ones(4), 9: np.full((12, 4), 5.0)}  # no other frame exists
    cmds = offline.open_loop_commands(chunks, np.array([3, 9]), horizon=6)
    assert cmds[0, :, 0].tolist() == [0, 1, 2, 3, 3, 3] and cmds[1, :, 0].tolist() == [5.0] * 6
    assert offline.rollout_frames(np.array([3, 9]), "open-loop", 10, 1).tolist() == [3, 9]
    assert offline.rollout_frames(np.array([3]), "reobserve", 10, 4).tolist() == [3, 7, 11]
    with pytest.raises(KeyError):
        offline.rollout_commands(chunks, np.array([3]), "reobserve", horizon=6, execution_horizon=1)
    with pytest.raises(ValueError, match="rollout"):
        offline.rollout_commands(chunks, np.array([3]), "closed")


def test_hold_last_held_chunks_and_skill():
    a = np.arange(12.0).reshape(3, 4)
    assert offline.hold_last_commands(a).tolist() == [[0, 0, 0, 0], [0, 1, 2, 3], [4, 5, 6, 7]]
    assert offline.HeldChunks(a, 3)[2].tolist() == [[8, 9, 10, 11]] * 3
    assert offline.skill(1.0, 4.0) == (0.25, 0.75) and offline.skill(2.0, 1.0) == (2.0, -1.0)
    assert all(math.isnan(v) for v in offline.skill(1.0, 0.0) + offline.skill(None, 1.0))


def test_spearman_of_monotone_and_tied_sets():
    x = np.array([0.5, 1.0, 2.0, 7.0, 30.0])
    assert offline.spearman(x, x ** 3 + 1) == pytest.approx(1.0)  # monotone, not linear
    assert offline.spearman(x, -np.log(x)) == pytest.approx(-1.0)
    assert offline.average_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert math.isnan(offline.spearman(x, np.ones(5)))  # constant: undefined
    b = offline.spearman_bootstrap(x, x ** 3 + 1, bootstrap=200, seed=0)
    assert b["rho"] == pytest.approx(1.0) and b["ci95"] == pytest.approx([1.0, 1.0]) and b["n"] == 5
    assert all(math.isnan(v) for v in offline.spearman_bootstrap(x, x, bootstrap=0)["ci95"])


def write_dataset(root, episodes, scenes):
    from airplay.data.lerobot import LeRobotWriter

    with LeRobotWriter(root, image_shape=(32, 32)) as writer:
        for ep, scene in zip(episodes, scenes):
            writer.add_episode(ep.rgb, ep.state, ep.action, goal=ep.goal, meta={"scene": scene})
    return root


def circle_episodes(n=2, length=30):
    """Flights at constant heading-frame commands (circles): states consistent with the commands,
    map velocity = the command rotated by the yaw, body rates (0, 0, yaw rate)."""
    from helpers.policy_data import tiny_episodes

    eps = tiny_episodes(n, length=length)
    for e, ep in enumerate(eps):
        cmd = np.array([0.8 + 0.2 * e, 0.1, -0.05, 0.6 - 0.9 * e])
        action = np.tile(cmd, (length, 1))
        pos, yaw = integrate_commands(action[None])
        yaw = yaw[0, :length] + 0.4
        c, s = np.cos(yaw), np.sin(yaw)
        v_map = np.stack([c * cmd[0] - s * cmd[1], s * cmd[0] + c * cmd[1], np.full(length, cmd[2])], 1)
        state = np.concatenate([pos[0, :length], level_quat(yaw), v_map, np.zeros((length, 2)),
                                np.full((length, 1), cmd[3])], 1)
        ep.state, ep.action = state.astype(np.float32), action.astype(np.float32)
    return eps


@pytest.mark.parametrize("rollout", ["open-loop", "reobserve"])
def test_copycat_scores_zero_when_the_commands_are_the_current_motion(rollout, tiny, tmp_path, capsys):
    from airplay.cli import main

    _, ckpts = tiny
    root = write_dataset(tmp_path / "circles", circle_episodes(), ("a", "b"))
    assert main(["eval-offline", "--checkpoint", str(ckpts["cnn_bc"]), "--dataset", str(root), "--json",
                 "--threads", "1", "--rollout", rollout]) == 0
    result = json.loads(capsys.readouterr().out)
    base = result["baselines"]
    assert set(base) == {"copycat", "zero", "hold_last"}
    copycat = base["copycat"]["overall"]
    assert copycat["ade_cm"] < 1e-3 and copycat["fde_cm"] < 1e-3 and copycat["yaw_err_deg"] < 1e-3
    assert copycat["anchors"] == result["overall"]["anchors"] == 2 * 20
    assert base["zero"]["overall"]["ade_cm"] > 5  # 0.8-1 m/s over 0.2 s
    assert 0 < base["hold_last"]["overall"]["ade_cm"] < base["zero"]["overall"]["ade_cm"]  # 0 only at frame 0
    assert set(base["copycat"]["per_scene"]) == {"a", "b"}
    # skill = 1 - policy / baseline; against a copycat error of (rounded) 0 it is undefined.
    assert base["zero"]["ratio"]["ade"] == pytest.approx(result["overall"]["ade_cm"]
                                                         / base["zero"]["overall"]["ade_cm"], abs=1e-3)
    assert base["zero"]["skill"]["fde"] == pytest.approx(1 - result["overall"]["fde_cm"]
                                                         / base["zero"]["overall"]["fde_cm"], abs=1e-3)
    if copycat["ade_cm"] == 0:
        assert base["copycat"]["skill"]["ade"] is None and base["copycat"]["ratio"]["ade"] is None
    else:
        assert base["copycat"]["skill"]["ade"] < 0  # the policy is worse than copying


def test_open_loop_does_not_read_states_after_the_anchor(tiny, tmp_path, capsys):
    """Anchors 0 and 10 (stride 10 on 30 frames): corrupting the states of every other frame
    leaves the open-loop figures of a state-reading CNN-BC and of copycat unchanged (the recorded
    commands are kept), while their reobserve figures (predicted on frames t+1..t+9) change."""
    from helpers.policy_data import tiny_episodes

    from airplay.cli import main

    _, ckpts = tiny
    eps = tiny_episodes(3, length=30)
    clean = write_dataset(tmp_path / "clean", eps, ("a", "a", "b"))
    rng = np.random.default_rng(5)
    for ep in eps:
        later = np.setdiff1d(np.arange(30), [0, 10])
        ep.state[later] = rng.uniform(-20, 20, (len(later), 13)).astype(np.float32)
    bad = write_dataset(tmp_path / "corrupt", eps, ("a", "a", "b"))

    def run(root, rollout):
        assert main(["eval-offline", "--checkpoint", str(ckpts["cnn_bc_state"]), "--dataset", str(root), "--json",
                     "--threads", "1", "--stride", "10", "--rollout", rollout]) == 0
        return json.loads(capsys.readouterr().out)

    a, b = run(clean, "open-loop"), run(bad, "open-loop")
    assert a["overall"]["anchors"] == 3 * 2
    keys = [k for k in offline.METRICS if k != "corner_fde_cm"]
    for k in keys:
        assert a["overall"][k] == b["overall"][k], k
        assert a["baselines"]["copycat"]["overall"][k] == b["baselines"]["copycat"]["overall"][k], k
    assert a["overall"]["lag_ade_cm"] != b["overall"]["lag_ade_cm"]  # the recorded positions did change
    a, b = run(clean, "reobserve"), run(bad, "reobserve")
    assert a["overall"]["ade_cm"] != b["overall"]["ade_cm"]
    assert a["baselines"]["copycat"]["overall"]["ade_cm"] != b["baselines"]["copycat"]["overall"]["ade_cm"]


def test_eval_offline_table_prints_the_baselines_and_skill(tiny, capsys):
    from airplay.cli import main

    root, ckpts = tiny
    assert main(["eval-offline", "--checkpoint", str(ckpts["act"]), "--dataset", str(root), "--stride", "5",
                 "--threads", "1", "--no-progress"]) == 0
    text = capsys.readouterr().out
    print(text)
    for name in ("copycat", "zero", "hold_last"):
        assert f"baseline {name}" in text and f"skill vs {name}" in text
    assert "rollout open-loop" in text


def fake_closed_loop(out, sr, cr, n=10):
    from airplay.eval.aggregate import aggregate
    from airplay.eval.metrics import EpisodeResult
    from airplay.eval.results import write_results

    results = []
    for i in range(n):
        status = "success" if i < round(sr * n) else "collision" if i < round((sr + cr) * n) else "timeout"
        results.append(EpisodeResult(scene="s", task_id=i, setting="seen", status=status, steps=100,
                                     path_length_m=5.0, shortest_length_m=5.0, euclidean_distance_m=4.0,
                                     final_distance_m=0.5 if status == "success" else 3.0, min_distance_m=0.5,
                                     time_to_success_s=2.0 if status == "success" else None, seed=i, policy="p"))
    write_results(out, results, aggregate(results, bootstrap=0))
    return out


def test_eval_offline_relate_ranks_offline_errors_against_closed_loop(tmp_path, capsys):
    from airplay.cli import main

    args = ["eval-offline-relate", "--bootstrap", "200"]
    # Lower ADE, higher SR and lower CR: a perfectly monotone set of 4 policies.
    for i, (ade, sr, cr) in enumerate([(0.7, 0.6, 0.1), (1.4, 0.5, 0.2), (3.0, 0.3, 0.3), (9.0, 0.0, 0.5)]):
        off = tmp_path / f"off{i}.json"
        off.write_text(json.dumps({"overall": {"ade_cm": ade, "fde_cm": 2 * ade + i},
                                   "baselines": {"copycat": {"skill": {"ade": 1 - ade / 1.4}}},
                                   "meta": {"policy": f"p{i}", "rollout": "open-loop"}}))
        args += ["--pair", str(off), str(fake_closed_loop(tmp_path / f"eval{i}", sr, cr))]
    assert main(args + ["--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    corr = result["correlations"]
    assert corr["ade_cm"]["sr"]["rho"] == pytest.approx(-1.0) and corr["ade_cm"]["cr"]["rho"] == pytest.approx(1.0)
    assert corr["copycat_skill_ade"]["sr"]["rho"] == pytest.approx(1.0)
    assert corr["fde_cm"]["sr"]["ci95"] == pytest.approx([-1.0, -1.0])
    assert [r["sr"] for r in result["rows"]] == pytest.approx([0.6, 0.5, 0.3, 0.0])
    assert main(args) == 0
    text = capsys.readouterr().out
    print(text)
    assert "Spearman rho" in text and "-1.00 [-1.00, -1.00]" in text
    assert main(args[:3] + args[3:9]) == 2  # two pairs only
    assert "at least 3" in capsys.readouterr().err


def _offline_json(path, i, ade, checkpoint=None):
    metrics = {"ade_cm": ade, "fde_cm": 2 * ade + i, "p95_cm": 3 * ade, "yaw_err_deg": 10 * ade,
               "corner_fde_cm": 4 * ade, "motion_dir_err_deg": 5.0, "dtw_cm": ade, "lateral_dir_err_pct": 1.0,
               "yaw_dir_err_pct": 1.0}
    meta = {"policy": f"p{i}", "rollout": "open-loop", **({"checkpoint": str(checkpoint)} if checkpoint else {})}
    path.write_text(json.dumps({"overall": metrics, "baselines": {"copycat": {"skill": {"ade": 1 - ade / 1.4}}},
                                "meta": meta}))
    return path


def test_offline_vs_closed_writes_table_csv_json_and_scatter(tmp_path, capsys):
    import csv

    from PIL import Image

    from airplay.cli import main

    args = ["offline-vs-closed", "--bootstrap", "200", "--out", str(tmp_path / "relate")]
    for i, (ade, sr, cr) in enumerate([(0.7, 0.6, 0.1), (1.4, 0.5, 0.2), (3.0, 0.3, 0.3), (9.0, 0.0, 0.5)]):
        args += ["--pair", str(_offline_json(tmp_path / f"off{i}.json", i, ade)),
                 str(fake_closed_loop(tmp_path / f"eval{i}", sr, cr))]
    assert main(args) == 0
    text = capsys.readouterr().out
    print(text)
    assert "corner FDE cm" in text and "-1.00 [-1.00, -1.00]" in text
    result = json.loads((tmp_path / "relate" / "relate.json").read_text())
    for key in ("ade_cm", "fde_cm", "p95_cm", "yaw_err_deg", "corner_fde_cm"):  # all monotone in ADE
        assert result["correlations"][key]["sr"]["rho"] == pytest.approx(-1.0)
        assert result["correlations"][key]["cr"]["rho"] == pytest.approx(1.0)
    assert result["correlations"]["dtw_cm"]["sr"]["n"] == 4
    assert result["correlations"]["motion_dir_err_deg"]["sr"]["rho"] is None  # constant: undefined
    assert [r["name"] for r in result["rows"]] == ["off0", "off1", "off2", "off3"]
    with open(tmp_path / "relate" / "relate.csv") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["sr"]) for r in rows] == pytest.approx([0.6, 0.5, 0.3, 0.0]) and float(rows[3]["ade_cm"]) == 9.0
    with open(tmp_path / "relate" / "correlations.csv") as f:
        corr = list(csv.DictReader(f))
    assert len(corr) == 10 * 2 and corr[0]["offline"] == "ade_cm" and float(corr[0]["rho"]) == pytest.approx(-1.0)
    png = Image.open(tmp_path / "relate" / "scatter.png")
    assert png.size[0] >= 800 and png.size[1] >= 1200


def test_offline_vs_closed_labels_generic_checkpoint_folders_with_their_parent(tmp_path, capsys):
    """A DAgger round's ``iter_02/checkpoint`` is named so, not ``checkpoint``, beside ``cnn_bc``."""
    from airplay.cli import main
    from airplay.policies.checkpoint import checkpoint_label

    assert checkpoint_label("out/dagger/iter_02/checkpoint") == "iter_02/checkpoint"
    assert checkpoint_label("out/train/cnn_bc") == "cnn_bc"
    args = ["offline-vs-closed", "--bootstrap", "0", "--out", str(tmp_path / "relate")]
    folders = [tmp_path / "cnn_bc", tmp_path / "iter_01" / "checkpoint", tmp_path / "iter_02" / "checkpoint"]
    for i, (folder, ade, sr) in enumerate(zip(folders, (0.7, 1.4, 3.0), (0.6, 0.5, 0.3))):
        args += ["--pair", str(_offline_json(tmp_path / f"off{i}.json", i, ade, checkpoint=folder)),
                 str(fake_closed_loop(tmp_path / f"eval{i}", sr, 0.1))]
    assert main(args) == 0
    capsys.readouterr()
    result = json.loads((tmp_path / "relate" / "relate.json").read_text())
    assert [r["name"] for r in result["rows"]] == ["cnn_bc", "iter_01/checkpoint", "iter_02/checkpoint"]


def test_offline_vs_closed_names_bad_inputs(tmp_path, capsys):
    from airplay.cli import main

    pairs = [["--pair", str(_offline_json(tmp_path / f"off{i}.json", i, 1.0 + i, checkpoint=tmp_path / f"ck{i}")),
              str(fake_closed_loop(tmp_path / f"eval{i}", 0.5, 0.1))] for i in range(3)]
    summary = json.loads((tmp_path / "eval2" / "summary.json").read_text())
    summary["meta"]["checkpoint"] = str(tmp_path / "ck9")
    (tmp_path / "eval2" / "summary.json").write_text(json.dumps(summary))
    assert main(["offline-vs-closed", *sum(pairs, [])]) == 2
    err = capsys.readouterr().err
    assert "off2.json (meta.checkpoint" in err and "are results of different checkpoints" in err
    (tmp_path / "bad.json").write_text("{}")
    assert main(["offline-vs-closed", *sum(pairs[:2], []), "--pair", str(tmp_path / "bad.json"),
                 str(tmp_path / "eval0")]) == 2
    assert f"{tmp_path / 'bad.json'}: not an eval-offline result" in capsys.readouterr().err
    assert main(["offline-vs-closed", *sum(pairs[:2], []), "--pair", str(tmp_path / "off0.json"),
                 str(tmp_path / "nonesuch")]) == 2
    assert "nonesuch: cannot read the closed-loop summary.json" in capsys.readouterr().err
    assert main(["offline-vs-closed", "--checkpoints", str(tmp_path), "x", "y", "--dataset", str(tmp_path),
                 "--scenes", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert f"--checkpoints {tmp_path}:" in capsys.readouterr().err


@pytest.mark.slow
def test_offline_vs_closed_runs_both_for_tiny_checkpoints(tiny, tmp_path, capsys, monkeypatch):
    """--checkpoints: eval-offline on the tiny dataset and eval on a tiny scene for each of the
    three tiny checkpoints, then the relation; a rerun reuses both."""
    from helpers.scene_factory import write_tiny_scene

    from airplay.cli import main

    root, ckpts = tiny
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    write_tiny_scene(tmp_path / "scenes" / "tiny")
    out = tmp_path / "relate"
    args = ["offline-vs-closed", "--checkpoints", *(str(ckpts[k]) for k in ("cnn_bc", "act", "cnn_bc_state")),
            "--dataset", str(root), "--scenes", str(tmp_path / "scenes"), "--episodes", "1", "--stride", "5",
            "--backend", "cpu", "--bootstrap", "100", "--out", str(out), "--no-progress"]
    assert main(args) == 0
    text = capsys.readouterr().out
    print(text)
    result = json.loads((out / "relate.json").read_text())
    assert len(result["rows"]) == 3 and result["meta"]["checkpoints"] == 3
    for row, kind in zip(result["rows"], ("cnn_bc", "act", "cnn_bc_state")):
        off = json.loads((out / "runs" / ckpts[kind].name / "offline.json").read_text())
        assert row["ade_cm"] == off["overall"]["ade_cm"] and row["checkpoint"] == str(ckpts[kind])
        summary = json.loads((out / "runs" / ckpts[kind].name / "eval" / "summary.json").read_text())
        assert row["sr"] == summary["overall"]["sr"]["mean"] and summary["episodes"] == 1
    assert (out / "scatter.png").is_file() and "Spearman rho" in text
    assert main(args) == 0  # the rerun flies nothing and predicts nothing
    text = capsys.readouterr().out
    assert text.count("offline errors: reusing") == 3 and text.count("1 of 1 episodes already flown") == 3
    assert json.loads((out / "relate.json").read_text()) == result
