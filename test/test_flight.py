"""FlightSim (fused kernel) equals the unfused flight model plus CollisionChecker."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from airplay.scene.spec import NavigableRegion
from airplay.sim.collision import CollisionChecker, EpisodeStatus
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
