"""Wind, gusts and velocity impulses in the flight model; ``airplay sweep`` and ``airplay disturb``."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from helpers.scene_factory import write_tiny_scene

from airplay.cli import main
from airplay.eval.disturb import Anchor, fly_condition
from airplay.eval.results import read_episodes
from airplay.sim.disturbance import Disturbance, DisturbanceError
from airplay.tasks.sampler import Task
from airplay.world import World
from airplay.world.env import AirPlayEnv


@pytest.fixture(scope="module")
def tiny_world(tmp_path_factory):
    """A 4 m cube centred on (0, 0, 2): its +x wall is the plane x = 2."""
    root = tmp_path_factory.mktemp("tiny")
    return World.load(write_tiny_scene(root / "tiny"), cache_dir=root / "cache")


@pytest.fixture(scope="module")
def scenes(indoor_1):
    return indoor_1.parent  # a scenes folder holding indoor_1 alone


def _task(start, goal=(5.0, 5.0, 1.5), time_limit_s=4.0) -> Task:
    return Task("probe-0", "tiny", "pointgoal", np.asarray(start, float), 0.0, np.asarray(goal, float), 0.0,
                np.zeros((0, 3)), 1.0, 1.0, time_limit_s)


class Hover:
    """A policy that does not react: zero velocity, zero yaw rate."""

    def reset(self, task=None):
        pass

    def select_action(self, obs):
        return np.zeros(4, np.float32)


def _fly(env, task, steps, disturbance="unset"):
    options = {"task": task} if disturbance == "unset" else {"task": task, "disturbance": disturbance}
    env.reset(options=options)
    cmd = np.array([0.6, 0.2, 0.0, 0.3])
    for _ in range(steps):
        *_, info = env.step(cmd)
        if info["status"] != "running":
            break
    return np.asarray(env.trajectory)


def test_disturbance_text_round_trips_and_errors_name_the_item():
    d = Disturbance.parse("wind=2:-1,gust=0.5,gust_tau=3,impulse=0.5:0:0.1@40")
    assert d.wind == (2.0, -1.0, 0.0) and d.gust == 0.5 and d.gust_tau == 3.0 and d.drag_tau == 1.0
    assert d.impulse == (0.5, 0.0, 0.1) and d.impulse_step == 40
    assert Disturbance.parse(d.to_text()) == d
    assert Disturbance.parse("3:0") == Disturbance(wind=(3.0, 0.0, 0.0))
    assert Disturbance.parse("") is None and Disturbance.parse("  ") is None
    for text, named in (("wind=a:b", "wind"), ("gust=-1", "gust"), ("drag_tau=0", "drag_tau"),
                        ("impulse=1:0", "impulse"), ("storm=3", "storm"), ("wind=1:0,wind=2:0", "wind")):
        with pytest.raises(DisturbanceError, match=named):
            Disturbance.parse(text)
    with pytest.raises(SystemExit):  # argparse refuses a bad --wind
        main(["eval", "--scenes", "nowhere", "--wind", "gust=-1"])


def test_wind_off_is_the_undisturbed_model_and_gusts_are_seeded(tiny_world):
    task = _task((4.0, -3.0, 1.5))
    env = AirPlayEnv(tiny_world, "pointgoal", render_images=False)
    plain = _fly(env, task, 60)
    calm = _fly(AirPlayEnv(tiny_world, "pointgoal", render_images=False, disturbance=Disturbance()), task, 60)
    assert np.array_equal(plain, calm)  # no wind, no impulse: bit for bit the model without a disturbance
    assert np.array_equal(_fly(env, task, 60), plain)

    gusty = Disturbance.parse("wind=1.5:0,gust=0.8,gust_tau=0.5")
    a = _fly(AirPlayEnv(tiny_world, "pointgoal", render_images=False, disturbance=gusty, disturbance_seed=3), task, 60)
    b = _fly(AirPlayEnv(tiny_world, "pointgoal", render_images=False, disturbance=gusty, disturbance_seed=3), task, 60)
    c = _fly(AirPlayEnv(tiny_world, "pointgoal", render_images=False, disturbance=gusty, disturbance_seed=4), task, 60)
    assert np.array_equal(a, b)  # the same seed and task: the same gusts
    assert not np.array_equal(a, c)
    assert a[-1, 0] > plain[-1, 0] + 0.05  # an eastward wind pushes east
    # a per-episode override, and None for none
    assert np.array_equal(_fly(AirPlayEnv(tiny_world, "pointgoal", render_images=False, disturbance=gusty),
                               task, 60, disturbance=None), plain)


def test_toward_push_near_a_wall_collides_away_does_not(tiny_world):
    """Hovering with 0.30 m clearance (the sim collides below the 0.25 m radius): a 0.5 m/s push
    toward the wall moves the vehicle ~0.075 m before the velocity loop absorbs it."""
    sdf = tiny_world.sdf
    xs = np.linspace(2.1, 2.6, 501)
    clear = sdf.query(np.stack([xs, np.zeros_like(xs), np.full_like(xs, 1.5)], axis=1))
    x = float(xs[np.argmin(np.abs(clear - 0.30))])
    start = np.array([x, 0.0, 1.5])
    assert sdf.query(start[None])[0] == pytest.approx(0.30, abs=0.005)
    task = _task(start)
    env = AirPlayEnv(tiny_world, "pointgoal", render_images=False)
    anchor = Anchor("tiny", task.task_id, 5, start, 0.30, "low", np.array([-1.0, 0.0]))  # the wall is at -x
    out = {c: fly_condition(env, Hover(), task, anchor, c) for c in ("clean", "toward", "tangential", "away")}
    assert out["toward"].collision and out["toward"].status == "collision"
    assert out["toward"].d_min_m < tiny_world.vehicle.radius_m
    for c in ("clean", "away", "tangential"):
        assert not out[c].collision, c
    assert out["clean"].d_min_m == pytest.approx(0.30, abs=0.005)
    assert out["away"].d_min_m == pytest.approx(0.30, abs=0.005)
    assert all(o.replay_error_m == 0.0 for o in out.values())


def test_sweep_expert_and_random_over_three_horizons(scenes, tmp_path, capsys):
    for policy in ("expert", "random"):
        out = tmp_path / policy
        assert main(["sweep", "--policy", policy, "--scenes", str(scenes), "--episodes", "2", "--horizons", "1", "2",
                     "4", "--out", str(out), "--no-images", "--bootstrap", "50", "--no-progress"]) == 0
        printed = capsys.readouterr().out
        assert "[sweep 3/3] H = 4" in printed and "SR % (all)" in printed
        tasks = []
        for h in (1, 2, 4):
            episodes = read_episodes(out / f"H{h}")
            assert len(episodes) == 2 and json.loads((out / f"H{h}" / "summary.json").read_text())["meta"][
                "execution_horizon"] == h
            tasks.append([(e.task_id, e.shortest_length_m, e.euclidean_distance_m) for e in episodes])
        assert tasks[0] == tasks[1] == tasks[2]  # the same tasks for every H
        doc = json.loads((out / "sweep.json").read_text())
        assert doc["horizons"] == [1, 2, 4] and doc["policy"] == policy
        for name in ("all", "indoor_1"):
            for metric in ("sr", "cr"):
                rows = doc["metrics"][name][metric]
                assert [r["horizon"] for r in rows] == [1, 2, 4]
                for r in rows:
                    assert r["ci95"][0] <= r["mean"] <= r["ci95"][1]
        with open(out / "sweep.csv") as f:
            assert len(list(csv.DictReader(f))) == 3 * 2 * 2  # H x (all, indoor_1) x (sr, cr)
        assert (out / "sweep.png").stat().st_size > 10_000 and (out / "pairs_indoor_1.png").is_file()


def test_disturb_command_writes_the_table(scenes, tmp_path, capsys):
    out = tmp_path / "disturb"
    assert main(["disturb", "--policy", "expert", "--scenes", str(scenes), "--episodes", "2", "--out", str(out),
                 "--no-images", "--bootstrap", "50", "--no-progress"]) == 0
    assert "CR_ref %" in capsys.readouterr().out
    doc = json.loads((out / "disturb.json").read_text())
    assert doc["clearance_groups_m"] == {"low": [0.0, 0.75], "medium": [0.75, 1.5], "high": [1.5, None]}
    assert set(doc["table"]) == {"low", "medium", "high", "all"}
    assert set(doc["table"]["all"]) == {"clean", "toward", "tangential", "away"}
    assert doc["table"]["all"]["clean"]["anchors"] > 0 and doc["max_replay_error_m"] == 0.0
    rows = [json.loads(line) for line in (out / "anchors.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * doc["table"]["all"]["clean"]["anchors"]
    again = tmp_path / "again"
    assert main(["disturb", "--policy", "expert", "--scenes", str(scenes), "--episodes", "2", "--out", str(again),
                 "--no-images", "--bootstrap", "50", "--no-progress"]) == 0
    assert (again / "anchors.jsonl").read_bytes() == (out / "anchors.jsonl").read_bytes()  # seeded


@pytest.mark.parametrize("argv, named", [
    (["sweep", "--policy", "nonesuch", "--horizons", "1"], "--policy"),
    (["sweep", "--horizons", "0", "2"], "--horizons"),
    (["sweep", "--horizons", "1", "2", "--pair", "1", "8"], "--pair"),
    (["disturb", "--policy", "nonesuch"], "--policy"),
    (["disturb", "--speed", "0"], "--speed"),
])
def test_bad_arguments_are_named(scenes, tmp_path, capsys, argv, named):
    assert main([*argv, "--scenes", str(scenes), "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    assert named in capsys.readouterr().err


def test_a_folder_without_scenes_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["sweep", "--horizons", "1", "--scenes", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "empty" in capsys.readouterr().err


def test_the_graph_carries_wind_to_the_sim_and_evaluator():
    from airplay.graph import GraphArgumentError, sim_eval_graph

    nodes = {n.name: n.parameters for n in sim_eval_graph({"wind": "wind=1:0,gust=0.3"})}
    assert nodes["sim"]["wind"] == nodes["evaluator"]["wind"] == "wind=1:0,gust=0.3"
    assert "wind" not in nodes["policy"] and "wind" not in nodes["renderer"]
    assert all("wind" not in n.parameters for n in sim_eval_graph({}))  # off: the nodes' default
    with pytest.raises(GraphArgumentError, match="wind"):
        sim_eval_graph({"wind": "gust=-1"})
