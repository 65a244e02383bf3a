"""The flight model (airplay.sim.dynamics) and the collision / bounds checks (airplay.sim.collision)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import trimesh

from airplay.episode_status import STATUS_COLOURS, EpisodeStatus
from airplay.eval.metrics import STATUSES
from airplay.scene.spec import NavigableRegion
from airplay.sim.collision import CollisionChecker
from airplay.sim.dynamics import (
    PARALLEL_MIN_VEHICLES,
    QuadrotorBatch,
    VehicleParams,
    _step_parallel,
    _step_serial,
    load_vehicle_params,
)
from airplay.sim.sdf import SignedDistanceField

P = VehicleParams()
DT = P.control_dt_s


def fly(cmd, steps: int, yaw0: float = 0.0, params: VehicleParams = P, record: bool = False):
    """One vehicle from rest at the origin under a constant command; the batch (and the trace)."""
    quad = QuadrotorBatch(params, 1)
    quad.reset(np.zeros((1, 3)), np.array([yaw0]))
    cmd = np.asarray(cmd, dtype=float).reshape(1, 4)
    trace = []
    for _ in range(steps):
        quad.step(cmd)
        if record:
            trace.append(quad.state[0].copy())
    return (quad, np.array(trace)) if record else quad


def random_commands(rng, steps: int, n: int) -> np.ndarray:
    """Jumpy commands, partly beyond the limits, so that every limit is exercised."""
    lim = np.array([8.0, 8.0, 5.0, 3.0])
    return rng.uniform(-lim, lim, (steps, n, 4))


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    x, y, z, w = q.T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


# -- step response and limits ---------------------------------------------------------------


def test_velocity_converges_to_the_command():
    quad = fly([2.0, -1.0, 0.5, 0.0], 200)
    np.testing.assert_allclose(quad.velocity[0], [2.0, -1.0, 0.5], atol=1e-6)
    np.testing.assert_allclose(quad.acceleration[0], 0.0, atol=1e-5)
    assert quad.time_s == pytest.approx(200 * DT)


def test_first_order_response_before_the_acceleration_limit():
    """A small step stays under the acceleration limit: v(t) = v_cmd (1 - exp(-t / tau))."""
    _, trace = fly([0.1, 0.0, 0.0, 0.0], 25, record=True)
    t = DT * np.arange(1, 26)
    expected = 0.1 * (1.0 - np.exp(-t / P.velocity_time_constant_s))
    np.testing.assert_allclose(trace[:, 3], expected, atol=2e-3)  # Euler at 250 Hz against the exact lag


def test_acceleration_limit_per_control_step():
    rng = np.random.default_rng(1)
    quad = QuadrotorBatch(P, 64)
    quad.reset(np.zeros((64, 3)), rng.uniform(-math.pi, math.pi, 64))
    eps = 1e-9
    for cmd in random_commands(rng, 150, 64):
        v0 = quad.velocity.copy()
        quad.step(cmd)
        dv = quad.velocity - v0
        assert np.all(np.linalg.norm(dv[:, :2], axis=1) <= P.max_accel_xy_m_s2 * DT + eps)
        assert np.all(np.abs(dv[:, 2]) <= P.max_accel_z_m_s2 * DT + eps)
        assert np.all(np.linalg.norm(quad.acceleration[:, :2], axis=1) <= P.max_accel_xy_m_s2 + eps)


@pytest.mark.parametrize("cmd, expected", [
    ([20.0, 0.0, 0.0, 0.0], [P.max_speed_xy_m_s, 0.0, 0.0]),
    ([4.0, 4.0, 0.0, 0.0], [P.max_speed_xy_m_s / math.sqrt(2)] * 2 + [0.0]),  # the norm, not per axis
    ([0.0, 0.0, 10.0, 0.0], [0.0, 0.0, P.max_speed_up_m_s]),
    ([0.0, 0.0, -10.0, 0.0], [0.0, 0.0, -P.max_speed_down_m_s]),
])
def test_speed_limits(cmd, expected):
    quad, trace = fly(cmd, 250, record=True)
    np.testing.assert_allclose(quad.velocity[0], expected, atol=1e-6)
    assert np.all(np.linalg.norm(trace[:, 3:5], axis=1) <= P.max_speed_xy_m_s + 1e-9)
    assert np.all(trace[:, 5] <= P.max_speed_up_m_s + 1e-9)
    assert np.all(trace[:, 5] >= -P.max_speed_down_m_s - 1e-9)


def test_speed_limits_under_random_commands():
    rng = np.random.default_rng(2)
    quad = QuadrotorBatch(P, 32)
    quad.reset(np.zeros((32, 3)), np.zeros(32))
    for cmd in random_commands(rng, 200, 32):
        quad.step(cmd)
        assert np.all(np.linalg.norm(quad.velocity[:, :2], axis=1) <= P.max_speed_xy_m_s + 1e-9)
        assert np.all((quad.velocity[:, 2] <= P.max_speed_up_m_s + 1e-9) & (quad.velocity[:, 2] >= -P.max_speed_down_m_s - 1e-9))
        assert np.all(np.abs(quad.yaw_rate) <= P.max_yaw_rate_rad_s + 1e-9)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_yaw_rate_limit(sign):
    quad, trace = fly([0.0, 0.0, 0.0, sign * 10.0], 100, record=True)
    assert np.all(np.abs(trace[:, 10]) <= P.max_yaw_rate_rad_s + 1e-12)
    assert quad.yaw_rate[0] == pytest.approx(sign * P.max_yaw_rate_rad_s, abs=1e-6)


def test_yaw_rate_converges_and_integrates():
    quad, trace = fly([0.0, 0.0, 0.0, 0.5], 300, record=True)
    assert quad.yaw_rate[0] == pytest.approx(0.5, abs=1e-9)
    # In steady state the heading advances by rate * period each control step.
    assert trace[-1, 9] - trace[-2, 9] == pytest.approx(0.5 * DT, abs=1e-9)


# -- frames -----------------------------------------------------------------------------------


@pytest.mark.parametrize("yaw0, cmd, direction", [
    (math.pi / 2, [1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0]),   # forward, heading north: +y
    (0.0, [0.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0]),           # left, heading east: +y
    (0.0, [1.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0]),           # forward, heading east: +x
    (math.pi, [1.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.0]),      # forward, heading west: -x
    (math.pi / 2, [0.0, 1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]),  # left, heading north: -x (west)
    (0.7, [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0]),           # vz up: +z whatever the heading
])
def test_command_frames(yaw0, cmd, direction):
    quad = fly(cmd, 150, yaw0=yaw0)
    np.testing.assert_allclose(quad.velocity[0], direction, atol=1e-6)
    moved = quad.position[0] / np.linalg.norm(quad.position[0])
    np.testing.assert_allclose(moved, direction, atol=1e-6)
    assert quad.yaw[0] == pytest.approx(yaw0)


def test_yaw_wraps_to_minus_pi_pi():
    for rate, yaw0 in [(1.5, 3.0), (-1.5, -3.0), (1.2, -1.0)]:
        quad, trace = fly([1.0, 0.0, 0.0, rate], 400, yaw0=yaw0, record=True)
        yaws = trace[:, 9]
        assert np.all((yaws > -math.pi) & (yaws <= math.pi))
        # It wrapped (covered more than a turn) and the heading is continuous modulo 2 pi.
        steps = np.diff(np.concatenate([[yaw0], yaws]))
        wrapped = np.mod(steps + math.pi, 2 * math.pi) - math.pi
        assert np.all(np.abs(wrapped) <= P.max_yaw_rate_rad_s * DT + 1e-12)
        assert abs(np.sum(wrapped)) > 2 * math.pi
        assert np.any(np.abs(steps) > math.pi)


def test_reset_wraps_yaw_and_minus_pi_is_pi():
    quad = QuadrotorBatch(P, 4)
    quad.reset(np.zeros((4, 3)), np.array([-math.pi, 7.0, -4.0, 0.3]))
    np.testing.assert_allclose(quad.yaw, [math.pi, 7.0 - 2 * math.pi, 2 * math.pi - 4.0, 0.3], atol=1e-12)
    assert quad.yaw[3] == 0.3
    quad.step(np.zeros((4, 4)))
    assert quad.yaw[0] == math.pi  # no rate: stays at +pi, never -pi


# -- attitude ---------------------------------------------------------------------------------


@pytest.mark.parametrize("yaw0", [0.0, math.pi / 2, -2.5])
def test_accelerating_forward_pitches_nose_down(yaw0):
    quad = fly([3.0, 0.0, 0.0, 0.0], 2, yaw0=yaw0)
    x_axis = quad.rotation[0][:, 0]
    assert x_axis[2] < -0.05  # nose down
    heading = np.array([math.cos(yaw0), math.sin(yaw0)])
    assert np.dot(x_axis[:2], heading) > 0.95
    # Thrust axis along a + g z: tilted forward, i.e. towards the acceleration.
    a = quad.acceleration[0]
    thrust = a + [0.0, 0.0, P.gravity_m_s2]
    np.testing.assert_allclose(quad.rotation[0][:, 2], thrust / np.linalg.norm(thrust), atol=1e-12)
    assert np.dot(quad.rotation[0][:2, 2], heading) > 0.0


def test_braking_pitches_nose_up_and_hover_is_level():
    quad = fly([3.0, 0.0, 0.0, 0.0], 150)
    np.testing.assert_allclose(quad.rotation[0], np.eye(3), atol=1e-5)  # steady flight: no acceleration, level
    quad.step(np.zeros((1, 4)))
    assert quad.rotation[0][2, 0] > 0.05  # decelerating: nose up


def test_accelerating_left_rolls_left():
    quad = fly([0.0, 3.0, 0.0, 0.0], 2)
    y_axis = quad.rotation[0][:, 1]
    assert y_axis[2] < -0.05  # left side down


def test_quaternion_unit_and_matches_rotation():
    rng = np.random.default_rng(3)
    n = 256
    quad = QuadrotorBatch(P, n)
    yaws = rng.uniform(-math.pi, math.pi, n)
    yaws[:4] = [math.pi, -math.pi, math.pi - 1e-9, 0.0]  # 180-degree rotations included
    quad.reset(np.zeros((n, 3)), yaws)
    for cmd in [None] + list(random_commands(rng, 30, n)):
        if cmd is not None:
            quad.step(cmd)
        q = quad.quat_xyzw
        np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(quat_to_matrix(q), quad.rotation, atol=1e-9)
        r = quad.rotation
        np.testing.assert_allclose(np.einsum("nji,njk->nik", r, r), np.broadcast_to(np.eye(3), r.shape), atol=1e-12)
        np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-12)


def test_quaternion_of_heading_west():
    quad = QuadrotorBatch(P, 1)
    quad.reset(np.zeros((1, 3)), np.array([math.pi]))
    np.testing.assert_allclose(np.abs(quad.quat_xyzw[0]), [0.0, 0.0, 1.0, 0.0], atol=1e-12)


def test_angular_velocity_in_a_steady_turn():
    quad = fly([0.0, 0.0, 0.0, 1.0], 100)  # turning on the spot
    np.testing.assert_allclose(quad.angular_velocity_body[0], [0.0, 0.0, 1.0], atol=1e-3)
    quad = fly([2.0, 0.0, 0.0, 0.8], 200)  # a coordinated turn: banked, body z tilted
    w = quad.angular_velocity_body[0]
    tilt = math.acos(quad.rotation[0][2, 2])
    assert tilt > 0.1
    # The map-frame rate is the yaw rate about map z; in the body frame that is R^T (0, 0, 0.8).
    np.testing.assert_allclose(w, quad.rotation[0].T @ [0.0, 0.0, 0.8], atol=2e-3)
    assert w[2] == pytest.approx(0.8 * math.cos(tilt), abs=2e-3)


# -- batches, determinism, errors --------------------------------------------------------------


@pytest.mark.parametrize("n, kernel", [(17, _step_serial), (PARALLEL_MIN_VEHICLES, _step_parallel)])
def test_batch_equals_single_vehicles_bit_for_bit(n, kernel):
    rng = np.random.default_rng(4)
    starts = rng.uniform(-10, 10, (n, 3))
    yaws = rng.uniform(-math.pi, math.pi, n)
    cmds = random_commands(rng, 12, n)
    batch = QuadrotorBatch(P, n)
    assert batch._kernel is kernel
    batch.reset(starts, yaws)
    for cmd in cmds:
        batch.step(cmd)
    singles = np.empty((n, 11)), np.empty((n, 3, 3)), np.empty((n, 3))
    for i in range(n):
        one = QuadrotorBatch(P, 1)
        assert one._kernel is _step_serial
        one.reset(starts[i:i + 1], yaws[i:i + 1])
        for cmd in cmds:
            one.step(cmd[i:i + 1])
        singles[0][i], singles[1][i], singles[2][i] = one.state[0], one.rotation[0], one.angular_velocity_body[0]
    assert np.array_equal(batch.state, singles[0])
    assert np.array_equal(batch.rotation, singles[1])
    assert np.array_equal(batch.angular_velocity_body, singles[2])


def test_deterministic():
    def run():
        rng = np.random.default_rng(5)
        quad = QuadrotorBatch(P, 8)
        quad.reset(rng.uniform(-1, 1, (8, 3)), rng.uniform(-3, 3, 8))
        for cmd in random_commands(rng, 50, 8):
            quad.step(cmd)
        return quad.state.copy(), quad.rotation.copy(), quad.angular_velocity_body.copy(), quad.quat_xyzw

    for a, b in zip(run(), run()):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_command_raises_and_leaves_the_state(bad):
    quad = fly([1.0, 0.0, 0.0, 0.0], 5)
    before = quad.state.copy(), quad.time_s
    cmd = np.array([[1.0, 0.0, bad, 0.0]])
    with pytest.raises(ValueError, match="non-finite"):
        quad.step(cmd)
    assert np.array_equal(quad.state, before[0]) and quad.time_s == before[1]


def test_command_shape_and_vehicle_count():
    with pytest.raises(ValueError):
        QuadrotorBatch(P, 0)
    quad = QuadrotorBatch(P, 2)
    with pytest.raises(ValueError):
        quad.step(np.zeros((3, 4)))


def test_odometry_is_the_concatenated_state_rows():
    q = QuadrotorBatch(VehicleParams(), 3)
    q.reset(np.array([[0.0, 0, 1], [1, 2, 3], [-1, 0, 2]]), np.array([0.3, -3.0, np.pi]))
    rng = np.random.default_rng(0)
    for _ in range(40):
        q.step(rng.uniform(-2, 2, (3, 4)))
    for i in range(3):
        expected = np.concatenate([q.position[i], q.quat_xyzw[i], q.velocity[i], q.angular_velocity_body[i]])
        assert q.odometry(i).dtype == np.float64 and q.odometry(i).tobytes() == expected.tobytes()
    assert q.odometry(-1).tobytes() == q.odometry(2).tobytes()
    with pytest.raises(IndexError):
        q.odometry(3)


def test_default_config_loads():
    params = load_vehicle_params()
    assert params.substeps == 5 and params.control_rate_hz == 50.0
    assert params.radius_m > 0


def write_config(tmp_path, **changes):
    import yaml

    data = yaml.safe_load(load_vehicle_params.__globals__["config_dir"]().joinpath("vehicle.yaml").read_text())
    data.update(changes)
    path = tmp_path / "vehicle.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("changes, field", [
    ({"max_speed_sideways": 2.0}, "max_speed_sideways"),   # unknown key
    ({"max_accel_xy_m_s2": -1.0}, "max_accel_xy_m_s2"),    # negative
    ({"radius_m": 0.0}, "radius_m"),                      # zero
    ({"velocity_time_constant_s": "fast"}, "velocity_time_constant_s"),  # not a number
    ({"inner_rate_hz": 120.0}, "inner_rate_hz"),          # not a multiple of the control rate
])
def test_config_errors_name_the_file_and_the_field(tmp_path, changes, field):
    path = write_config(tmp_path, **changes)
    with pytest.raises(ValueError) as err:
        load_vehicle_params(path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_config_missing_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="nope.yaml"):
        load_vehicle_params(tmp_path / "nope.yaml")


# -- collision and bounds ------------------------------------------------------------------------

RADIUS = 0.25


@pytest.fixture(scope="module")
def box_checker():
    """A 2 m cube standing on the origin (x, y in [-1, 1], z in [0, 2]), another cube outside
    the region at x = 5, the region the square |x|, |y| <= 4 and the band z in [0.5, 4]."""
    cube = trimesh.creation.box(extents=(2.0, 2.0, 2.0))
    cube.apply_translation((0.0, 0.0, 1.0))
    outside = trimesh.creation.box(extents=(1.0, 1.0, 1.0))
    outside.apply_translation((5.0, 0.0, 1.0))
    sdf = SignedDistanceField.from_mesh(trimesh.util.concatenate([cube, outside]), [-6, -6, -1], [6, 6, 5], 0.1)
    region = NavigableRegion(np.array([[-4.0, -4.0], [4.0, -4.0], [4.0, 4.0], [-4.0, 4.0]]), 0.5, 4.0)
    return CollisionChecker(sdf, region, RADIUS)


def test_clearance_matches_known_distances(box_checker):
    pts = np.array([[2.0, 0.0, 1.0], [0.0, -3.0, 1.5], [0.0, 0.0, 3.0], [1.5, 1.5, 1.0], [0.0, 0.0, 1.0]])
    distance = np.array([1.0, 2.0, 1.0, math.sqrt(0.5), -1.0])  # exact, to the cube
    np.testing.assert_allclose(box_checker.clearance(pts), distance - RADIUS, atol=0.13)


def test_collision_out_of_bounds_and_running(box_checker):
    cases = [
        ([0.0, 0.0, 1.0], EpisodeStatus.COLLISION),       # inside the cube
        ([1.05, 0.0, 1.0], EpisodeStatus.COLLISION),      # 0.05 m from the face: the sphere overlaps
        ([0.0, 0.0, 2.1], EpisodeStatus.COLLISION),       # just above the top
        ([1.6, 0.0, 1.0], EpisodeStatus.RUNNING),         # 0.6 m from the face
        ([3.0, 3.0, 2.0], EpisodeStatus.RUNNING),
        ([4.5, 0.0, 2.0], EpisodeStatus.OUT_OF_BOUNDS),   # outside the polygon
        ([0.0, -4.2, 2.0], EpisodeStatus.OUT_OF_BOUNDS),
        ([3.0, 3.0, 4.5], EpisodeStatus.OUT_OF_BOUNDS),   # above the band
        ([3.0, 3.0, 0.4], EpisodeStatus.OUT_OF_BOUNDS),   # below the band
        ([5.0, 0.0, 1.0], EpisodeStatus.COLLISION),       # a crash outside the region is a crash
    ]
    pts = np.array([c[0] for c in cases])
    expected = [c[1] for c in cases]
    assert list(box_checker.status(pts)) == expected
    np.testing.assert_array_equal(box_checker.collided(pts), [s is EpisodeStatus.COLLISION for s in expected])
    np.testing.assert_array_equal(box_checker.out_of_bounds(pts)[:9],
                                  [s is EpisodeStatus.OUT_OF_BOUNDS for s in expected[:9]])
    for p, s in zip(pts, expected):  # one vehicle at a time, as the environment asks
        assert list(box_checker.status(p[None])) == [s]
        assert list(box_checker.status(p)) == [s]


def test_status_values_are_the_results_strings():
    assert [s.value for s in EpisodeStatus] == ["running", "success", "collision", "out_of_bounds", "timeout",
                                                "no_command", "stopped", "policy_error", "over_budget", "interrupted",
                                                "policy_stop"]
    assert STATUSES == ("success", "collision", "out_of_bounds", "timeout", "no_command", "stopped", "policy_error",
                        "over_budget")
    # one colour per result status, in that order, for the plots and the results page alike
    assert tuple(STATUS_COLOURS) == STATUSES and len(set(STATUS_COLOURS.values())) == len(STATUSES)
    # a str enum: equal to, formatted and JSON-encoded as its value
    assert EpisodeStatus.SUCCESS == "success" and f"{EpisodeStatus.TIMEOUT}" == str(EpisodeStatus.TIMEOUT) == "timeout"
    assert json.dumps({"status": EpisodeStatus.COLLISION}) == json.dumps({"status": "collision"})


def test_out_of_bounds_matches_the_region_rule():
    """The checker's compiled test is NavigableRegion.contains (even-odd), on a concave polygon."""
    poly = np.array([[0.0, 0.0], [6.0, 0.0], [6.0, 2.0], [2.0, 2.0], [2.0, 6.0], [0.0, 6.0]])  # an L
    region = NavigableRegion(poly, 1.0, 3.0)
    sdf = SignedDistanceField(np.zeros(3), 1.0, np.ones((2, 2, 2), np.float32))
    checker = CollisionChecker(sdf, region, RADIUS)
    rng = np.random.default_rng(6)
    pts = rng.uniform([-1, -1, 0], [7, 7, 4], (20000, 3))
    pts[:6, :2] = poly  # on the vertices
    pts[6:12, 2] = [1.0, 3.0, 0.999, 3.001, 2.0, 2.0]  # on the band's limits
    pts[12] = np.nan
    np.testing.assert_array_equal(checker.out_of_bounds(pts), ~region.contains(pts))
    assert checker.out_of_bounds([[4.0, 4.0, 2.0]])[0]  # in the L's notch
    assert not checker.out_of_bounds([[1.0, 5.0, 2.0]])[0]


def test_many_vehicles_equal_one_at_a_time(box_checker):
    """Large queries take the parallel paths; they must agree with single-vehicle calls."""
    pts = np.random.default_rng(7).uniform([-5, -5, 0], [5, 5, 4.5], (10000, 3))
    many = box_checker.clearance(pts), box_checker.out_of_bounds(pts)
    one = (np.array([box_checker.clearance(p[None])[0] for p in pts[:300]]),
           np.array([box_checker.out_of_bounds(p[None])[0] for p in pts[:300]]))
    assert np.array_equal(many[0][:300], one[0])
    assert np.array_equal(many[1][:300], one[1])


def test_radius_must_be_positive(box_checker):
    with pytest.raises(ValueError):
        CollisionChecker(box_checker.sdf, box_checker.region, 0.0)
