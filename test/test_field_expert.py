"""The field expert: a state-only pilot (labels are functions of state and goal), its
cost-to-go field, closed loop on a synthetic indoor scene, recovery, and DART collection."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import pytest
import yaml
from helpers.grids import FLOOR, PILLAR, WALL, make_grid
from helpers.scene_factory import scene_yaml_dict, write_tiny_scene

from airplay.data.bag import iter_episode_bags, read_episode
from airplay.policies import POLICY_NAMES, make_policy
from airplay.sim.dynamics import load_vehicle_params
from airplay.tasks.cost_to_go import FieldCache, wall_penalty
from airplay.tasks.expert import ExpertPilot
from airplay.tasks.field_expert import FieldExpert, FieldExpertSettings
from airplay.tasks.protocol import load_protocol
from airplay.tasks.sampler import sample_tasks
from airplay.world import World
from airplay.world.env import AirPlayEnv

VEHICLE = load_vehicle_params()
PROTOCOL = load_protocol()


@pytest.fixture(scope="module")
def room():
    return make_grid([FLOOR, PILLAR, *WALL], clearance=PROTOCOL.task.clearance_m(VEHICLE.radius_m))


@pytest.fixture(scope="module")
def indoor(indoor_2, scene_cache):
    world = World.load(indoor_2, cache_dir=scene_cache)
    return world, sample_tasks(world.scene, world.grid, 6, 0, "pointgoal", world.protocol)


def quat_of_yaw(yaw: float) -> np.ndarray:
    return np.array([0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)])


def random_states(grid, rng, n):
    free = np.argwhere(grid.free)
    cells = free[rng.choice(len(free), n)]
    pos = grid.to_world(cells) + rng.uniform(-0.05, 0.05, (n, 3))
    states = np.zeros((n, 13))
    states[:, :3] = pos
    for i, yaw in enumerate(rng.uniform(-math.pi, math.pi, n)):
        states[i, 3:7] = quat_of_yaw(yaw)
    states[:, 7:] = rng.normal(0, 1, (n, 6))  # velocity and rates: never read
    return states


def test_penalty_is_the_a_star_experts(room):
    grid, sdf = room
    assert np.array_equal(wall_penalty(grid), ExpertPilot(grid, sdf, VEHICLE).penalty())


def test_field_is_a_geodesic_cost_to_go(room):
    grid, _ = room
    cache = FieldCache(grid, cache_size=2)
    tasks = sample_tasks("room", grid, 3, seed=1, settings=PROTOCOL)
    ctg = cache.get(tasks[0].goal_position)
    v = ctg.values
    assert v[ctg.goal_cell] == 0.0
    assert np.isinf(v[~grid.free]).all()
    start = cache.cell_for(tasks[0].start_position)
    # at least the A* length (the penalty only adds), and descent ends at the goal
    assert v[tuple(start)] >= tasks[0].astar_length_m - 1e-6
    path = ctg.descent_path(tasks[0].start_position, 1e3)
    assert np.allclose(path[-1], tasks[0].goal_position)
    assert np.all(np.diff([v[tuple(c)] for c in grid.to_cell(path[:-1])]) < 0)
    # LRU per goal cell: same goal -> same array, no rebuild; evicted after two others
    builds = cache.builds
    assert cache.get(tasks[0].goal_position).values is v and cache.builds == builds
    cache.get(tasks[1].goal_position), cache.get(tasks[2].goal_position)
    assert cache.get(tasks[0].goal_position).values is not v and cache.builds == builds + 3
    # the carrot is within the lookahead, in a free cell
    for p in grid.to_world(np.argwhere(grid.free)[::997]):
        c = ctg.lookahead_point(p, 1.5)
        assert np.linalg.norm(c - p) <= 1.5 + 1e-9 and grid.is_free(c[None])[0] or np.allclose(c, ctg.goal)


def test_labels_are_pure_functions_of_state_and_goal(room):
    grid, sdf = room
    rng = np.random.default_rng(0)
    tasks = sample_tasks("room", grid, 3, seed=2, settings=PROTOCOL)
    states = random_states(grid, rng, 60)
    a = FieldExpert(grid, sdf, VEHICLE)
    a.reset(tasks[0])
    first = np.concatenate([a.act_on_state(s) for s in states])
    assert first.dtype == np.float32 and first.shape == (60, 4)
    # another expert, other goals before, the states in reverse order, float32 states, other velocities
    b = FieldExpert(grid, sdf, VEHICLE)
    for t in tasks[1:]:
        b.reset(t)
        [b.act_on_state(s) for s in states[:10]]
    b.reset(tasks[0])
    again = np.concatenate([b.act_on_state(s) for s in states[::-1]])[::-1]
    assert np.array_equal(first, again)
    moved = states.copy()
    moved[:, 7:] = 0.0
    assert np.array_equal(first, np.concatenate([a.act_on_state(s) for s in moved]))
    # limits
    assert np.all(np.hypot(first[:, 0], first[:, 1]) <= 0.95 * VEHICLE.max_speed_xy_m_s + 1e-5)
    assert np.all(np.abs(first[:, 3]) <= 0.95 * VEHICLE.max_yaw_rate_rad_s + 1e-6)
    assert np.all(first[:, 2] <= 0.95 * VEHICLE.max_speed_up_m_s + 1e-6)
    assert np.all(first[:, 2] >= -0.95 * VEHICLE.max_speed_down_m_s - 1e-6)


def test_labels_vary_continuously_with_the_position(room):
    """Blended over the 8 cells around the position, a 1 cm move changes a label a little;
    from the position's own cell alone the label jumps where the cell changes (what a
    learned policy cannot fit)."""
    grid, sdf = room
    rng = np.random.default_rng(4)
    task = sample_tasks("room", grid, 1, seed=2, settings=PROTOCOL)[0]
    states = random_states(grid, rng, 150)
    step = np.zeros(13)
    step[0] = 0.01
    jumps = {}
    for blend in (True, False):
        fe = FieldExpert(grid, sdf, VEHICLE, FieldExpertSettings(blend_cells=blend))
        fe.reset(task)
        d = [np.abs(fe.act_on_state(s + step) - fe.act_on_state(s)).max() for s in states]
        jumps[blend] = float(np.max(d))
    assert jumps[True] < 0.15, jumps  # measured 0.10
    assert jumps[False] > 3 * jumps[True], jumps  # measured 0.47


def test_turns_before_it_flies_and_stops_at_the_goal(room):
    grid, sdf = room
    task = sample_tasks("room", grid, 1, seed=3, settings=PROTOCOL)[0]
    fe = FieldExpert(grid, sdf, VEHICLE)
    fe.reset(task)
    p = task.start_position
    carrot = fe.field.lookahead_point(p, fe.settings.lookahead_m)
    bearing = math.atan2(carrot[1] - p[1], carrot[0] - p[0])
    state = np.zeros(13)
    state[:3] = p
    state[3:7] = quat_of_yaw(bearing + math.pi / 2)  # facing 90 deg off: turn in place, right
    cmd = fe.act_on_state(state)[0]
    assert math.hypot(cmd[0], cmd[1]) < 1e-6 and cmd[3] < -0.5
    state[3:7] = quat_of_yaw(bearing)  # facing it: go
    cmd = fe.act_on_state(state)[0]
    assert cmd[0] > 0.5 and abs(cmd[1]) < 0.2 * cmd[0] and abs(cmd[3]) < 0.3
    state[:3] = task.goal_position  # at the goal: stop
    assert np.abs(fe.act_on_state(state)).max() < 1e-6


def fly(world, policy, task):
    env = AirPlayEnv(world, "pointgoal", tasks=[task], render_images=False)
    obs, info = env.reset(options={"task": task})
    policy.reset(task)
    while info["status"] == "running":
        obs, _, _, _, info = env.step(policy.select_action(obs))
    return info["status"], int(info["steps"])


@pytest.mark.slow
def test_field_expert_reaches_goals_in_an_indoor_scene(indoor):
    world, tasks = indoor
    assert "field_expert" in POLICY_NAMES
    policy = make_policy("field_expert", world)
    assert policy.privileged and isinstance(policy.expert, FieldExpert)
    t = time.perf_counter()
    results = [fly(world, policy, task) for task in tasks[:5]]
    print(f"\nfield expert on indoor_2: {results}; {time.perf_counter() - t:.1f} s, "
          f"last field {policy.expert.fields.last_build_s * 1e3:.0f} ms")
    assert sum(s == "success" for s, _ in results) >= 4, results


@pytest.mark.slow
def test_field_expert_recovers_from_a_perturbed_pose(indoor):
    world, tasks = indoor
    grid = world.grid
    policy = make_policy("field_expert", world)
    flown = 0
    for task in tasks:
        d = task.path_m[min(10, len(task.path_m) - 1)] - task.start_position
        side = np.array([-d[1], d[0], 0.0]) / max(math.hypot(d[0], d[1]), 1e-9)
        for sign in (1.0, -1.0):
            start = task.start_position + sign * 1.0 * side
            if grid.is_free(start[None])[0] and world.sdf.query(start[None])[0] > 0.6 \
                    and np.linalg.norm(start - task.goal_position) > 2 * PROTOCOL.success_radius_m:
                break
        else:
            continue
        perturbed = dataclasses.replace(task, start_position=start, start_yaw=task.start_yaw + math.pi / 2)
        status, _ = fly(world, policy, perturbed)
        assert status == "success", (task.task_id, status)
        print(f"\nrecovery {task.task_id}: start moved {sign:+.0f} m sideways, yawed 90 deg: {status}")
        flown += 1
        if flown == 2:
            break
    assert flown >= 1


def test_collect_with_the_field_expert_and_dart_noise_records_clean_labels(tmp_path):
    from airplay.cli import main

    scenes = tmp_path / "scenes"
    folder = write_tiny_scene(scenes / "cube_a", seed=1)
    (folder / "scene.yaml").write_text(yaml.safe_dump(scene_yaml_dict(name="cube_a"), sort_keys=False))
    out = tmp_path / "bags"
    base = ["collect", "--scenes", str(scenes), "--per-scene", "2", "--seed", "3", "--image-size", "16x12",
            "--no-progress"]
    assert main([*base, "--expert", "field_expert", "--noise-std", "0.3", str(out)]) == 0
    fixed = json.loads((out / "collection.json").read_text())
    assert fixed["expert"] == "field_expert" and fixed["noise_std"] == 0.3
    # a rerun with another expert into the same folder is refused
    assert main([*base, "--expert", "expert", "--noise-std", "0.3", str(out)]) == 2
    world = World.load(folder)
    fe = FieldExpert(world.grid, world.sdf, world.vehicle)
    bags = list(iter_episode_bags([out]))
    assert bags
    for bag in bags:
        ep = read_episode(bag)
        assert ep.metadata["expert"] == "field_expert" and ep.metadata["noise_std"] == 0.3
        fe.set_goal(ep.goal_position)
        labels = np.concatenate([fe.act_on_state(s.astype(np.float32)) for s in ep.state])
        assert np.array_equal(labels, ep.action)
    # the noise moved the vehicle: without it the same tasks fly other states
    clean = tmp_path / "clean"
    assert main([*base, "--expert", "field_expert", str(clean)]) == 0
    for bag in bags:
        ep, ep0 = read_episode(bag), read_episode(clean / bag.parent.name / bag.name)
        assert ep0.metadata["noise_std"] == 0.0
        n = min(len(ep.state), len(ep0.state))
        assert not np.allclose(ep.state[:n, :3], ep0.state[:n, :3], atol=1e-3)
