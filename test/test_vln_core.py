"""AirVLN-R1 parts without a model: parsing, prompt sampling, actions, executor, rewards, episodes."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from airplay.vln.actions import ActionSpace, load_vln_config, rollout
from airplay.vln.parsing import parse_actions
from airplay.vln.prompt import PromptBuilder, history_indices, progressive_interval_offsets
from airplay.yaml_config import ConfigError


@pytest.mark.parametrize("text,expected", [
    ('["MOVE_FORWARD", "TURN_LEFT"]', ("MOVE_FORWARD", "TURN_LEFT")),
    ('```json\n["move_forward", "turn right"]\n```', ("MOVE_FORWARD", "TURN_RIGHT")),
    ("<think>the door is left</think>Actions: ['TURN_LEFT', 'forward'] done", ("TURN_LEFT", "MOVE_FORWARD")),
    ("[MOVE_FORWARD, STOP, TURN_LEFT]", ("MOVE_FORWARD", "STOP")),
    ('{"actions": ["STOP"]}', ("STOP",)),
    ("<answer>[\"TURN-LEFT\"]</answer>", ("TURN_LEFT",)),
])
def test_parse_accepts_what_models_write(text, expected):
    r = parse_actions(text)
    assert r.ok and r.actions == expected


@pytest.mark.parametrize("text,why", [
    ("", "empty"), ("I will fly forward now.", "no JSON list"), ("[]", "empty action list"),
    ('["MOVE_FORWARD", "JUMP"]', "unknown"), ('["ASCEND"]', "unknown or disabled"), ("[1, 2]", "not an action"),
    ('["MOVE_FORWARD"', "no JSON list"), ("\n\n\n", "empty"),
])
def test_parse_malformed_is_a_format_failure(text, why):
    r = parse_actions(text)
    assert not r.ok and r.actions == () and why in r.error


def test_parse_truncates_to_the_limit():
    r = parse_actions(json.dumps(["MOVE_FORWARD"] * 12), max_actions=8)
    assert r.ok and len(r.actions) == 8 and r.truncated


def test_progressive_interval_sampling():
    assert progressive_interval_offsets(4) == (-7, -4, -2, -1)
    assert progressive_interval_offsets(5) == (-11, -7, -4, -2, -1)
    assert history_indices(10) == [3, 6, 8, 9]
    assert history_indices(2) == [0, 1]
    assert history_indices(0) == []
    assert history_indices(10, (-3, -1)) == [7, 9]
    with pytest.raises(ValueError):
        history_indices(3, (0,))


def test_prompt_has_instruction_state_actions_and_views():
    space = ActionSpace()
    frames = [np.full((8, 8, 3), i, np.uint8) for i in range(11)]
    p = PromptBuilder(space, image_size=(16, 16)).build("Fly to the red car.", (1.0, 2.0, 1.5, math.pi / 2),
                                                       ["MOVE_FORWARD"] * 10, frames)
    assert [int(im[0, 0, 0]) for im in p.images] == [3, 6, 8, 9, 10]  # history -7 -4 -2 -1, then current
    assert "Fly to the red car." in p.text and "heading = 90 degrees" in p.text and "x = 1.0 m" in p.text
    assert "MOVE_FORWARD: fly 1 m forward" in p.system and "30 degrees" in p.system
    messages, images = p.chat_messages()
    assert len(images) == 5 and images[0].size == (16, 16)
    assert sum(part["type"] == "image" for part in messages[1]["content"]) == 5
    oa = p.openai_messages()[1]["content"]
    assert sum(part["type"] == "image_url" for part in oa) == 5
    assert oa[[x["type"] for x in oa].index("image_url")]["image_url"]["url"].startswith("data:image/png;base64,")


def test_scaling_rule_and_config_errors(tmp_path):
    cfg = load_vln_config()
    s = cfg.action_space("indoor_0", "indoor")
    assert s.forward_m == pytest.approx(1.0) and math.degrees(s.turn_rad) == pytest.approx(30.0)
    assert s.names == ("MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT", "STOP") and s.max_steps == 160
    bad = tmp_path / "vln.yaml"
    bad.write_text("scale: -1\n")
    with pytest.raises(ConfigError, match=r"vln.yaml: scale: must be a positive number"):
        load_vln_config(bad)
    bad.write_text("reference: {forwrd_m: 3}\n")
    with pytest.raises(ConfigError, match="reference.forwrd_m"):
        load_vln_config(bad)
    good = tmp_path / "ok.yaml"
    good.write_text("scale_by_scene: {big: 0.5}\nextra_actions: [ASCEND, DESCEND]\n")
    c = load_vln_config(good)
    assert c.action_space("big").forward_m == pytest.approx(2.5)
    assert "ASCEND" in c.action_space("x").names and c.action_space("x").vertical_m == pytest.approx(0.4)


def test_executor_flies_each_action_within_limits():
    from airplay.frames import yaw_of_state as yaw_from_state
    from airplay.sim.dynamics import QuadrotorBatch, load_vehicle_params
    from airplay.vln.action_executor import ActionExecutor

    vehicle = load_vehicle_params()
    space = ActionSpace(names=("MOVE_FORWARD", "TURN_LEFT", "TURN_RIGHT", "ASCEND", "DESCEND", "STOP"))
    q = QuadrotorBatch(vehicle, 1)
    q.reset(np.array([[0.0, 0.0, 1.5]]), np.array([0.3]))
    ex = ActionExecutor(space, vehicle)

    def state():
        return np.concatenate([q.position[0], q.quat_xyzw[0], q.velocity[0], q.angular_velocity_body[0]])

    pose = (0.0, 0.0, 1.5, 0.3)
    for action in ("MOVE_FORWARD", "TURN_LEFT", "MOVE_FORWARD", "ASCEND", "TURN_RIGHT", "DESCEND"):
        ex.start(action, state())
        n = 0
        while (cmd := ex.step(state())) is not None:
            assert np.hypot(cmd[0], cmd[1]) <= vehicle.max_speed_xy_m_s + 1e-6
            assert abs(cmd[3]) <= vehicle.max_yaw_rate_rad_s + 1e-6
            q.step(cmd[None].astype(np.float64))
            n += 1
        assert 0 < n < 200, action
        pose = rollout([action], space, pose)
        s = state()
        assert np.linalg.norm(s[:3] - np.array(pose[:3])) < 0.1, action
        assert abs((yaw_from_state(s) - pose[3] + math.pi) % (2 * math.pi) - math.pi) < math.radians(3), action
    ex.hold(0.5, state())
    cmds = []
    while (cmd := ex.step(state())) is not None:
        cmds.append(cmd)
    assert len(cmds) == 25 and not np.any(cmds)


def test_grpo_rewards_have_trl_signature_and_values():
    from airplay.vln.rewards import make_reward_funcs

    align, stop, fmt = make_reward_funcs(lambda1=1.0, lambda2=0.5, alpha=1.0, beta=0.25, gamma=0.5)
    completions = ['["MOVE_FORWARD", "TURN_LEFT"]', "no idea", [{"role": "assistant", "content": '["STOP"]'}],
                   '["TURN_RIGHT"]']
    gt = [["MOVE_FORWARD", "TURN_LEFT"], ["STOP"], ["STOP"], ["MOVE_FORWARD", "MOVE_FORWARD"]]
    a = align(completions, gt_actions=gt, prompts=["p"] * 4)
    assert a[0] == pytest.approx(1.5) and a[1] == 0.0 and a[2] == pytest.approx(1.5)
    assert 0.0 < a[3] < 0.5  # 2 m away from the subgoal (d0 = 2 m): only part of the heading term
    assert stop(completions, gt_actions=gt) == [0.25, 0.0, 1.0, 0.25]
    assert fmt(completions, gt_actions=gt) == [0.5, 0.0, 0.5, 0.5]
    assert [f.__name__ for f in (align, stop, fmt)] == ["subgoal_alignment", "stop_consistency", "format"]
    with pytest.raises(KeyError, match="gt_actions"):
        align(['["STOP"]'])


def test_instructions_are_deterministic_and_name_landmarks():
    from airplay.vln.instructions import PERSONA_NAMES, generate_instruction, landmarks_from_spec

    path = np.array([[0, 0, 1.5], [3, 0, 1.5], [3, 4, 1.5], [1, 6, 1.5]], float)
    lms = landmarks_from_spec([{"name": "red car", "description": "a red car", "position": [3.5, 0.5, 0.5],
                                "size": [2, 1, 1]}])
    texts = {p: generate_instruction(path, math.pi / 2, lms, p, seed=1) for p in PERSONA_NAMES}
    assert len(PERSONA_NAMES) == 10 and len(set(texts.values())) == 10
    assert all("red car" in t for t in texts.values())
    assert texts["concise"].startswith("Turn right.")
    assert generate_instruction(path, math.pi / 2, lms, "pilot", seed=1) == texts["pilot"]
    with pytest.raises(ValueError, match=r"landmarks\[0\].position"):
        landmarks_from_spec([{"name": "x", "position": [1, 2]}], "scenes/a/scene.yaml")


def test_import_airnav_style_episodes_and_errors(tmp_path):
    from airplay.vln.episodes import EpisodeFileError, import_episodes, read_episodes, write_episodes

    good = {"episodes": [{"episode_id": 7, "scene_id": "urban_0", "start_position": [1, 2, 3],
                          "start_rotation": [0, 0, 0.7071068, 0.7071068],
                          "instruction": {"instruction_text": "Fly to the red car and stop."},
                          "goals": [{"position": [5, 2, 3], "radius": 20}],
                          "reference_path": [[1, 2, 3, 0], [5, 2, 3, 0]]}]}
    f = tmp_path / "airnav.json"
    f.write_text(json.dumps(good))
    (ep,) = import_episodes(f)
    assert ep.episode_id == "7" and ep.scene == "urban_0" and ep.start_yaw == pytest.approx(math.pi / 2)
    assert ep.astar_length_m == pytest.approx(4.0) and ep.instruction == "Fly to the red car and stop."
    assert read_episodes(write_episodes(tmp_path / "ours.json", [ep]))[0].to_dict() == ep.to_dict()
    bad = json.loads(json.dumps(good))
    bad["episodes"][0]["goals"][0]["position"] = [5, 2]
    f.write_text(json.dumps(bad))
    with pytest.raises(EpisodeFileError, match=r"airnav.json: episodes\[0\].goals\[0\].position"):
        import_episodes(f)
    del bad["episodes"][0]["instruction"]
    bad["episodes"][0]["goals"][0]["position"] = [5, 2, 3]
    f.write_text(json.dumps(bad))
    with pytest.raises(EpisodeFileError, match=r"episodes\[0\].instruction"):
        import_episodes(f)
    f.write_text("{not json")
    with pytest.raises(EpisodeFileError, match="not JSON"):
        read_episodes(f)


def test_synthetic_scene_landmarks():
    from airplay.scene.synthetic import _LAYOUTS
    from airplay.scene.synthetic.landmarks import scene_landmarks

    for category in ("indoor", "urban", "vegetation"):
        lms = scene_landmarks(_LAYOUTS[category](np.random.default_rng(0)).builder, category)
        names = [lm["name"] for lm in lms]
        assert len(lms) >= 3 and len(set(names)) == len(names), category
        assert all(len(lm["position"]) == 3 and lm["description"] for lm in lms)
