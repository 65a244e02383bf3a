"""The autopilot fence's geometry and encodings (airplay.bridge.autopilot_fence); the protocol itself
is tested against real PX4 and ArduPilot SITL (test_px4_sitl.py, test_ardupilot_sitl.py) and its
failure path against the rehearsal vehicle (test_mavlink_link.py)."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

pytest.importorskip("pymavlink")

from airplay.bridge import autopilot_fence as af  # noqa: E402
from airplay.bridge.geofence import signed_area  # noqa: E402


def test_a_box_grows_by_the_margin_on_every_side_in_either_orientation():
    for corners in (af.box_polygon((0, 0, 2, 1)), tuple(reversed(af.box_polygon((0, 0, 2, 1))))):
        grown = np.asarray(af.expand_polygon(corners, 0.5))
        assert grown[:, 0].min() == pytest.approx(-0.5) and grown[:, 0].max() == pytest.approx(2.5)
        assert grown[:, 1].min() == pytest.approx(-0.5) and grown[:, 1].max() == pytest.approx(1.5)
    assert af.expand_polygon(af.box_polygon((0, 0, 2, 1)), 0.0) == af.box_polygon((0, 0, 2, 1))


def test_a_concave_polygon_keeps_every_edge_the_margin_away():
    poly = ((0, 0), (4, 0), (4, 4), (2, 2), (0, 4))
    grown = np.asarray(af.expand_polygon(poly, 1.0))
    assert signed_area(grown) > signed_area(np.asarray(poly, float))
    # each grown edge is parallel to its edge and 1 m from its line, on the outside
    p = np.asarray(poly, float)
    for i in range(len(p)):
        a, b = p[i], p[(i + 1) % len(p)]
        ga, gb = grown[i], grown[(i + 1) % len(p)]
        d = (b - a) / np.linalg.norm(b - a)
        outward = np.array([d[1], -d[0]])
        assert np.dot(ga - a, outward) == pytest.approx(1.0) and np.dot(gb - b, outward) == pytest.approx(1.0)
        e = gb - ga
        assert abs(e[0] * d[1] - e[1] * d[0]) < 1e-9


def test_map_metres_to_latitude_longitude():
    origin = af.GlobalOrigin(47.397742, 8.545594, 488.0)   # PX4 SITL's default home
    lat, lon = af.local_to_latlon(100.0, 0.0, origin)       # 100 m north
    assert lon == origin.lon_deg and (lat - origin.lat_deg) * math.pi / 180 * af.EARTH_RADIUS_M == pytest.approx(100)
    lat, lon = af.local_to_latlon(0.0, 100.0, origin)       # 100 m east: longer in degrees away from the equator
    east_m = (lon - origin.lon_deg) * math.pi / 180 * af.EARTH_RADIUS_M * math.cos(math.radians(origin.lat_deg))
    assert lat == origin.lat_deg and east_m == pytest.approx(100)
    # map = local ENU + origin_enu: the map point origin_enu is the EKF origin itself
    [(lat7, lon7)] = af.fence_vertices_latlon([(15.0, 3.0)], (15.0, 3.0, 0.0), origin)
    assert (lat7, lon7) == (round(origin.lat_deg * 1e7), round(origin.lon_deg * 1e7))


def test_integer_parameters_are_sent_bytewise_to_px4_and_as_numbers_to_ardupilot():
    encoded = af._encode_param("px4", 5, af._INT)
    assert struct.unpack("<i", struct.pack("<f", encoded))[0] == 5
    assert af._encode_param("ardupilot", 5, af._INT) == 5.0
    assert af._encode_param("px4", 1.75, af._FLOAT) == 1.75


def test_fence_request_checks_its_fields():
    with pytest.raises(ValueError, match="autopilot_fence_action"):
        af.FenceRequest(None, 3.0, 0.0, action="loiter")
    with pytest.raises(ValueError, match="autopilot_fence_margin_m"):
        af.FenceRequest(None, 3.0, 0.0, margin_m=-1.0)
    with pytest.raises(ValueError, match="autopilot_ceiling_margin_m"):
        af.FenceRequest(None, 3.0, 0.0, ceiling_margin_m=float("nan"))


def test_the_ceiling_uses_its_own_margin_above_the_ground_the_vehicle_stands_on():
    """The polygon's margin does not move the ceiling; the ceiling is measured from the ground now."""
    request = af.FenceRequest(((0.0, 0.0), (4.0, 0.0), (4.0, 3.0)), 1.9, 0.25, margin_m=1.0, ceiling_margin_m=4.0)
    assert af.ceiling_above_home_m(request) == pytest.approx(1.9 + 4.0 - 0.25)
    assert af.ceiling_above_home_m(af.FenceRequest(((0.0, 0.0), (4.0, 0.0), (4.0, 3.0)), None, 0.25)) is None
    with pytest.raises(af.AutopilotFenceError, match="autopilot_ceiling_margin_m"):
        af.ceiling_above_home_m(af.FenceRequest(None, -3.0, 0.0, ceiling_margin_m=1.0))


def test_the_bridge_parameters_carry_both_autopilot_margins_to_the_flight_config():
    from airplay.bridge.parameters import BRIDGE_SCHEMA, flight_settings
    assert BRIDGE_SCHEMA.defaults()["autopilot_ceiling_margin_m"] == 4.0
    flight = flight_settings({"autopilot_fence_margin_m": 0.5, "autopilot_ceiling_margin_m": 2.5}).flight
    assert (flight.autopilot_fence_margin_m, flight.autopilot_ceiling_margin_m) == (0.5, 2.5)
