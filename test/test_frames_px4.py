"""MAVLink velocity setpoints (airplay.bridge.frames): the heading-frame command in MAV_FRAME_BODY_NED
and MAV_FRAME_LOCAL_NED. The generic ENU/NED conversions are tested in test_frames.py."""

import math

import pytest
from numpy.testing import assert_allclose

from airplay.bridge import frames as fr


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
