"""The vehicle's map tie and mission, without an autopilot: known poses, the end rules in the
simulator's order, on a real synthetic scene's collision model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from airplay import frames
from airplay.bridge import autopilot_fence as af
from airplay.bridge.map_tie import MapTie
from airplay.bridge.mission import Mission, MissionJudge, distance_outside
from airplay.bridge.telemetry import Telemetry
from airplay.episode_status import EpisodeStatus


# -- the map tie --------------------------------------------------------------------------------
def test_tie_at_a_known_pose():
    # the vehicle booted facing north (local ENU yaw +90 deg); the task starts at map (10, 5) facing map +x
    tie = MapTie.at_pose((0.0, 0.0, 0.0), math.pi / 2, (10.0, 5.0, 0.0), 0.0)
    assert tie.yaw_rad == pytest.approx(-math.pi / 2)
    assert_allclose(tie.origin_enu, (10.0, 5.0, 0.0))
    # 1 m north of the boot point (local (0, 1)) is 1 m along map +x: straight ahead of the start
    assert_allclose(tie.position_to_map((0.0, 1.0, 2.0)), (11.0, 5.0, 2.0), atol=1e-12)
    assert_allclose(tie.vector_to_map((0.0, 3.0, -1.0)), (3.0, 0.0, -1.0), atol=1e-12)
    assert tie.yaw_to_map(math.pi / 2) == pytest.approx(0.0, abs=1e-12)
    assert tie.yaw_to_local(0.0) == pytest.approx(math.pi / 2)
    # round trips
    for p in [(1.0, -2.0, 3.0), (-7.5, 0.25, 0.0)]:
        assert_allclose(tie.position_to_local(tie.position_to_map(p)), p, atol=1e-12)
        assert_allclose(tie.vector_to_local(tie.vector_to_map(p)), p, atol=1e-12)
    assert MapTie.from_dict(tie.to_dict()) == tie


def test_tie_from_a_pose_off_the_origin():
    # an estimate that drifted: the vehicle stands at local (0.3, -0.2, 0.4), yaw 30 deg
    tie = MapTie.at_pose((0.3, -0.2, 0.4), math.radians(30), (15.2, 3.1, 0.0), math.radians(-120))
    assert_allclose(tie.position_to_map((0.3, -0.2, 0.4)), (15.2, 3.1, 0.0), atol=1e-12)
    assert tie.yaw_to_map(math.radians(30)) == pytest.approx(math.radians(-120))
    q_local = frames.quat_xyzw_from_yaw(math.radians(30))
    assert frames.yaw_from_quat_xyzw(tie.quat_to_map_xyzw(q_local)) == pytest.approx(math.radians(-120))


def test_telemetry_in_a_turned_map_frame():
    """PX4 reports the vehicle 2 m north and 1 m up of its boot point, nose north, moving north;
    with the map turned so that north is map +x, odom says 2 m along x, yaw 0, moving along x."""
    t = Telemetry(tie=MapTie((10.0, 5.0, 0.0), -math.pi / 2))
    t.on_local_position_ned(0, (2.0, 0.0, -1.0), (1.0, 0.0, 0.0))
    t.on_attitude_quaternion(0, frames.quat_wxyz_from_euler_zyx(0.0, 0.0, 0.0), (0.0, 0.0, 0.2))
    s = t.state()
    assert_allclose(s[0:3], (12.0, 5.0, 1.0), atol=1e-12)
    assert_allclose(s[7:10], (1.0, 0.0, 0.0), atol=1e-12)
    assert frames.yaw_of_state(s) == pytest.approx(0.0, abs=1e-12)
    assert_allclose(s[10:13], (0.0, 0.0, -0.2), atol=1e-12)          # body rates do not turn
    local = t.local_state()
    assert_allclose(local[0:3], (0.0, 2.0, 1.0), atol=1e-12)          # before the tie: ENU of the boot point
    assert frames.yaw_of_state(local) == pytest.approx(math.pi / 2)


def test_autopilot_fence_vertices_through_a_turned_tie():
    origin = af.GlobalOrigin(47.397742, 8.545594, 488.0)
    tie = MapTie((10.0, 5.0, 0.0), -math.pi / 2)
    # map (11, 5) is 1 m along map +x from the origin, i.e. 1 m north in the autopilot's frame
    [(lat7, lon7)] = af.fence_vertices_latlon([(11.0, 5.0)], tie, origin)
    north_m = (lat7 * 1e-7 - origin.lat_deg) * math.pi / 180 * af.EARTH_RADIUS_M
    assert north_m == pytest.approx(1.0, abs=0.01) and lon7 == round(origin.lon_deg * 1e7)


def test_a_tie_refuses_non_finite_numbers():
    with pytest.raises(ValueError, match="origin_enu"):
        MapTie((0.0, math.nan, 0.0))
    with pytest.raises(ValueError, match="yaw_rad"):
        MapTie((0.0, 0.0, 0.0), math.inf)


# -- the mission's end rules -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def indoor(indoor_1):
    from airplay.tasks.sampler import sample_tasks
    from airplay.world import World

    world = World.load(indoor_1)
    tasks = sample_tasks(world.scene, world.grid, 10, 0, "pointgoal", world.protocol)
    return world, tasks


def _free_point_near(world, point, radius_m: float):
    """A point within ``radius_m`` of ``point`` that is neither in collision nor out of bounds."""
    rng = np.random.default_rng(0)
    for _ in range(2000):
        p = np.asarray(point) + rng.uniform(-radius_m, radius_m, 3) * np.array([1, 1, 0.3])
        if np.linalg.norm(p - point) <= radius_m and world.checker.status(p.reshape(1, 3))[0] is EpisodeStatus.RUNNING:
            return p
    raise AssertionError("no free point found")


def test_mission_of_a_task(indoor):
    world, tasks = indoor
    task = tasks[1]
    m = Mission.from_task(task, world.protocol.success_radius_m, ground_z=0.0)
    assert m.takeoff_height_m == pytest.approx(task.start_position[2])
    assert m.start_on_ground == (task.start_position[0], task.start_position[1], 0.0)
    assert m.time_limit_s == task.time_limit_s
    with pytest.raises(ValueError, match="above the ground"):
        Mission.from_task(task, 1.0, ground_z=float(task.start_position[2]))
    with pytest.raises(ValueError, match="success_radius_m"):
        Mission.from_task(task, 0.0)


def test_the_end_rules_in_the_simulators_order(indoor):
    world, tasks = indoor
    task = tasks[1]
    m = Mission.from_task(task, world.protocol.success_radius_m)
    judge = MissionJudge(m, world.checker)
    start = np.asarray(task.start_position)
    assert judge.update(start, 0.0) is None                       # before the start: nothing is judged
    judge.start(100.0)
    assert judge.update(start, 100.02) is None                     # at the start: flying
    near_goal = _free_point_near(world, task.goal_position, 0.9 * m.success_radius_m)
    end = judge.update(near_goal, 105.0)
    assert end.status is EpisodeStatus.SUCCESS and end.flown_s == pytest.approx(5.0)
    assert end.goal_distance_m <= m.success_radius_m and not end.land_at_once
    assert judge.update(start, 106.0) is end                       # the first ending is kept

    # the time limit, counted from the take-over
    judge = MissionJudge(m, world.checker)
    judge.start(0.0)
    assert judge.update(start, m.time_limit_s - 0.1) is None
    assert judge.update(start, m.time_limit_s).status is EpisodeStatus.TIMEOUT

    # a collision beats the goal and the time limit; it lands at once. A graze within the tolerance is not one
    judge = MissionJudge(Mission.from_task(task, 50.0), world.checker, collision_tolerance_m=0.1)
    judge.start(0.0)
    graze = _point_in_collision(world, task.goal_position, depth_m=0.05)
    assert world.checker.status(graze.reshape(1, 3))[0] is EpisodeStatus.COLLISION
    assert judge.update(graze, 1.0).status is EpisodeStatus.SUCCESS      # (the goal radius covers it)
    judge = MissionJudge(Mission.from_task(task, 50.0), world.checker, collision_tolerance_m=0.1)
    judge.start(0.0)
    wall = _point_in_collision(world, task.goal_position, depth_m=0.15)
    end = judge.update(wall, 1e6)
    assert end.status is EpisodeStatus.COLLISION and end.land_at_once

    # out of the navigable region (above its height band) by more than the tolerance; just out: not yet
    z_max = world.scene.spec.navigable.z_max
    judge = MissionJudge(m, world.checker, bounds_tolerance_m=0.2)
    judge.start(0.0)
    just_out = start + np.array([0.0, 0.0, z_max - start[2] + 0.1])
    assert world.checker.status(just_out.reshape(1, 3))[0] is EpisodeStatus.OUT_OF_BOUNDS
    assert judge.update(just_out, 1.0) is None
    above = start + np.array([0.0, 0.0, z_max - start[2] + 0.5])
    end = judge.update(above, 1.1)
    assert end.status is EpisodeStatus.OUT_OF_BOUNDS and "0.50 m" in end.reason and not end.land_at_once


def _point_in_collision(world, near, depth_m: float):
    """A point whose sphere reaches ``depth_m`` (+- 1 cm) into a wall, on a straight line from ``near``."""
    for direction in ((1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0)):
        for d in np.arange(0.0, 30.0, 0.005):
            p = np.asarray(near) + d * np.asarray(direction, float)
            if world.checker.clearance(p.reshape(1, 3))[0] <= -depth_m:
                return p
    raise AssertionError("no wall found")


def test_the_policys_stop_and_the_vln_rule(indoor):
    world, tasks = indoor
    task = tasks[1]
    goal = np.asarray(task.goal_position)
    # VLN: entering the radius does not end the flight, the STOP does
    m = Mission.from_task(task, world.protocol.success_radius_m, success_on_entry=False)
    judge = MissionJudge(m, world.checker)
    judge.start(0.0)
    near = _free_point_near(world, goal, 0.5)
    assert judge.update(near, 1.0) is None
    assert judge.policy_stop(near, 2.0).status is EpisodeStatus.SUCCESS
    judge = MissionJudge(m, world.checker)
    judge.start(0.0)
    end = judge.policy_stop(np.asarray(task.start_position), 2.0, "STOP")
    assert end.status is EpisodeStatus.STOPPED and end.reason == "STOP"
    # a flight cut short before any ending
    judge = MissionJudge(m, world.checker)
    judge.start(0.0)
    assert judge.interrupted(None, 3.0, "operator landing").status is EpisodeStatus.INTERRUPTED
    assert judge.path == []   # nothing judged, and no made-up position


def test_the_judges_path_ends_where_the_mission_did(indoor):
    """The path the bridge reports with its ending: every position judged after the take-over, the
    ending's own last, not one before the start, not one after the end (the straight line to the
    goal, without the scene's walls: the path is the point here)."""
    world, tasks = indoor
    task = tasks[1]
    start, goal = np.asarray(task.start_position), np.asarray(task.goal_position)
    judge = MissionJudge(Mission.from_task(task, world.protocol.success_radius_m))
    assert judge.update(start, 0.0) is None and judge.path == []   # before the take-over
    judge.start(0.0)
    line = [start + (goal - start) * f for f in np.linspace(0.0, 1.0, 41)]
    ending, t = None, 0.0
    for p in line:
        t += 0.1
        ending = judge.update(p, t)
        if ending is not None:
            break
    assert ending is not None and ending.status is EpisodeStatus.SUCCESS
    assert_allclose(judge.path[-1], ending.position)
    assert np.linalg.norm(np.asarray(judge.path[-1]) - goal) <= world.protocol.success_radius_m
    assert len(judge.path) == round(t / 0.1)
    judge.update(goal, t + 1.0)
    assert len(judge.path) == round(t / 0.1)   # the ended mission judges no more
    # the policy's stop at a position not yet judged adds it
    judge = MissionJudge(Mission.from_task(task, world.protocol.success_radius_m))
    judge.start(0.0)
    judge.update(start, 0.1)
    judge.policy_stop(line[3], 0.2)
    assert_allclose(judge.path, [start, line[3]])


def test_distance_outside_a_region():
    from airplay.scene.spec import NavigableRegion

    region = NavigableRegion(np.array([[0.0, 0.0], [4.0, 0.0], [4.0, 2.0], [0.0, 2.0]]), 0.5, 2.5)
    assert distance_outside(region, (1.0, 1.0, 1.0)) == 0.0
    assert distance_outside(region, (1.0, 1.0, 0.2)) == pytest.approx(0.3)
    assert distance_outside(region, (5.0, 1.0, 1.0)) == pytest.approx(1.0)
    assert distance_outside(region, (5.0, 3.0, 3.0)) == pytest.approx(math.sqrt(2.0))


def test_eval_with_a_vehicle_profile(indoor, tmp_path):
    """`airplay eval --vehicle FILE` flies the flight model of that file (goal_direct, which does not
    know the model, flies other trajectories on a slower vehicle; the expert plans with the model's
    time constant and keeps its timing); a file with a wrong field is refused, naming the file and
    the field."""
    import json
    import subprocess
    import sys

    world, _ = indoor
    slow = tmp_path / "slow.yaml"
    slow.write_text("velocity_time_constant_s: 0.9\nvertical_velocity_time_constant_s: 0.3\n")
    steps = {}
    for name, extra in (("default", []), ("slow", ["--vehicle", str(slow)])):
        out = tmp_path / name
        done = subprocess.run([sys.executable, "-m", "airplay.cli", "eval", "--policy", "goal_direct", "--scenes",
                               str(world.scene.spec.root), "--episodes", "4", "--seed", "0", "--no-images", "--no-progress",
                               "--out", str(out), *extra], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        steps[name] = [(json.loads(line)["steps"], round(json.loads(line)["path_length_m"], 3))
                       for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert steps["slow"] != steps["default"], steps
    bad = tmp_path / "bad.yaml"
    bad.write_text("velocity_time_constant_s: fast\n")
    done = subprocess.run([sys.executable, "-m", "airplay.cli", "eval", "--policy", "expert", "--scenes",
                           str(world.scene.spec.root), "--vehicle", str(bad), "--out", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "bad.yaml" in done.stderr and "velocity_time_constant_s" in done.stderr
