"""Closed-loop metrics, aggregation, results files, table and plot (airplay.eval)."""

import json
import math

import numpy as np
import pytest

from airplay.eval.aggregate import aggregate
from airplay.eval.metrics import METRICS, EpisodeResult, episode_metrics, episode_result
from airplay.eval.plots import plot_trajectories
from airplay.eval.results import format_table, read_episodes, read_summary, write_results


def ep(traj, status, start=None, goal=(0.0, 0.0, 0.0), astar=None, scene="s", task_id=0, policy="expert"):
    traj = np.asarray(traj, dtype=float)
    start = traj[0] if start is None else np.asarray(start, dtype=float)
    goal = np.asarray(goal, dtype=float)
    astar = float(np.linalg.norm(goal - start)) if astar is None else astar
    return episode_result(
        scene=scene, task_id=task_id, setting="pointgoal", start=start, goal=goal, astar_length_m=astar,
        trajectory=traj, status=status, seed=7, policy=policy,
    )


def approx(m, **expected):
    for k, v in expected.items():
        if isinstance(v, float) and math.isnan(v):
            assert math.isnan(m[k]), (k, m[k])
        else:
            assert m[k] == pytest.approx(v, abs=1e-12), (k, m[k], v)


# ---------------------------------------------------------------- per episode


def test_straight_success():
    # 3-4-5 line; stops 0.8 m short of the goal (inside r = 1).
    u = np.array([0.6, 0.8, 0.0])
    traj = [np.array([0, 0, 1.0]) + s * u for s in (0.0, 1.0, 2.0, 3.0, 4.2)]
    r = ep(traj, "success", goal=(3.0, 4.0, 1.0), astar=5.5)
    assert r.steps == 4 and r.path_length_m == pytest.approx(4.2)
    assert r.euclidean_distance_m == pytest.approx(5.0) and r.shortest_length_m == 5.5
    assert r.time_to_success_s == pytest.approx(0.08)
    approx(episode_metrics(r, 1.0), ne=0.8, sr=1.0, osr=1.0, spl=1.0, astar_spl=1.0, cr=0.0, ob=0.0, tts=0.08)


def test_detour_spl_exact():
    # start (0,0,0) -> up 3 m in y -> 4 m east -> back 2.5 m south; goal (4,0,0): ne 0.5.
    traj = [(0, 0, 0), (0, 3, 0), (4, 3, 0), (4, 0.5, 0)]
    r = ep(traj, "success", goal=(4.0, 0.0, 0.0), astar=5.0)
    assert r.path_length_m == pytest.approx(9.5)
    approx(episode_metrics(r), ne=0.5, sr=1.0, osr=1.0, spl=4.0 / 9.5, astar_spl=5.0 / 9.5, tts=0.06)


def test_zero_length_path_start_is_goal():
    r = ep([(1.0, 2.0, 1.5)], "success", goal=(1.0, 2.0, 1.5), astar=0.0)
    assert r.steps == 0 and r.path_length_m == 0.0 and r.euclidean_distance_m == 0.0
    approx(episode_metrics(r), ne=0.0, sr=1.0, osr=1.0, spl=1.0, astar_spl=1.0, cr=0.0, ob=0.0, tts=0.0)


def test_start_is_goal_but_moved_gives_zero_spl():
    # l = 0 < p: sr * 0 / max(p, 0) = 0 by the definition.
    r = ep([(0, 0, 0), (0.1, 0, 0), (0, 0, 0)], "success", goal=(0, 0, 0), astar=0.0)
    approx(episode_metrics(r), sr=1.0, spl=0.0, astar_spl=0.0, tts=0.04)


def test_success_at_first_step():
    r = ep([(0, 0, 0), (0.01, 0, 0)], "success", goal=(0.5, 0, 0), astar=0.5)
    assert r.steps == 1
    approx(episode_metrics(r), ne=0.49, sr=1.0, osr=1.0, spl=1.0, astar_spl=1.0, tts=0.02)


def test_collision_at_goal():
    r = ep([(-3, 0, 0), (-1, 0, 0), (-0.3, 0, 0)], "collision", goal=(0, 0, 0))
    assert r.time_to_success_s is None
    approx(episode_metrics(r), ne=0.3, sr=0.0, osr=1.0, spl=0.0, astar_spl=0.0, cr=1.0, ob=0.0, tts=math.nan)


def test_timeout_after_passing_through_goal_region():
    r = ep([(-3, 0, 0), (0, 0.5, 0), (3, 0, 0)], "timeout", goal=(0, 0, 0))
    assert r.min_distance_m == pytest.approx(0.5)
    approx(episode_metrics(r), ne=3.0, sr=0.0, osr=1.0, spl=0.0, astar_spl=0.0, cr=0.0, ob=0.0, tts=math.nan)


def test_out_of_bounds():
    r = ep([(-3, 0, 0), (-3, 2, 0), (-3, 4, 0)], "out_of_bounds", goal=(0, 0, 0))
    approx(episode_metrics(r), ne=5.0, sr=0.0, osr=0.0, spl=0.0, cr=0.0, ob=1.0, tts=math.nan)


def test_osr_radius_is_inclusive_and_configurable():
    r = ep([(-3, 0, 0), (-1, 0, 0), (-2, 0, 0)], "no_command", goal=(0, 0, 0))
    assert episode_metrics(r, 1.0)["osr"] == 1.0
    assert episode_metrics(r, 0.99)["osr"] == 0.0
    approx(episode_metrics(r), ne=2.0, sr=0.0, cr=0.0, ob=0.0)


def test_episode_result_validation():
    with pytest.raises(ValueError, match="status"):
        ep([(0, 0, 0)], "crashed")
    with pytest.raises(ValueError, match="trajectory"):
        ep(np.zeros((0, 3)), "timeout", start=(0, 0, 0))
    with pytest.raises(ValueError, match="non-finite"):
        ep([(0, 0, 0), (np.nan, 0, 0)], "timeout")


def test_json_round_trip_and_numpy_fields():
    r = ep([(0, 0, 0), (1, 0, 0)], "timeout", goal=(3, 0, 0), task_id=np.int64(12))
    assert type(r.task_id) is int
    back = EpisodeResult.from_json(r.to_json())
    assert back == r
    d = json.loads(r.to_json())
    d["future_field"] = 1  # unknown keys are ignored
    assert EpisodeResult.from_json(d) == r
    del d["status"]
    with pytest.raises(ValueError, match="status"):
        EpisodeResult.from_json(d)


# ---------------------------------------------------------------- aggregation


def straight(scene, status, n_steps, goal_dist=2.0, task_id=0, policy="expert"):
    """Straight flight towards a goal at (goal_dist, 0, 0) from the origin."""
    end = goal_dist if status == "success" else 0.0
    traj = np.zeros((n_steps + 1, 3))
    traj[:, 0] = np.linspace(0.0, end, n_steps + 1)
    return ep(traj, status, goal=(goal_dist, 0, 0), scene=scene, task_id=task_id, policy=policy)


def test_scenes_weighted_equally():
    res = [
        straight("a", "success", 5),
        straight("b", "success", 15, task_id=0),
        straight("b", "collision", 3, task_id=1),
        straight("b", "timeout", 3, task_id=2),
    ]
    s = aggregate(res, 1.0, bootstrap=200, seed=1)
    assert s["episodes"] == 4 and s["scenes"] == 2
    assert s["per_scene"]["a"]["episodes"] == 1 and s["per_scene"]["b"]["episodes"] == 3
    assert s["per_scene"]["b"]["sr"]["mean"] == pytest.approx(1 / 3)
    assert s["overall"]["sr"]["mean"] == pytest.approx((1 + 1 / 3) / 2)  # not the pooled 2/4
    assert s["overall"]["cr"]["mean"] == pytest.approx((0 + 1 / 3) / 2)
    assert s["overall"]["ne"]["mean"] == pytest.approx((0 + (0 + 2 + 2) / 3) / 2)
    # tts over successes only: a 0.10 s, b 0.30 s.
    assert s["per_scene"]["b"]["tts"]["mean"] == pytest.approx(0.30)
    assert s["overall"]["tts"]["mean"] == pytest.approx((0.10 + 0.30) / 2)
    assert set(s["overall"]) == set(METRICS)


def test_tts_undefined_without_successes():
    res = [straight("a", "success", 5), straight("c", "timeout", 4), straight("c", "collision", 2, task_id=1)]
    s = aggregate(res, bootstrap=100)
    assert math.isnan(s["per_scene"]["c"]["tts"]["mean"])
    assert all(math.isnan(x) for x in s["per_scene"]["c"]["tts"]["ci95"])
    assert s["overall"]["tts"]["mean"] == pytest.approx(0.10)  # over the scenes that have one
    none = aggregate([straight("c", "timeout", 4)], bootstrap=50)
    assert math.isnan(none["overall"]["tts"]["mean"])


def _mixed(seed):
    rng = np.random.default_rng(seed)
    out = []
    for scene, n in (("a", 12), ("b", 30), ("c", 7)):
        for i in range(n):
            status = rng.choice(["success", "success", "success", "collision", "timeout"])
            out.append(straight(scene, str(status), int(rng.integers(5, 60)), goal_dist=float(rng.uniform(1.5, 9)),
                                task_id=i))
    return out


def test_ci_contains_mean_and_is_deterministic():
    res = _mixed(3)
    s1 = aggregate(res, bootstrap=1000, seed=5)
    s2 = aggregate(res, bootstrap=1000, seed=5)
    assert s1 == s2 or json.dumps(s1, sort_keys=True) == json.dumps(s2, sort_keys=True)
    for m in METRICS:
        lo, hi = s1["overall"][m]["ci95"]
        assert lo <= s1["overall"][m]["mean"] <= hi, m
        for sc in s1["per_scene"].values():
            lo, hi = sc[m]["ci95"]
            assert lo <= sc[m]["mean"] <= hi, m
    assert s1["overall"]["sr"]["ci95"][1] > s1["overall"]["sr"]["ci95"][0]
    s3 = aggregate(res, bootstrap=1000, seed=6)
    assert s3["overall"]["sr"]["ci95"] != s1["overall"]["sr"]["ci95"]
    assert s3["overall"]["sr"]["mean"] == s1["overall"]["sr"]["mean"]
    # The order of the input does not matter across scenes (scenes visited in sorted order).
    by_scene = sorted(res, key=lambda r: r.scene, reverse=True)
    assert aggregate(by_scene, bootstrap=1000, seed=5)["overall"] == s1["overall"]


def test_ci_width_zero_when_all_episodes_equal():
    res = [straight(sc, "success", 10, task_id=i) for sc in ("a", "b") for i in range(5)]
    s = aggregate(res, bootstrap=300, seed=0)
    for m in METRICS:
        lo, hi = s["overall"][m]["ci95"]
        assert lo == hi == pytest.approx(s["overall"][m]["mean"]), m
    assert s["overall"]["sr"]["mean"] == 1.0 and s["overall"]["tts"]["mean"] == pytest.approx(0.2)


def test_aggregate_rejects_bad_input():
    with pytest.raises(ValueError, match="no episode"):
        aggregate([])
    with pytest.raises(ValueError, match="mix"):
        aggregate([straight("a", "success", 3), straight("a", "success", 3, policy="act")])
    s = aggregate([straight("a", "success", 3)], bootstrap=0)
    assert all(math.isnan(x) for x in s["overall"]["sr"]["ci95"])


# ---------------------------------------------------------------- results files and table


def test_results_round_trip(tmp_path):
    res = _mixed(4)
    summary = aggregate(res, bootstrap=200, seed=0)
    meta = {"policy": "expert", "runtime": "inprocess", "seed": 0, "protocol": {"success_radius_m": 1.0}}
    e_path, s_path = write_results(tmp_path / "out", res, summary, meta)
    assert read_episodes(e_path) == res
    assert read_episodes(tmp_path / "out") == res
    assert len(e_path.read_text().splitlines()) == len(res)
    doc = read_summary(tmp_path / "out")
    assert doc["meta"]["policy"] == "expert" and doc["meta"]["runtime"] == "inprocess"
    assert "airplay_version" in doc["meta"]
    assert doc["overall"]["sr"]["mean"] == pytest.approx(summary["overall"]["sr"]["mean"])
    assert doc["per_scene"]["b"]["episodes"] == 30
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["episodes.jsonl", "summary.json"]


def test_summary_nan_written_as_null(tmp_path):
    res = [straight("c", "timeout", 4)]
    write_results(tmp_path, res, aggregate(res, bootstrap=10), {})
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text
    assert json.loads(text)["overall"]["tts"] == {"mean": None, "ci95": [None, None]}
    assert "TTS s" in format_table(json.loads(text))


def test_format_table():
    res = [
        straight("indoor_0", "success", 5),
        straight("urban_0", "success", 15, task_id=0),
        straight("urban_0", "collision", 3, task_id=1),
        straight("urban_0", "timeout", 3, task_id=2),
    ]
    table = format_table(aggregate(res, bootstrap=200, seed=0))
    lines = table.splitlines()
    for h in ("NE m", "SR %", "OSR %", "SPL %", "A*-SPL %", "CR %", "OB %", "TTS s", "episodes"):
        assert h in lines[0]
    indoor = next(ln for ln in lines if ln.startswith("indoor_0"))
    urban = next(ln for ln in lines if ln.startswith("urban_0"))
    overall = lines[-1]
    assert overall.startswith("all (equal weight)")
    assert "100" in indoor.split() and indoor.split()[-1] == "1"
    assert "33.3" in urban.split() and urban.split()[-1] == "3"
    assert "66.7 [" in overall and overall.split()[-1] == "4"
    assert len({len(ln) for ln in lines}) == 1  # fixed width: every row (and rule) equally long


# ---------------------------------------------------------------- plot


def test_plot_trajectories(tmp_path):
    from PIL import Image

    occ = np.zeros((60, 100), dtype=bool)  # 10 m x 6 m at 0.1 m
    occ[20:40, 45:55] = True  # a pillar in the middle
    occ[0, :] = occ[-1, :] = True
    trajs = [
        np.column_stack([np.linspace(-4, 4, 50), np.linspace(-1, 1.5, 50), np.full(50, 1.5)]),
        np.column_stack([np.linspace(-4, -0.6, 30), np.zeros(30), np.full(30, 1.5)]),
        np.column_stack([np.linspace(-3, 0, 20), np.linspace(-2, -3.5, 20), np.full(20, 1.5)]),
    ]
    starts = [t[0] for t in trajs]
    goals = [(4.3, 1.5, 1.5), (3.0, 0.0, 1.5), (3.0, -2.0, 1.5)]
    out = plot_trajectories(
        tmp_path / "plots" / "scene.png", occ, (-5.0, -3.0), 0.1, trajs, starts, goals,
        ["success", "collision", "out_of_bounds"], title="test scene",
    )
    assert out.exists() and out.stat().st_size > 5000
    with Image.open(out) as im:
        assert im.size == (800, 800)
        a = np.asarray(im.convert("RGB"))
    assert a.std() > 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["scene.png"]
    with pytest.raises(ValueError):
        plot_trajectories(tmp_path / "x.png", occ, (0, 0), 0.1, trajs, starts, goals[:1], ["success"] * 3)
