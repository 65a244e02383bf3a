"""FlightSim (fused kernel) equals the unfused flight model plus CollisionChecker."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from airplay.scene.spec import NavigableRegion
from airplay.episode_status import EpisodeStatus
from airplay.sim.collision import CollisionChecker
from airplay.sim.dynamics import PARALLEL_MIN_VEHICLES, QuadrotorBatch, VehicleParams
from airplay.sim.flight import CODE_STATUS, FlightSim
from airplay.sim.sdf import SignedDistanceField


@pytest.fixture(scope="module")
def checker():
    pillar = trimesh.creation.box(extents=(1.0, 1.0, 6.0))
    pillar.apply_translation((3.0, 0.0, 3.0))
    sdf = SignedDistanceField.from_mesh(pillar, [-6, -6, -1], [6, 6, 6], 0.1)
    region = NavigableRegion(np.array([[-5.0, -5], [5, -5], [5, 5], [-5, 5]]), 0.5, 4.0)
    return CollisionChecker(sdf, region, 0.25)


@pytest.mark.parametrize("n", [7, PARALLEL_MIN_VEHICLES])
def test_fused_equals_unfused(checker, n):
    params = VehicleParams()
    rng = np.random.default_rng(1)
    starts = np.column_stack([rng.uniform(-4, 1.5, n), rng.uniform(-4, 4, n), rng.uniform(1, 3, n)])
    yaws = rng.uniform(-np.pi, np.pi, n)
    fused, plain = FlightSim(params, checker, n), QuadrotorBatch(params, n)
    fused.reset(starts, yaws)
    plain.reset(starts, yaws)
    seen = set()
    for _ in range(150):
        cmd = rng.uniform([0.5, -2, -0.5, -1], [3, 2, 1.5, 1], (n, 4))
        codes = fused.step(cmd)
        plain.step(cmd)
        np.testing.assert_array_equal(fused.vehicles.state, plain.state)
        expected = checker.status(plain.position)
        assert [CODE_STATUS[int(c)] for c in codes] == expected
        seen.update(expected)
    if n >= 100:  # enough vehicles that some crash and some leave the region
        assert {EpisodeStatus.RUNNING, EpisodeStatus.COLLISION, EpisodeStatus.OUT_OF_BOUNDS} <= seen


def test_non_finite_command_leaves_state_untouched(checker):
    sim = FlightSim(VehicleParams(), checker, 2)
    sim.reset(np.array([[0.0, 0, 2], [1, 1, 2]]), np.zeros(2))
    before = sim.vehicles.state.copy()
    with pytest.raises(ValueError, match="non-finite"):
        sim.step(np.array([[1.0, 0, 0, 0], [np.inf, 0, 0, 0]]))
    np.testing.assert_array_equal(sim.vehicles.state, before)


def test_reset_reports_a_start_inside_an_obstacle(checker):
    sim = FlightSim(VehicleParams(), checker, 2)
    codes = sim.reset(np.array([[3.0, 0.0, 2.0], [0.0, 0.0, 2.0]]), np.zeros(2))
    assert [CODE_STATUS[int(c)] for c in codes] == [EpisodeStatus.COLLISION, EpisodeStatus.RUNNING]


def test_step_observe_equals_step_and_the_numpy_it_replaces(checker):
    """The fused one-vehicle step (AirPlayEnv.step) is bit-identical to FlightSim.step followed by
    the environment's former numpy (the float32 state vector, concatenate + astype, the goal offset
    and the yaw), and its norms of the motion and of goal - position are np.linalg.norm's within
    2 ulp: numpy's norm sums through the CPU's BLAS dot kernel, whose rounding differs between
    CPUs (1 ulp apart on an AMD EPYC)."""
    params = VehicleParams()
    rng = np.random.default_rng(3)
    fused, plain = FlightSim(params, checker, 1), FlightSim(params, checker, 1)
    goal = np.array([-3.0, 2.5, 2.0])
    for start in ([0.0, 0.0, 2.0], [-2.0, 3.0, 1.0]):
        yaw0 = rng.uniform(-np.pi, np.pi)
        fused.reset(np.array([start]), np.array([yaw0]))
        plain.reset(np.array([start]), np.array([yaw0]))
        for k in range(200):
            cmd = rng.uniform([-1, -2, -1, -1.6], [3, 2, 1.5, 1.6], 4).astype(np.float32)
            if k % 2:
                cmd = cmd.astype(np.float64)
            state = np.empty(13, np.float32)
            before = plain.vehicles.position[0].copy()
            code, moved, distance, gx, gy, gz, yaw = fused.step_observe(cmd, goal, state)
            expected_code = int(plain.step(cmd[None])[0])
            assert int(fused.codes[0]) == expected_code
            v = plain.vehicles
            np.testing.assert_array_equal(fused.vehicles.state, v.state)
            np.testing.assert_array_equal(fused.vehicles.rotation, v.rotation)
            assert fused.vehicles.time_s == v.time_s
            assert code == expected_code
            expected_state = np.concatenate([v.position[0], v.quat_xyzw[0], v.velocity[0],
                                             v.angular_velocity_body[0]]).astype(np.float32)
            assert state.tobytes() == expected_state.tobytes()
            np.testing.assert_array_max_ulp(np.float64(moved), np.linalg.norm(v.position[0] - before), maxulp=2)
            np.testing.assert_array_max_ulp(np.float64(distance), np.linalg.norm(goal - v.position[0]), maxulp=2)
            assert [gx, gy, gz] == (goal - v.position[0]).tolist() and yaw == float(v.yaw[0])
            if code:
                break
    with pytest.raises(ValueError, match="non-finite"):
        fused.step_observe(np.array([np.nan, 0.0, 0.0, 0.0]), goal, np.empty(13, np.float32))
