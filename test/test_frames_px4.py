"""ROS (ENU/FLU, xyzw) <-> PX4/MAVLink (NED/FRD, wxyz) conversions in airplay.bridge.frames."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from airplay.bridge import frames as fr


def quat_xyzw_about(axis, angle_rad):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return np.r_[axis * math.sin(angle_rad / 2), math.cos(angle_rad / 2)]


def quat_wxyz_from_euler_ned(roll_rad, pitch_rad, yaw_rad):
    """Aerospace ZYX Euler (roll about forward, pitch about right, yaw about down) -> wxyz."""
    cr, sr = math.cos(roll_rad / 2), math.sin(roll_rad / 2)
    cp, sp = math.cos(pitch_rad / 2), math.sin(pitch_rad / 2)
    cy, sy = math.cos(yaw_rad / 2), math.sin(yaw_rad / 2)
    return np.array([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy])


def euler_ned_from_wxyz(q):
    w, x, y, z = q
    roll = math.atan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = math.asin(max(-1.0, min(1.0, 2 * (w * y - z * x))))
    yaw = math.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
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
    assert_allclose(fr.angular_velocity_flu_to_frd([0.1, 0.2, 0.5]), [0.1, -0.2, -0.5])
    assert_allclose(fr.angular_velocity_frd_to_flu([0.1, -0.2, -0.5]), [0.1, 0.2, 0.5])


@pytest.mark.parametrize("yaw_enu, yaw_ned", [
    (0.0, math.pi / 2),            # facing east
    (math.pi / 2, 0.0),            # facing north
    (math.pi, -math.pi / 2),       # facing west
    (-math.pi / 2, math.pi),       # facing south: wrapped to +pi, not -pi
    (math.pi / 4, math.pi / 4),    # north-east is the fixed point
])
def test_yaw(yaw_enu, yaw_ned):
    assert fr.yaw_enu_to_ned(yaw_enu) == pytest.approx(yaw_ned, abs=1e-12)
    assert fr.yaw_ned_to_enu(yaw_ned) == pytest.approx(fr.wrap_angle_rad(yaw_enu), abs=1e-12)


@pytest.mark.parametrize("yaw_enu, yaw_ned", [(0.0, math.pi / 2), (math.pi / 2, 0.0),
                                              (math.pi, -math.pi / 2), (-math.pi / 2, math.pi)])
def test_level_headings_quaternion(yaw_enu, yaw_ned):
    q_enu = quat_xyzw_about([0, 0, 1], yaw_enu)
    q_ned = fr.quat_enu_flu_xyzw_to_ned_frd_wxyz(q_enu)
    same_rotation(q_ned, quat_wxyz_from_euler_ned(0.0, 0.0, yaw_ned))
    roll, pitch, yaw = euler_ned_from_wxyz(q_ned)
    assert (roll, pitch) == pytest.approx((0.0, 0.0), abs=1e-12)
    assert fr.wrap_angle_rad(yaw - yaw_ned) == pytest.approx(0.0, abs=1e-12)
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


def test_command_90_deg_yaw_rate_and_velocities():
    vel_frd, yaw_rate_cw = fr.heading_command_to_px4_body_ned([1.0, 0.5, 0.2, math.pi / 2])
    assert_allclose(vel_frd, [1.0, -0.5, -0.2])       # forward, right, down
    assert yaw_rate_cw == pytest.approx(-math.pi / 2)  # CCW in ENU is a negative NED yaw rate
    assert_allclose(fr.px4_body_ned_to_heading_command(vel_frd, yaw_rate_cw), [1.0, 0.5, 0.2, math.pi / 2])
    assert fr.TYPE_MASK_VELOCITY_YAW_RATE == 1479
    with pytest.raises(ValueError):
        fr.heading_command_to_px4_body_ned([1.0, 0.0, 0.0])


def test_command_to_local_ned_facing_north():
    # facing north (ENU yaw pi/2): forward is north, left is west, up is -down
    vel_ned, yaw_rate_cw = fr.heading_command_to_local_ned([2.0, 1.0, 0.5, 0.3], math.pi / 2)
    assert_allclose(vel_ned, [2.0, -1.0, -0.5], atol=1e-12)
    assert yaw_rate_cw == pytest.approx(-0.3)
