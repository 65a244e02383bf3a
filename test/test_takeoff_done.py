"""The end of a take-off (airplay.bridge.flight_checks.TakeoffDone) on the messages PX4 SITL sent
when issue 41 found a take-off accepted on the ground: the bridge's own MAVLink link (its
:class:`~airplay.bridge.mavlink_link.Autopilot`, not started: no thread, a loopback socket only)
is fed PX4's encoded HEARTBEAT, EXTENDED_SYS_STATE, LOCAL_POSITION_NED and ATTITUDE_QUATERNION.

PX4 with NAV_MC_ALT_RAD 0.8 calls a 0.9 m take-off reached at home + 0.1 m, and switches from
AUTO.TAKEOFF to AUTO.LOITER there; SIH's estimate read 0.33 m while the vehicle stood on the
ground (its true height 0.00 m), and the bridge then flew "offboard" on the ground for 6 s.
"""

from __future__ import annotations

import pytest
from pymavlink.dialects.v20 import common as mavlink

from airplay.bridge.flight_checks import TakeoffDone
from airplay.bridge.mavlink_link import Autopilot
from airplay.bridge.modes import custom_mode_of

PX4 = mavlink.MAV_AUTOPILOT_PX4


@pytest.fixture
def link():
    ap = Autopilot("udpin:127.0.0.1:0")
    enc = mavlink.MAVLink(None, srcSystem=1, srcComponent=1)
    t = [0]

    def feed(msg):
        ap._handle(enc.decode(bytearray(msg.pack(enc))))

    def say(mode: str, landed: int, height_m: float) -> None:
        t[0] += 20
        feed(enc.heartbeat_encode(mavlink.MAV_TYPE_QUADROTOR, PX4, mavlink.MAV_MODE_FLAG_SAFETY_ARMED
                                  | mavlink.MAV_MODE_FLAG_CUSTOM_MODE_ENABLED, custom_mode_of("px4", mode),
                                  mavlink.MAV_STATE_ACTIVE))
        feed(enc.extended_sys_state_encode(mavlink.MAV_VTOL_STATE_UNDEFINED, landed))
        feed(enc.local_position_ned_encode(t[0], 0.0, 0.0, -height_m, 0.0, 0.0, 0.0))
        feed(enc.attitude_quaternion_encode(t[0], 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))

    yield ap, say
    ap.close()


def test_a_take_off_that_px4_calls_done_on_the_ground_goes_on(link):
    ap, say = link
    done = TakeoffDone(ap, target_z_m=0.9, tolerance_m=0.15, px4_reached_amsl_m=None, ground_z_m=0.0)
    say("AUTO.TAKEOFF", mavlink.MAV_LANDED_STATE_ON_GROUND, 0.0)
    assert not done()
    # PX4: take-off reached (AUTO.LOITER), the estimate 0.33 m up, the landed state still on the ground
    say("AUTO.LOITER", mavlink.MAV_LANDED_STATE_ON_GROUND, 0.33)
    assert not done(), "accepted a take-off on the ground"
    # in the air by PX4's land detector, but below half the take-off height (0.45 m)
    say("AUTO.LOITER", mavlink.MAV_LANDED_STATE_IN_AIR, 0.40)
    assert not done()
    say("AUTO.LOITER", mavlink.MAV_LANDED_STATE_IN_AIR, 0.50)
    # off the ground by both rules, but short of the take-off's height: PX4 must climb on
    assert not done() and done.short_of_target
    say("AUTO.LOITER", mavlink.MAV_LANDED_STATE_IN_AIR, 0.76)
    assert done() and not done.short_of_target


def test_the_height_floor_holds_for_low_take_offs(link):
    """A 0.4 m take-off: half of it is 0.2 m, below the 0.3 m floor, which holds."""
    ap, say = link
    done = TakeoffDone(ap, target_z_m=0.4, tolerance_m=0.15, ground_z_m=0.0)
    say("AUTO.TAKEOFF", mavlink.MAV_LANDED_STATE_TAKEOFF, 0.1)
    say("AUTO.LOITER", mavlink.MAV_LANDED_STATE_IN_AIR, 0.25)
    assert not done()
    say("AUTO.LOITER", mavlink.MAV_LANDED_STATE_IN_AIR, 0.31)
    assert done()
