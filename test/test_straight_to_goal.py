"""examples/straight_to_goal.py, the baseline that flies straight at the goal: its commands point
at the goal in the heading frame within its limits, a bad config field is named, and
``airplay eval --policy straight_to_goal:make`` flies it (with the examples folder on the path)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.scene_factory import write_tiny_scene

from airplay.cli import main
from airplay.policies.base import ConfigError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import straight_to_goal

    return straight_to_goal


def test_commands_point_at_the_goal_within_the_limits(example):
    policy = example.StraightToGoal()
    vx, vy, vz, yaw = policy.predict_action_chunk({"goal": np.array([3.0, 4.0, 5.0], np.float32)})[0]
    assert np.isclose(np.hypot(vx, vy), 2.0) and np.isclose(vy / vx, 4.0 / 3.0)  # 2 m/s along the goal
    assert vz == 1.0 and yaw == pytest.approx(min(1.0, np.arctan2(4.0, 3.0)))
    vx, vy, vz, yaw = policy.predict_action_chunk({"goal": np.array([0.0, -0.5, -0.2], np.float32)})[0]
    assert (vx, vy) == pytest.approx((0.0, -1.0)) and vz == pytest.approx(-0.2)  # slows inside 1 m
    assert yaw == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="'goal'"):
        policy.predict_action_chunk({"depth": np.zeros((4, 4, 1))})
    with pytest.raises(ConfigError, match="'speed'"):
        example.StraightToGoalConfig(speed=0.0)


def test_airplay_eval_flies_it(example, tmp_path, monkeypatch):
    write_tiny_scene(tmp_path / "scenes" / "tiny")
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["eval", "--scenes", str(tmp_path / "scenes"), "--policy", "straight_to_goal:make", "--episodes", "2",
                 "--seed", "3", "--out", str(tmp_path / "run"), "--no-images", "--bootstrap", "0",
                 "--no-progress"]) == 0
    episodes = [json.loads(x) for x in (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) == 2 and all(e["path_length_m"] > 0.5 for e in episodes)
    for e in episodes:  # its path heads for the goal: the end is nearer than the start
        assert e["final_distance_m"] < e["euclidean_distance_m"], e
