"""The A* expert: reference feasibility, commands, and closed-loop success on the synthetic scenes."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from helpers.grids import FLOOR, PILLAR, WALL, make_grid

from airplay.frames import wrap_angle
from airplay.scene.scene import Scene
from airplay.scene.synthetic import make_scene
from airplay.sim.dynamics import QuadrotorBatch, load_vehicle_params
from airplay.sim.sdf import SignedDistanceField
from airplay.tasks.expert import ExpertPilot
from airplay.tasks.expert_settings import ExpertSettings
from airplay.tasks.navigable import NavigableGrid
from airplay.tasks.path_smoothing import ClearanceCheck, shortcut
from airplay.tasks.protocol import load_protocol
from airplay.tasks.sampler import sample_tasks

VEHICLE = load_vehicle_params()
PROTOCOL = load_protocol()


@pytest.fixture(scope="module")
def room():
    grid, sdf = make_grid([FLOOR, PILLAR, *WALL], clearance=PROTOCOL.task.clearance_m(VEHICLE.radius_m))
    return grid, sdf


def fly(tasks, grid, sdf, record: bool = False):
    """Fly every task at once with the expert; (statuses, steps, yaw alignment samples)."""
    n = len(tasks)
    experts = [ExpertPilot(grid, sdf, VEHICLE) for _ in tasks]
    shared = experts[0].penalty()
    for e, t in zip(experts, tasks):
        e._penalty = shared  # one penalty field for all: it depends on the grid only
        e.reset(t)
    quad = QuadrotorBatch(VEHICLE, n)
    quad.reset(np.stack([t.start_position for t in tasks]), np.array([t.start_yaw for t in tasks]))
    goal = np.stack([t.goal_position for t in tasks])
    limit = np.array([t.time_limit_s for t in tasks])
    status = np.full(n, "running", dtype=object)
    steps = np.zeros(n, dtype=int)
    cmd = np.zeros((n, 4))
    yaw_err = []
    k = 0
    while (status == "running").any():
        live = np.nonzero(status == "running")[0]
        cmd[:] = 0.0
        for i in live:
            cmd[i] = experts[i].act(quad.position[i], quad.velocity[i], float(quad.yaw[i]))
        quad.step(cmd)
        k += 1
        pos = quad.position
        collided = sdf.query(pos) < VEHICLE.radius_m
        outside = ~grid.region.contains(pos)
        arrived = np.linalg.norm(pos - goal, axis=1) <= PROTOCOL.success_radius_m
        if record:
            v = quad.velocity[live]
            fast = np.hypot(v[:, 0], v[:, 1]) > 1.0
            yaw_err.extend(np.abs(wrap_angle(np.arctan2(v[fast, 1], v[fast, 0]) - quad.yaw[live][fast])))
        for i in live:
            if collided[i]:
                status[i] = "collision"
            elif outside[i]:
                status[i] = "out_of_bounds"
            elif arrived[i]:
                status[i] = "success"
            elif k * VEHICLE.control_dt_s >= limit[i] - 1e-9:
                status[i] = "timeout"
            if status[i] != "running":
                steps[i] = k
    return status, steps, np.array(yaw_err)


# ---------------------------------------------------------------------------------------
# planning


def test_shortcut_of_a_straight_free_line_keeps_its_ends(room):
    grid, sdf = room
    pts = np.linspace([1.0, 1.0, 1.0], [3.0, 1.5, 1.5], 30)
    keep = shortcut(pts, sdf.query(pts).astype(float), ClearanceCheck(sdf, grid), 1.0)
    assert keep == [0, 29]


def test_reference_is_feasible_and_clear(room):
    grid, sdf = room
    expert = ExpertPilot(grid, sdf, VEHICLE)
    start, goal = np.array([3.0, 1.0, 1.0]), np.array([8.0, 1.5, 2.0])  # through the door
    ref = expert.plan(start, goal)
    st = ExpertSettings()
    assert np.allclose(ref.p[0], start) and np.allclose(ref.p[-1], goal)
    speed = np.linalg.norm(ref.v, axis=1)
    assert speed[0] == 0 and speed[-1] == 0 and speed.max() <= st.cruise_speed_m_s + 1e-9
    assert speed.max() > 1.0
    assert (ref.v[:, 2] <= VEHICLE.max_speed_up_m_s).all() and (ref.v[:, 2] >= -VEHICLE.max_speed_down_m_s).all()
    tangential = np.abs(np.diff(speed) / np.diff(ref.t))
    assert tangential.max() <= st.accel_fraction * min(VEHICLE.max_accel_xy_m_s2, VEHICLE.max_accel_z_m_s2) + 1e-6
    assert np.linalg.norm(ref.a[:, :2], axis=1).max() < VEHICLE.max_accel_xy_m_s2
    assert (sdf.query(ref.p) >= grid.clearance_m - 0.03).all()
    assert grid.region.contains(ref.p).all()
    door = ref.p[(ref.p[:, 0] > 6.0) & (ref.p[:, 0] < 6.4)]
    assert len(door) and (door[:, 1] > 6.5).all() and (door[:, 1] < 7.5).all() and (door[:, 2] < 2.0).all()
    # smoothing shortened the grid path and stayed near the A* length
    assert ref.length_m < 1.05 * sum(np.linalg.norm(np.diff(expert.waypoints, axis=0), axis=1))


def test_commands_are_float32_limited_and_deterministic(room):
    grid, sdf = room
    task = sample_tasks("room", grid, 1, seed=4, settings=PROTOCOL)[0]
    runs = []
    for _ in range(2):
        expert = ExpertPilot(grid, sdf, VEHICLE)
        expert.reset(task)
        quad = QuadrotorBatch(VEHICLE, 1)
        quad.reset(task.start_position[None], np.array([task.start_yaw]))
        cmds = []
        for _ in range(150):
            c = expert.act(quad.position[0], quad.velocity[0], float(quad.yaw[0]))
            assert c.dtype == np.float32 and c.shape == (4,) and np.isfinite(c).all()
            assert math.hypot(c[0], c[1]) <= VEHICLE.max_speed_xy_m_s + 1e-5
            assert -VEHICLE.max_speed_down_m_s - 1e-5 <= c[2] <= VEHICLE.max_speed_up_m_s + 1e-5
            assert abs(c[3]) <= VEHICLE.max_yaw_rate_rad_s + 1e-5
            cmds.append(c)
            quad.step(c[None].astype(np.float64))
        runs.append(np.array(cmds))
    assert np.array_equal(runs[0], runs[1])


def test_act_before_reset_is_an_error(room):
    with pytest.raises(RuntimeError, match="reset"):
        ExpertPilot(*room, VEHICLE).act(np.zeros(3), np.zeros(3), 0.0)


def test_expert_flies_the_room(room):
    grid, sdf = room
    tasks = sample_tasks("room", grid, 20, seed=0, settings=PROTOCOL)
    status, steps, yaw_err = fly(tasks, grid, sdf, record=True)
    assert (status == "success").all(), status
    # it faces where it flies
    assert np.mean(yaw_err < math.radians(30)) > 0.9


# ---------------------------------------------------------------------------------------
# closed loop on the synthetic scenes (the acceptance: SR >= 95 %, CR <= 2 %)

EPISODES = 50


@pytest.fixture(scope="module")
def sdf_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("sdf-cache")


@pytest.mark.parametrize("category", ["indoor", "urban", "vegetation"])
@pytest.mark.slow
def test_expert_success_on_synthetic_scenes(category, tmp_path_factory, sdf_cache):
    t0 = time.perf_counter()
    folder = tmp_path_factory.mktemp(category) / "scene"
    make_scene(category, 0, folder, gaussians_per_m2=5)
    scene = Scene.load(folder)
    sdf = SignedDistanceField.for_scene(scene, resolution_m=PROTOCOL.task.grid_resolution_m, cache_dir=sdf_cache)
    grid = NavigableGrid.for_scene(scene, sdf, PROTOCOL.task, VEHICLE.radius_m)
    t1 = time.perf_counter()
    tasks = sample_tasks(scene, grid, EPISODES, seed=0, settings=PROTOCOL)
    t2 = time.perf_counter()
    status, steps, _ = fly(tasks, grid, sdf)
    t3 = time.perf_counter()
    sr, cr = np.mean(status == "success"), np.mean(status == "collision")
    mean_episode_s = steps.mean() * VEHICLE.control_dt_s
    print(f"\n{category}: SR {sr:.2f} CR {cr:.2f} OB {np.mean(status == 'out_of_bounds'):.2f} "
          f"timeout {np.mean(status == 'timeout'):.2f}; mean episode {mean_episode_s:.1f} s sim; "
          f"scene+SDF+grid {t1 - t0:.1f} s, sampling {t2 - t1:.1f} s, planning+flight {t3 - t2:.1f} s")
    assert sr >= 0.95, dict(zip(*np.unique(status, return_counts=True)))
    assert cr <= 0.02


class _PythonTracker:
    """The tracker as it was written in numpy / Python before it was compiled: the reference
    the compiled :meth:`ExpertPilot.act` must equal bit for bit."""

    def __init__(self, expert: ExpertPilot, task) -> None:
        self.e, self.ref = expert, expert.reference
        self.tau, self.rate, self.yaw_target = 0.0, None, float(task.start_yaw)

    def sample(self, tau):
        ref = self.ref
        if tau >= ref.t[-1]:
            return ref.p[-1], np.zeros(3), np.zeros(3), float(ref.heading[-1])
        i = int(np.searchsorted(ref.t, tau, side="right")) - 1
        i = min(max(i, 0), len(ref.t) - 2)
        w = (tau - ref.t[i]) / max(ref.t[i + 1] - ref.t[i], 1e-12)
        return (ref.p[i] + w * (ref.p[i + 1] - ref.p[i]), ref.v[i] + w * (ref.v[i + 1] - ref.v[i]),
                ref.a[i] + w * (ref.a[i + 1] - ref.a[i]), float(ref.heading[i]))

    def act(self, position, yaw):
        st, veh, dt = self.e.settings, self.e.vehicle, self.e.dt
        p_ref, v_ref, a_ref, heading = self.sample(self.tau)
        err = p_ref - np.asarray(position, dtype=np.float64)
        if not math.isnan(heading):
            self.yaw_target = heading
        yaw_err = float(wrap_angle(self.yaw_target - yaw))
        e0, e1 = st.governor_error_m
        g_err = float(np.clip((e1 - np.linalg.norm(err)) / (e1 - e0), 0.0, 1.0))
        y0, y1 = np.radians(st.governor_yaw_deg)
        g_yaw = float(np.clip((y1 - abs(yaw_err)) / (y1 - y0), 0.0, 1.0))
        target = min(g_err, g_yaw)
        slew = st.governor_slew_per_s * dt
        if self.rate is None:
            self.rate = target
        self.rate = float(np.clip(target, self.rate - slew, self.rate + slew))
        cmd_map = self.rate * (v_ref + veh.velocity_time_constant_s * a_ref) + st.position_gain * err
        vmax = 0.95 * veh.max_speed_xy_m_s
        sxy = math.hypot(cmd_map[0], cmd_map[1])
        if sxy > vmax:
            cmd_map[:2] *= vmax / sxy
        cmd_map[2] = np.clip(cmd_map[2], -0.95 * veh.max_speed_down_m_s, 0.95 * veh.max_speed_up_m_s)
        yaw_rate = float(np.clip(st.yaw_gain * yaw_err, -0.95 * veh.max_yaw_rate_rad_s,
                                 0.95 * veh.max_yaw_rate_rad_s))
        psi = yaw + 0.5 * dt * yaw_rate
        c, s = math.cos(psi), math.sin(psi)
        cmd = np.array([c * cmd_map[0] + s * cmd_map[1], -s * cmd_map[0] + c * cmd_map[1], cmd_map[2], yaw_rate],
                       dtype=np.float32)
        self.tau = min(self.tau + self.rate * dt, float(self.ref.t[-1]))
        return cmd


def test_compiled_tracker_equals_the_python_one_bit_for_bit(room):
    """Near the reference, far off it (the horizontal limit, which math.hypot decides), facing
    any way (yaw wrap), and past the reference's end."""
    grid, sdf = room
    rng = np.random.default_rng(5)
    for task in sample_tasks("room", grid, 3, seed=2, settings=PROTOCOL):
        expert = ExpertPilot(grid, sdf, VEHICLE)
        expert.reset(task)
        python = _PythonTracker(expert, task)
        ref = expert.reference
        for k in range(int(ref.duration_s / expert.dt) + 200):
            j = min(k, len(ref.p) - 1)
            scale = (0.0, 0.02, 0.3, 1.5, 6.0)[k % 5]
            pos = (ref.p[j] + rng.normal(size=3) * scale).astype(np.float32).astype(np.float64)
            yaw = (float(ref.heading[j]) + rng.normal() * 0.4, np.pi, -np.pi, rng.uniform(-6, 6))[k % 4]
            expected = python.act(pos, yaw)
            got = expert.act(pos, np.zeros(3), yaw)
            assert got.dtype == np.float32 and got.tobytes() == expected.tobytes(), (k, got, expected)
            state = np.zeros(13, np.float32)
            state[0:3] = pos
            state[3:7] = [0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2)]
            x, y, z, w = (float(v) for v in state[3:7])
            yaw32 = math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
            expected = python.act(state[0:3], yaw32)
            got = expert.act_on_state(state)
            assert got.shape == (1, 4) and got.tobytes() == expected.tobytes(), (k, got, expected)


class _NumpyCheck(ClearanceCheck):
    """A ClearanceCheck that is not exactly one: shortcut and the check take the numpy path."""

    def __call__(self, points, required_m):
        return self.check_numpy(points, required_m)


@pytest.mark.parametrize("margin", [0.05, 0.0])
def test_compiled_clearance_check_and_shortcut_equal_numpy(room, margin):
    """Including numpy's float32 comparison of the SDF with a Python float (NEP 50) and its
    float64 one with a numpy float64, at required values on the float32 rounding edge."""
    from dataclasses import replace

    grid, sdf = room
    grid = replace(grid, boundary_margin_m=margin)
    check, reference = ClearanceCheck(sdf, grid), _NumpyCheck(sdf, grid)
    rng = np.random.default_rng(11)
    lo = np.r_[grid.region.polygon.min(0) - 0.5, grid.region.z_min - 0.3]
    hi = np.r_[grid.region.polygon.max(0) + 0.5, grid.region.z_max + 0.3]
    agree = {True: 0, False: 0}
    for _ in range(400):
        pts = rng.uniform(lo, hi, (int(rng.integers(1, 40)), 3))
        if rng.random() < 0.7:  # mostly inside the region, where the SDF decides
            pts = rng.uniform([0.1, 0.1, 0.6], [9.9, 7.9, 2.4], pts.shape)
        d = float(np.min(sdf.query(pts)))
        for required in (d, d + 1e-9, d - 1e-9, np.float64(d + 1e-9), np.float64(d), np.float32(d), 0.0,
                         float(np.float32(d)) + 2e-8):
            got, expected = check(pts, required), reference(pts, required)
            assert got == expected, (pts, required)
            agree[got] += 1
    assert agree[True] > 100 and agree[False] > 100
    # shortcut over a random walk through the room, with float and float64 caps
    for trial in range(20):
        steps = rng.normal(scale=0.4, size=(40, 3)) * [1, 1, 0.2]
        pts = np.clip(np.array([1.0, 1.0, 1.5]) + np.cumsum(steps, axis=0), [0.2, 0.2, 0.7], [9.8, 7.8, 2.3])
        clearance = np.asarray(sdf.query(pts), dtype=np.float64)
        for cap in (0.75, np.float64(0.6), 5.0):
            assert shortcut(pts, clearance, check, cap) == shortcut(pts, clearance, reference, cap)
