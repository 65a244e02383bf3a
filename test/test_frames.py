"""airplay.frames: yaw and heading of level and tilted attitudes, angle wrapping, the heading
frame, ENU/FLU <-> NED/FRD vectors and quaternions. References are built independently: rotation
matrices by hand from Euler angles, scipy's Rotation for the quaternions."""

import ast
import math
from pathlib import Path

import numpy as np
import pytest
from numba import njit
from numpy.testing import assert_allclose
from scipy.spatial.transform import Rotation

import airplay.frames as fr
from airplay.sim.dynamics import attitude_from_acceleration

TILTS = np.radians([5.0, 15.0, 30.0])


def rz(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def ry(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rx(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def quat_xyzw(r):
    return Rotation.from_matrix(r).as_quat()  # scipy: (x, y, z, w)


def angle_diff(a, b):
    return np.angle(np.exp(1j * (np.asarray(a) - np.asarray(b))))


def test_imports_only_math_and_numpy():
    """At module level math and numpy only (numba compiles the scalar functions); transforms3d
    only inside the Euler-angle conversions."""
    tree = ast.parse(Path(fr.__file__).read_text())

    def names(nodes):
        out = {a.name.split(".")[0] for n in nodes if isinstance(n, ast.Import) for a in n.names}
        return out | {n.module.split(".")[0] for n in nodes if isinstance(n, ast.ImportFrom)}

    assert names(tree.body) <= {"math", "numpy", "__future__"}, names(tree.body)
    assert names(ast.walk(tree)) <= {"math", "numpy", "__future__", "transforms3d"}, names(ast.walk(tree))


@pytest.mark.parametrize("yaw", [0.0, 0.3, math.pi / 2, 2.5, math.pi, -math.pi, -math.pi / 2, -0.01])
def test_level_yaw_and_heading_round_trip(yaw):
    q = fr.quat_xyzw_from_yaw(yaw)
    assert_allclose(q, quat_xyzw(rz(yaw)) * np.sign(quat_xyzw(rz(yaw))[3] or 1.0), atol=1e-15)
    assert angle_diff(fr.yaw_from_quat(*q), yaw) == pytest.approx(0.0, abs=1e-15)
    assert angle_diff(fr.heading_from_quat(*q), yaw) == pytest.approx(0.0, abs=1e-15)
    assert -math.pi <= fr.yaw_from_quat(*q) <= math.pi


def test_yaw_is_the_heading_of_the_body_x_axis_on_tilted_poses():
    """yaw_from_quat = direction of base_link's x axis projected on the horizontal plane =
    the Z-Y-X Euler yaw, for any roll and pitch (|pitch| < 90 deg)."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        yaw, pitch, roll = rng.uniform(-math.pi, math.pi), rng.uniform(-1.4, 1.4), rng.uniform(-math.pi, math.pi)
        r = rz(yaw) @ ry(pitch) @ rx(roll)
        q = quat_xyzw(r)
        x_axis = r[:, 0]
        assert angle_diff(fr.yaw_from_quat(*q), math.atan2(x_axis[1], x_axis[0])) == pytest.approx(0.0, abs=1e-12)
        assert angle_diff(fr.yaw_from_quat(*q), yaw) == pytest.approx(0.0, abs=1e-12)
        assert angle_diff(fr.yaw_from_quat(*-q), yaw) == pytest.approx(0.0, abs=1e-12)  # q and -q


def test_heading_is_perpendicular_to_the_body_y_axis_on_tilted_poses():
    """heading_from_quat = the horizontal direction perpendicular to base_link's y axis = the
    Z-X-Y Euler yaw (yaw, then roll, then pitch), for any roll (|roll| < 90 deg) and pitch."""
    rng = np.random.default_rng(2)
    for _ in range(300):
        yaw, roll, pitch = rng.uniform(-math.pi, math.pi), rng.uniform(-1.4, 1.4), rng.uniform(-math.pi, math.pi)
        r = rz(yaw) @ rx(roll) @ ry(pitch)
        h = fr.heading_from_quat(*quat_xyzw(r))
        assert abs(np.array([math.cos(h), math.sin(h), 0.0]) @ r[:, 1]) < 1e-12
        assert angle_diff(h, yaw) == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("tilt", TILTS)
def test_yaw_and_heading_agree_on_single_axis_tilts(tilt):
    for yaw in np.linspace(-math.pi, math.pi, 13):
        for r in (rz(yaw) @ ry(tilt), rz(yaw) @ rx(tilt)):  # pure pitch, pure roll
            q = quat_xyzw(r)
            assert angle_diff(fr.yaw_from_quat(*q), yaw) == pytest.approx(0.0, abs=1e-12)
            assert angle_diff(fr.heading_from_quat(*q), yaw) == pytest.approx(0.0, abs=1e-12)


def test_yaw_and_heading_differ_when_tilted_about_both_axes():
    """Pitch and roll together: the x axis is no longer perpendicular to y_b's horizontal
    direction, so the two angles differ (second order in the tilt)."""
    r = rz(0.4) @ ry(math.radians(15)) @ rx(math.radians(15))
    q = quat_xyzw(r)
    gap = abs(angle_diff(fr.yaw_from_quat(*q), fr.heading_from_quat(*q)))
    assert math.radians(1.0) < gap < math.radians(5.0)


def test_heading_recovers_the_simulator_yaw_on_tilted_attitudes():
    rng = np.random.default_rng(0)
    yaw = rng.uniform(-np.pi, np.pi, 200)
    accel = np.clip(rng.normal(0, 3, (200, 3)), -6.0, 6.0)  # m/s^2: tilted up to ~35 degrees, never upside down
    rot = attitude_from_acceleration(accel, yaw, 9.81)
    q = quat_xyzw(rot)
    assert_allclose(angle_diff(fr.headings_from_quats_xyzw(q), yaw), 0.0, atol=1e-9)
    assert_allclose(angle_diff([fr.heading_of_state(np.r_[0, 0, 0, qi, np.zeros(6)]) for qi in q], yaw),
                    0.0, atol=1e-9)
    gaps = np.abs(angle_diff([fr.yaw_from_quat(*qi) for qi in q], yaw))
    assert gaps.max() > 1e-4  # the Z-Y-X yaw is not the simulator's yaw once tilted both ways


def test_yaw_heading_gap_at_the_vehicle_acceleration_limits():
    """The gap the frames docstring quotes: at most ~6 degrees with |a_xy| <= 3 and |a_z| <= 4 m/s^2."""
    rng = np.random.default_rng(8)
    n = 20000
    ang, mag = rng.uniform(-np.pi, np.pi, n), 3.0 * np.sqrt(rng.uniform(0.0, 1.0, n))
    accel = np.c_[mag * np.cos(ang), mag * np.sin(ang), rng.uniform(-4.0, 4.0, n)]
    yaw = rng.uniform(-np.pi, np.pi, n)
    q = quat_xyzw(attitude_from_acceleration(accel, yaw, 9.81))
    gap = np.degrees(np.abs(angle_diff(fr.yaws_from_quats_xyzw(q), yaw)))
    assert 4.0 < gap.max() < 7.0


def test_batch_and_state_forms_match_the_scalar_ones():
    q = Rotation.random(100, random_state=3).as_quat()
    scalar_yaw = np.array([fr.yaw_from_quat(*qi) for qi in q])
    assert_allclose(fr.yaws_from_quats_xyzw(q), scalar_yaw, rtol=0, atol=1e-15)
    assert_allclose(fr.yaws_from_quats_xyzw(q.reshape(10, 10, 4)), scalar_yaw.reshape(10, 10), rtol=0, atol=1e-15)
    assert [fr.yaw_from_quat_xyzw(qi) for qi in q] == list(scalar_yaw)
    assert [fr.yaw_of_state(np.r_[1.0, 2.0, 3.0, qi, np.zeros(6)]) for qi in q] == list(scalar_yaw)
    scalar_heading = np.array([fr.heading_from_quat(*qi) for qi in q])
    assert_allclose(fr.headings_from_quats_xyzw(q), scalar_heading, rtol=0, atol=1e-15)
    # float32 states are read in float64
    s32 = np.r_[0.0, 0.0, 0.0, q[0], np.zeros(6)].astype(np.float32)
    assert fr.yaw_of_state(s32) == fr.yaw_from_quat(*(float(v) for v in s32[3:7]))


def test_wrap_angle_boundaries_and_range():
    assert fr.wrap_angle(math.pi) == -math.pi            # [-pi, pi): +pi maps to -pi
    assert fr.wrap_angle(-math.pi) == -math.pi
    assert fr.wrap_angle(0.0) == 0.0
    assert fr.wrap_angle(math.nextafter(math.pi, 0.0)) == -math.pi  # a + pi rounds to 2 pi: the same angle
    assert fr.wrap_angle(3 * math.pi) == pytest.approx(-math.pi, abs=1e-15)
    assert fr.wrap_angle(2 * math.pi) == pytest.approx(0.0, abs=1e-15)
    assert fr.wrap_angle(-3 * math.pi / 2) == pytest.approx(math.pi / 2, abs=1e-15)
    assert (fr.wrap_angle_deg(180.0), fr.wrap_angle_deg(-190.0), fr.wrap_angle_deg(540.0)) == (-180.0, 170.0, -180.0)
    a = np.random.default_rng(4).uniform(-50, 50, 2000)
    w = fr.wrap_angle(a)
    assert np.all((w >= -math.pi) & (w < math.pi))
    assert_allclose(np.cos(w), np.cos(a), atol=1e-12)
    assert_allclose(np.sin(w), np.sin(a), atol=1e-12)
    # float, numpy array and the numba-compiled form give the same bits
    compiled = njit(fr.wrap_angle)
    assert [fr.wrap_angle(float(v)) for v in a] == list(w) == [compiled(float(v)) for v in a]


def test_compiled_yaw_matches():
    compiled = njit(fr.yaw_from_quat)
    for q in Rotation.random(50, random_state=5).as_quat():
        assert compiled(*q) == fr.yaw_from_quat(*q)


def test_heading_frame_rotation():
    yaw = 0.7
    forward = np.array([math.cos(yaw), math.sin(yaw), 0.5])
    assert_allclose(fr.map_to_heading(forward, yaw), [1.0, 0.0, 0.5], atol=1e-15)
    left = np.array([-math.sin(yaw), math.cos(yaw), 0.0])
    assert_allclose(fr.map_to_heading(left, yaw), [0.0, 1.0, 0.0], atol=1e-15)
    # facing north: east is to the right (-y), heading frame z stays up
    assert_allclose(fr.map_to_heading([1.0, 0.0, 2.0], math.pi / 2), [0.0, -1.0, 2.0], atol=1e-15)
    rng = np.random.default_rng(6)
    v, yaws = rng.normal(size=(20, 5, 3)), rng.uniform(-4, 4, (20, 5))
    h = fr.map_to_heading(v, yaws)
    assert_allclose(fr.heading_to_map(h, yaws), v, atol=1e-12)
    assert_allclose(np.linalg.norm(h, axis=-1), np.linalg.norm(v, axis=-1))
    # the same as rotating by R_z(-yaw)
    assert_allclose(h[3, 2], rz(-yaws[3, 2]) @ v[3, 2], atol=1e-14)
    # the per-step form gives the same bits as the array form
    for vi, yi in zip(v.reshape(-1, 3), yaws.reshape(-1)):
        assert np.array_equal(fr.map_to_heading_xyz(*vi, yi), fr.map_to_heading(vi, yi))
    with pytest.raises(ValueError, match="3-vectors"):
        fr.map_to_heading([1.0, 2.0], 0.0)


def test_map_to_body_uses_the_full_attitude():
    """The body (FLU) components of a map (ENU) vector, by the full attitude: against scipy's
    inverse rotation, on known poses and on random tilted, yawed ones; body_to_map inverts it."""
    yaw, pitch = math.radians(90.0), math.radians(30.0)  # facing north, nose 30 degrees down
    q = Rotation.from_matrix(rz(yaw) @ ry(pitch)).as_quat()  # (x, y, z, w)
    nose = rz(yaw) @ ry(pitch) @ [1.0, 0.0, 0.0]
    assert_allclose(fr.map_to_body_xyzw(q, nose), [1.0, 0.0, 0.0], atol=1e-15)
    assert_allclose(fr.map_to_body_xyzw(q, [0.0, 0.0, 1.0]), [-math.sin(pitch), 0.0, math.cos(pitch)], atol=1e-15)
    assert_allclose(fr.map_to_body_xyzw(q, [1.0, 0.0, 0.0]), [0.0, -1.0, 0.0], atol=1e-15)  # east is right
    rots = Rotation.random(40, random_state=7)
    v = np.random.default_rng(8).normal(size=(40, 3)) * 5.0
    body = fr.map_to_body_xyzw(rots.as_quat(), v)
    assert_allclose(body, rots.inv().apply(v), atol=1e-13)
    assert_allclose(fr.body_to_map_xyzw(rots.as_quat(), body), v, rtol=0, atol=1e-14 * 5 * 8)
    assert_allclose(fr.body_to_map_xyzw(rots.as_quat(), v), rots.apply(v), atol=1e-13)
    assert_allclose(fr.map_to_body_xyzw(fr.quat_xyzw_from_yaw(0.7), v), fr.map_to_heading(v, 0.7), atol=1e-14)
    with pytest.raises(ValueError, match="3-vectors"):
        fr.map_to_body_xyzw(q, [1.0, 2.0])


def test_frame_names():
    assert (fr.MAP, fr.BASE_LINK, fr.BASE_STABILIZED, fr.CAMERA_OPTICAL) == (
        "map", "base_link", "base_stabilized", "camera_optical")


def test_euler_zyx_round_trip():
    rng = np.random.default_rng(7)
    for _ in range(100):
        roll, pitch, yaw = rng.uniform(-3, 3), rng.uniform(-1.5, 1.5), rng.uniform(-3, 3)
        q = fr.quat_wxyz_from_euler_zyx(roll, pitch, yaw)
        assert_allclose(fr.euler_zyx_from_quat_wxyz(q), (roll, pitch, yaw), atol=1e-9)
        # the same rotation as R = Rz(yaw) Ry(pitch) Rx(roll)
        xyzw = np.r_[q[1:], q[0]]
        assert_allclose(Rotation.from_quat(xyzw).as_matrix(), rz(yaw) @ ry(pitch) @ rx(roll), atol=1e-12)


def quat_xyzw_about(axis, angle_rad):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return np.r_[axis * math.sin(angle_rad / 2), math.cos(angle_rad / 2)]


def quat_wxyz_from_euler_ned(roll_rad, pitch_rad, yaw_rad):
    """Aerospace ZYX Euler (roll about forward, pitch about right, yaw about down) -> wxyz (scipy)."""
    x, y, z, w = Rotation.from_euler("ZYX", [yaw_rad, pitch_rad, roll_rad]).as_quat()
    return np.array([w, x, y, z])


def euler_ned_from_wxyz(q):
    w, x, y, z = q
    yaw, pitch, roll = Rotation.from_quat([x, y, z, w]).as_euler("ZYX")
    return roll, pitch, yaw


def same_rotation(a, b, atol=1e-12):
    """Quaternions equal up to sign."""
    a, b = np.asarray(a), np.asarray(b)
    assert min(np.abs(a - b).max(), np.abs(a + b).max()) < atol, (a, b)


def test_positions_and_velocities_enu_ned():
    assert_allclose(fr.enu_to_ned([1.0, 2.0, 3.0]), [2.0, 1.0, -3.0])
    assert_allclose(fr.ned_to_enu([2.0, 1.0, -3.0]), [1.0, 2.0, 3.0])
    batch = np.random.default_rng(0).normal(size=(7, 3))
    assert_allclose(fr.ned_to_enu(fr.enu_to_ned(batch)), batch)
    with pytest.raises(ValueError):
        fr.enu_to_ned([1.0, 2.0])


def test_body_vectors_flu_frd():
    assert_allclose(fr.flu_to_frd([1.0, 2.0, 3.0]), [1.0, -2.0, -3.0])
    assert_allclose(fr.frd_to_flu([1.0, -2.0, -3.0]), [1.0, 2.0, 3.0])
    # turning left (CCW seen from above) is +z in FLU, -z (yaw rate negative) in FRD
    assert_allclose(fr.flu_to_frd([0.1, 0.2, 0.5]), [0.1, -0.2, -0.5])
    assert_allclose(fr.frd_to_flu([0.1, -0.2, -0.5]), [0.1, 0.2, 0.5])


@pytest.mark.parametrize("yaw_enu, yaw_ned", [
    (0.0, math.pi / 2),            # facing east
    (math.pi / 2, 0.0),            # facing north
    (math.pi, -math.pi / 2),       # facing west
    (-math.pi / 2, -math.pi),      # facing south: wrapped to -pi ([-pi, pi))
    (math.pi / 4, math.pi / 4),    # north-east is the fixed point
])
def test_yaw(yaw_enu, yaw_ned):
    assert fr.yaw_enu_to_ned(yaw_enu) == pytest.approx(yaw_ned, abs=1e-12)
    assert fr.yaw_ned_to_enu(yaw_ned) == pytest.approx(fr.wrap_angle(yaw_enu), abs=1e-12)


@pytest.mark.parametrize("yaw_enu, yaw_ned", [(0.0, math.pi / 2), (math.pi / 2, 0.0),
                                              (math.pi, -math.pi / 2), (-math.pi / 2, -math.pi)])
def test_level_headings_quaternion(yaw_enu, yaw_ned):
    q_enu = quat_xyzw_about([0, 0, 1], yaw_enu)
    q_ned = fr.quat_enu_flu_xyzw_to_ned_frd_wxyz(q_enu)
    same_rotation(q_ned, quat_wxyz_from_euler_ned(0.0, 0.0, yaw_ned))
    roll, pitch, yaw = euler_ned_from_wxyz(q_ned)
    assert (roll, pitch) == pytest.approx((0.0, 0.0), abs=1e-12)
    assert fr.wrap_angle(yaw - yaw_ned) == pytest.approx(0.0, abs=1e-12)
    # the vehicle's nose points where the heading says, in both frames
    nose_enu = np.array([math.cos(yaw_enu), math.sin(yaw_enu), 0.0])
    assert_allclose(fr.rotate_vector_wxyz(q_ned, [1.0, 0.0, 0.0]), fr.enu_to_ned(nose_enu), atol=1e-12)
    same_rotation(fr.quat_ned_frd_wxyz_to_enu_flu_xyzw(q_ned), q_enu)


def test_facing_east_is_yaw_90_in_ned():
    q_ned = fr.quat_enu_flu_xyzw_to_ned_frd_wxyz([0.0, 0.0, 0.0, 1.0])
    s = math.sqrt(0.5)
    assert_allclose(q_ned, [s, 0.0, 0.0, s], atol=1e-15)


def test_pitched_nose_down_facing_north():
    # FLU: positive rotation about +y (left) tips the nose down. 20 deg nose-down, facing north.
    q_enu = fr.quat_wxyz_to_xyzw(fr.quat_multiply_wxyz(
        fr.quat_xyzw_to_wxyz(quat_xyzw_about([0, 0, 1], math.pi / 2)),
        fr.quat_xyzw_to_wxyz(quat_xyzw_about([0, 1, 0], math.radians(20)))))
    nose_enu = fr.rotate_vector_wxyz(fr.quat_xyzw_to_wxyz(q_enu), [1.0, 0.0, 0.0])
    assert nose_enu[2] < 0 and nose_enu[1] > 0
    q_ned = fr.quat_enu_flu_xyzw_to_ned_frd_wxyz(q_enu)
    roll, pitch, yaw = euler_ned_from_wxyz(q_ned)
    assert roll == pytest.approx(0.0, abs=1e-12)
    assert pitch == pytest.approx(math.radians(-20), abs=1e-12)   # FRD pitch: nose up positive
    assert yaw == pytest.approx(0.0, abs=1e-12)                    # north
    # nose points north and down (NED z positive)
    assert_allclose(fr.rotate_vector_wxyz(q_ned, [1, 0, 0]),
                    [math.cos(math.radians(20)), 0.0, math.sin(math.radians(20))], atol=1e-12)


def test_rolled_right_facing_east():
    # FLU: positive rotation about +x (forward) lifts the left side, i.e. rolls right.
    q_enu = quat_xyzw_about([1, 0, 0], math.radians(30))
    q_ned = fr.quat_enu_flu_xyzw_to_ned_frd_wxyz(q_enu)
    roll, pitch, yaw = euler_ned_from_wxyz(q_ned)
    assert roll == pytest.approx(math.radians(30), abs=1e-12)     # FRD roll: right wing down positive
    assert pitch == pytest.approx(0.0, abs=1e-12)
    assert yaw == pytest.approx(math.pi / 2, abs=1e-12)           # east
    # the right wing (FRD +y) points south and down
    right_ned = fr.rotate_vector_wxyz(q_ned, [0, 1, 0])
    assert_allclose(right_ned, [-math.cos(math.radians(30)), 0.0, math.sin(math.radians(30))], atol=1e-12)


def test_random_quaternion_round_trips_and_vector_consistency():
    rng = np.random.default_rng(42)
    q_enu = rng.normal(size=(200, 4))
    q_enu /= np.linalg.norm(q_enu, axis=1, keepdims=True)
    q_ned = fr.quat_enu_flu_xyzw_to_ned_frd_wxyz(q_enu)
    assert_allclose(np.linalg.norm(q_ned, axis=1), 1.0)
    back = fr.quat_ned_frd_wxyz_to_enu_flu_xyzw(q_ned)
    sign = np.sign(np.sum(back * q_enu, axis=1, keepdims=True))
    assert_allclose(back * sign, q_enu, atol=1e-12)
    # a body vector rotated into the world agrees in both conventions
    v_flu = rng.normal(size=(200, 3))
    world_enu = fr.rotate_vector_wxyz(fr.quat_xyzw_to_wxyz(q_enu), v_flu)
    world_ned = fr.rotate_vector_wxyz(q_ned, fr.flu_to_frd(v_flu))
    assert_allclose(fr.enu_to_ned(world_enu), world_ned, atol=1e-12)


def test_the_batched_quaternion_maths_equals_transforms3d():
    """frames.py's batched numpy quaternion maths (what the bridge, the simulator and the nodes
    use) equals transforms3d's one-at-a-time functions: the product, rotating a vector, the
    rotation matrix behind map_to_body / body_to_map, and the yaw of the Z-Y-X decomposition."""
    from transforms3d.euler import quat2euler
    from transforms3d.quaternions import qmult, quat2mat, rotate_vector

    rng = np.random.default_rng(11)
    a, b = rng.normal(size=(50, 4)), rng.normal(size=(50, 4))
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    v = rng.normal(size=(50, 3)) * 4.0
    assert_allclose(fr.quat_multiply_wxyz(a, b), [qmult(x, y) for x, y in zip(a, b)], atol=1e-15)
    assert_allclose(fr.rotate_vector_wxyz(a, v), [rotate_vector(x, y) for x, y in zip(v, a)], atol=1e-13)
    xyzw = fr.quat_wxyz_to_xyzw(a)
    assert_allclose(fr.body_to_map_xyzw(xyzw, v), [quat2mat(q) @ x for q, x in zip(a, v)], atol=1e-13)
    assert_allclose(fr.map_to_body_xyzw(xyzw, v), [quat2mat(q).T @ x for q, x in zip(a, v)], atol=1e-13)
    yaws = [quat2euler(q, "rzyx")[0] for q in a]
    assert_allclose(fr.yaws_from_quats_xyzw(xyzw), yaws, atol=1e-12)
    assert_allclose([fr.yaw_from_quat(*q) for q in xyzw], yaws, atol=1e-12)
