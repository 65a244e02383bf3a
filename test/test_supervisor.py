"""SafetySupervisor: every intervention against hand-computed expectations, and the geofence
flown against simulated vehicles (a first-order velocity lag, and airplay's flight model)."""

import logging
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from airplay.bridge.interventions import InterventionKind as K
from airplay.bridge.interventions import Mode
from airplay.bridge.supervisor import SafetySupervisor
from airplay.bridge.supervisor_config import SupervisorConfig
from airplay.sim.dynamics import QuadrotorBatch, load_vehicle_params

DT = 0.02
FAST = {"max_accel_xy_m_s2": 1e6, "max_accel_z_m_s2": 1e6}  # accel limit out of the way


def sup(**kw):
    kw.setdefault("heartbeat_timeout_s", None)
    return SafetySupervisor(SupervisorConfig(**kw))


def step(s, cmd, t):
    """Send a command stamped now, then take the output."""
    assert s.on_command(cmd, t, t) is None
    return s.output(t)


def kinds(out):
    return [i.kind for i in out.interventions]


def test_compliant_stream_has_no_interventions():
    s = sup(fence_box_xy_m=(-50, -50, 50, 50), fence_z_min_m=0.0, fence_z_max_m=20.0)
    pos = np.array([0.0, 0.0, 2.0])
    for k in range(200):
        t = k * DT
        s.on_state(pos, [0.0, 0.0, 0.0], 0.0, t)
        cmd = [min(0.05 * k, 2.0), 0.0, 0.0, 0.3]  # 2.5 m/s^2 ramp < 3 m/s^2
        out = step(s, cmd, t)
        assert out.mode is Mode.FLYING
        assert out.interventions == ()
        assert_allclose(out.command, cmd)


def test_speed_clamp_preserves_direction_and_reports_once_per_episode():
    s = sup(**FAST)
    out = step(s, [6.0, 8.0, 0.0, 0.0], 0.0)   # |v_xy| = 10 > 5
    assert_allclose(out.command, [3.0, 4.0, 0.0, 0.0])
    assert kinds(out) == [K.CLAMPED_SPEED]
    iv = out.interventions[0]
    assert "10.00 -> 5.00" in iv.reason
    assert_allclose(iv.command_in, [6.0, 8.0, 0.0, 0.0])
    assert_allclose(iv.command_out, [3.0, 4.0, 0.0, 0.0])
    out = step(s, [6.0, 8.0, 0.0, 0.0], DT)    # same episode: not reported again
    assert_allclose(out.command, [3.0, 4.0, 0.0, 0.0])
    assert out.interventions == ()
    assert step(s, [1.0, 0.0, 0.0, 0.0], 2 * DT).interventions == ()
    out = step(s, [0.0, 0.0, 4.0, 0.0], 3 * DT)  # new episode: up 4 -> 3
    assert_allclose(out.command, [0.0, 0.0, 3.0, 0.0])
    assert kinds(out) == [K.CLAMPED_SPEED]
    out = step(s, [0.0, 0.0, -2.0, 0.0], 4 * DT)  # still clamping (down 2 -> 1.5): same episode
    assert_allclose(out.command, [0.0, 0.0, -1.5, 0.0])
    assert out.interventions == ()


def test_acceleration_limit_over_steps():
    s = sup()  # 3 m/s^2 xy, 4 m/s^2 z: 0.06 and 0.08 m/s per 20 ms
    reported = []
    for k in range(1, 30):
        out = step(s, [1.0, 0.0, 0.5, 0.0], k * DT)
        reported += kinds(out)
        assert_allclose(out.command[:3], [min(0.06 * k, 1.0), 0.0, min(0.08 * k, 0.5)], atol=1e-12)
    assert reported == [K.CLAMPED_ACCEL]       # one report for the whole ramp
    # a longer gap allows a larger change: 0.1 s * 3 m/s^2 = 0.3 m/s, along the change direction
    out = step(s, [1.0, 1.0, 0.5, 0.0], 29 * DT + 0.1)
    assert_allclose(out.command[:2], [1.0, 0.3], atol=1e-12)
    assert kinds(out) == [K.CLAMPED_ACCEL]
    # from rest with a known state, the first change is limited against the measured velocity
    s = sup()
    s.on_state([0, 0, 1], [0.0, 1.0, 0.0], math.pi / 2, 0.0)  # flying forward (north) at 1 m/s
    out = step(s, [2.0, 0.0, 0.0, 0.0], 0.0)
    assert_allclose(out.command, [1.06, 0.0, 0.0, 0.0], atol=1e-12)


def test_yaw_rate_clamp():
    s = sup(**FAST)
    out = step(s, [0.0, 0.0, 0.0, 3.0], 0.0)
    assert out.command[3] == pytest.approx(1.5708) and kinds(out) == [K.CLAMPED_YAW_RATE]
    out = step(s, [0.0, 0.0, 0.0, -3.0], DT)
    assert out.command[3] == pytest.approx(-1.5708) and out.interventions == ()
    assert step(s, [0.0, 0.0, 0.0, 1.0], 2 * DT).command[3] == 1.0


def test_nan_refused_previous_safe_command_then_hover():
    s = sup(**FAST)
    good = [1.0, 0.0, 0.0, 0.0]
    step(s, good, 0.0)
    refusal = s.on_command([np.nan, 0.0, 0.0, 0.0], DT, DT)
    assert refusal.kind is K.REFUSED_NON_FINITE
    assert_allclose(refusal.command_out, good)
    out = s.output(DT)
    assert_allclose(out.command, good)
    assert kinds(out) == [K.REFUSED_NON_FINITE]
    assert s.on_command([0.0, np.inf, 0.0, 0.0], 2 * DT, 2 * DT) is not None
    assert s.output(2 * DT).interventions == ()     # same run of refusals: not reported again
    out = s.output(0.26)                            # the good command (stamp 0) is now stale
    assert_allclose(out.command, np.zeros(4))
    assert out.mode is Mode.HOLD
    assert kinds(out) == [K.STALE_COMMAND_HOLD]


def test_malformed_and_out_of_order_refused():
    s = sup(**FAST)
    assert s.on_command([1.0, 0.0, 0.0], 0.0, 0.0).kind is K.REFUSED_MALFORMED
    assert s.on_command("fast", 0.0, 0.0).kind is K.REFUSED_MALFORMED
    out = s.output(0.0)
    assert kinds(out) == [K.REFUSED_MALFORMED, K.STALE_COMMAND_HOLD]   # no command yet: hover
    assert_allclose(out.command, np.zeros(4))
    assert s.on_command([0.5, 0, 0, 0], 0.1, 0.1) is None
    assert s.on_command([9.0, 0, 0, 0], 0.05, 0.11).kind is K.REFUSED_OUT_OF_ORDER
    assert s.on_command([9.0, 0, 0, 0], 5.0, 0.11).kind is K.REFUSED_MALFORMED   # from the future
    assert_allclose(s.output(0.12).command, [0.5, 0, 0, 0])


def test_a_policy_clock_a_little_ahead_is_taken_and_one_far_ahead_refused():
    """Stamps up to future_stamp_tolerance_s (0.1 s) ahead of the bridge's clock are taken as now,
    so the correctly stamped commands after them are not "out of order"; further ahead: refused."""
    s = sup(**FAST)
    assert s.on_command([0.5, 0, 0, 0], 1.08, 1.0) is None          # 80 ms ahead: clock skew
    assert s.on_command([0.6, 0, 0, 0], 1.02, 1.02) is None         # the next one, stamped right: taken
    assert_allclose(s.output(1.03).command, [0.6, 0, 0, 0])
    refused = s.on_command([9.0, 0, 0, 0], 1.5, 1.04)                 # 0.46 s ahead
    assert refused.kind is K.REFUSED_MALFORMED and "in the future" in refused.reason
    assert s.on_command([0.7, 0, 0, 0], 1.05, 1.05) is None
    assert_allclose(s.output(1.06).command, [0.7, 0, 0, 0])
    with pytest.raises(ValueError, match="future_stamp_tolerance_s"):
        SupervisorConfig(future_stamp_tolerance_s=-1.0)


def test_stale_command_hover_and_recovery():
    s = sup(**FAST)
    step(s, [1.0, 0.0, 0.0, 0.2], 0.0)
    assert s.output(0.25).mode is Mode.FLYING                 # exactly at the timeout: still fresh
    out = s.output(0.26)
    assert out.mode is Mode.HOLD and kinds(out) == [K.STALE_COMMAND_HOLD]
    assert_allclose(out.command, np.zeros(4))
    assert "0.260 s old" in out.interventions[0].reason
    out = s.output(0.30)
    assert out.mode is Mode.HOLD and out.interventions == ()
    out = step(s, [0.5, 0.0, 0.0, 0.0], 0.40)                 # fresh again
    assert out.mode is Mode.FLYING and out.interventions == ()
    assert_allclose(out.command, [0.5, 0.0, 0.0, 0.0])
    s.output(0.70)
    assert kinds(s.output(0.72)) == []                         # still the same stale episode
    out = step(s, [0.5, 0, 0, 0], 0.8)
    assert s.output(1.2).interventions[0].kind is K.STALE_COMMAND_HOLD  # new episode reported again


FENCE = {"fence_box_xy_m": (0.0, 0.0, 10.0, 10.0), "fence_z_min_m": 0.0, "fence_z_max_m": 5.0}


def test_geofence_hold_then_land_latched():
    s = sup(**FENCE, **FAST)
    s.on_state([11.0, 5.0, 2.0], [0.0, 0.0, 0.0], 0.0, 0.0)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.HOLD and kinds(out) == [K.GEOFENCE_HOLD]
    assert_allclose(out.command, np.zeros(4))
    out = step(s, [1.0, 0.0, 0.0, 0.0], 1.99)
    assert out.mode is Mode.HOLD and out.interventions == ()
    out = step(s, [1.0, 0.0, 0.0, 0.0], 2.0)                  # still outside after geofence_hold_s
    assert out.mode is Mode.LANDING and kinds(out) == [K.GEOFENCE_LAND]
    assert_allclose(out.command, [0.0, 0.0, -0.5, 0.0])
    s.on_state([5.0, 5.0, 2.0], [0.0, 0.0, 0.0], 0.0, 3.0)   # back inside: landing stays latched
    out = step(s, [1.0, 0.0, 0.0, 0.0], 3.0)
    assert out.mode is Mode.LANDING and out.interventions == ()
    s.reset()
    out = step(s, [1.0, 0.0, 0.0, 0.0], 3.1)
    assert out.mode is Mode.FLYING
    assert_allclose(out.command, [1.0, 0, 0, 0])


def test_geofence_altitude_band_and_return_inside_before_land():
    s = sup(**FENCE, **FAST)
    s.on_state([5.0, 5.0, 5.5], [0.0, 0.0, 0.0], 0.0, 0.0)   # above the ceiling
    out = step(s, [0.0, 0.0, 0.0, 0.0], 0.0)
    assert kinds(out) == [K.GEOFENCE_HOLD] and "outside" in out.interventions[0].reason
    s.on_state([5.0, 5.0, 4.0], [0.0, 0.0, 0.0], 0.0, 1.0)   # back inside before the hold time
    assert step(s, [0.2, 0, 0, 0], 1.0).mode is Mode.FLYING
    s.on_state([5.0, 5.0, 5.5], [0.0, 0.0, 0.0], 0.0, 2.5)   # out again: the timer restarts
    assert step(s, [0.2, 0, 0, 0], 2.5).mode is Mode.HOLD
    assert step(s, [0.2, 0, 0, 0], 4.0).mode is Mode.HOLD
    assert step(s, [0.2, 0, 0, 0], 4.5).mode is Mode.LANDING


def test_geofence_predicted_exit_holds_without_landing():
    # stopping distance at the autopilot's limit after the response time: s * 0.7 + s^2 / (2 * 3) m
    s = sup(**FENCE, **FAST)
    s.on_state([9.99, 5.0, 2.0], [1.0, 0.0, 0.0], 0.0, 0.0)  # 0.87 m > 0.01 m to the east edge
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.HOLD and kinds(out) == [K.GEOFENCE_HOLD]
    assert "predicted" in out.interventions[0].reason and "edge 1" in out.interventions[0].reason
    assert_allclose(out.hold_position_enu, [9.5, 5.0, 2.0])   # predicted to cross: latched the margin inside
    assert step(s, [1.0, 0.0, 0.0, 0.0], 5.0).mode is Mode.HOLD   # inside: never lands
    # far from the fence but too fast to stop: 4 m/s -> 2.8 + 2.67 = 5.47 m > 5 m
    s = sup(**FENCE)
    s.on_state([5.0, 5.0, 2.0], [4.0, 0.0, 0.0], 0.3, 0.0)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.HOLD and kinds(out) == [K.GEOFENCE_HOLD]
    assert_allclose(out.hold_position_enu, [5.0, 5.0, 2.0]) and out.hold_yaw_rad == 0.3  # already 5 m inside
    # 3.7 m/s can stop (2.59 + 2.28 = 4.87 m < 5 m): flying, braked
    s = sup(**FENCE)
    s.on_state([5.0, 5.0, 2.0], [3.7, 0.0, 0.0], 0.0, 0.0)
    out = step(s, [3.7, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.FLYING and kinds(out) == [K.GEOFENCE_BRAKE] and out.hold_position_enu is None
    # vertically with max_accel_z (4 m/s^2), 3 m below the ceiling: 3 m/s up -> 2.1 + 1.125 m > 3 m; 2.8 m/s not
    for vz, mode in ((3.0, Mode.HOLD), (2.8, Mode.FLYING)):
        s = sup(**FENCE)
        s.on_state([5.0, 5.0, 2.0], [0.0, 0.0, vz], 0.0, 0.0)
        assert step(s, [0.0, 0.0, 0.0, 0.0], 0.0).mode is mode


def test_braking_envelope_caps_speed_towards_the_fence():
    # cap = sqrt(2 * 1.5 * max(0, d - 0.5 - s * 0.7)); facing north (yaw pi/2): forward is +y, left is -x
    s = sup(**FENCE, **FAST)
    s.on_state([5.0, 4.0, 2.0], [0.0, 2.0, 0.0], math.pi / 2, 0.0)    # 6 m from the north edge, at 2 m/s
    out = step(s, [4.0, -2.0, 0.0, 0.2], 0.0)                          # 4 m/s north, 2 m/s east
    cap = math.sqrt(3.0 * (6.0 - 0.5 - 2.0 * 0.7))
    assert_allclose(out.command, [cap, -2.0, 0.0, 0.2], atol=1e-12)    # along the edge and yaw rate kept
    assert out.mode is Mode.FLYING and kinds(out) == [K.GEOFENCE_BRAKE]
    iv = out.interventions[0]
    assert "edge 2" in iv.reason and not np.allclose(iv.command_in, iv.command_out, atol=1e-6, rtol=0)
    # the ceiling (3 m above, rising at 1 m/s) and the floor (2 m below, at rest)
    s.on_state([5.0, 4.0, 2.0], [0.0, 0.0, 1.0], math.pi / 2, DT)
    assert_allclose(step(s, [0.0, 0.0, 3.0, 0.0], DT).command, [0, 0, math.sqrt(3.0 * (3.0 - 0.5 - 0.7)), 0])
    s.on_state([5.0, 4.0, 2.0], [0.0, 0.0, 0.0], math.pi / 2, 2 * DT)
    assert_allclose(step(s, [0.0, 0.0, -1.5, 0.0], 2 * DT).command, [0, 0, -1.5, 0])  # cap 2.12 m/s: free
    s.on_state([5.0, 4.0, 1.0], [0.0, 0.0, -0.5], math.pi / 2, 3 * DT)
    assert_allclose(step(s, [0.0, 0.0, -1.5, 0.0], 3 * DT).command, [0, 0, -math.sqrt(3.0 * (1.0 - 0.5 - 0.35)), 0])


@pytest.mark.parametrize("fence", [
    {"fence_polygon_xy_m": ((0, 0), (10, 0), (0, 10)), "fence_z_min_m": 0.0, "fence_z_max_m": 4.0},   # acute corners
    {"fence_polygon_xy_m": ((-8, -8), (8, -8), (8, 0), (0, 0), (0, 8), (-8, 8))},                     # reflex vertex
    {"fence_box_xy_m": (-3.0, -3.0, 3.0, 3.0), "fence_z_max_m": 3.0},
])
def test_braked_command_meets_every_cap(fence):
    rng = np.random.default_rng(3)
    s = sup(**fence, **FAST)
    cfg, checked = s.config, 0
    for k in range(1000):
        t = k * DT
        p = rng.uniform([-8, -8, 0.1], [8, 8, 3.9])
        if not s.fence.contains(p):
            continue
        v, yaw = rng.normal(scale=0.7, size=3), rng.uniform(-math.pi, math.pi)
        s.on_state(p, v, yaw, t)
        out = step(s, rng.normal(scale=3.0, size=4), t)
        if out.mode is not Mode.FLYING:
            continue
        v_out = _heading_to_enu(out.command, yaw)
        for part in s.fence.parts(p):
            approach = max(0.0, float(v @ part.direction))
            room = part.distance_m - cfg.fence_margin_m - approach * cfg.fence_response_s
            assert float(v_out @ part.direction) <= math.sqrt(2 * cfg.fence_brake_accel_m_s2 * max(0.0, room)) + 2e-6
        checked += 1
    assert checked > 80


def test_geofence_outward_component_removed():
    s = sup(**FENCE, **FAST)
    # facing west (yaw pi) 0.2 m from the east edge: forward -1 is east (outward), left 0.5 is south
    s.on_state([9.8, 5.0, 2.0], [0.0, 0.0, 0.0], math.pi, 0.0)
    out = step(s, [-1.0, 0.5, 0.0, 0.3], 0.0)
    assert out.mode is Mode.FLYING and kinds(out) == [K.GEOFENCE_OUTWARD_REMOVED]
    assert_allclose(out.command, [0.0, 0.5, 0.0, 0.3], atol=1e-12)
    # inward motion there is untouched
    assert step(s, [1.0, 0.5, 0.0, 0.0], DT).interventions == ()
    assert_allclose(s.output(2 * DT).command, [1.0, 0.5, 0.0, 0.0])
    # corner and ceiling: facing east at (9.8, 9.8, 4.8), moving north-east and up -> nothing left
    s = sup(**FENCE, **FAST)
    s.on_state([9.8, 9.8, 4.8], [0.0, 0.0, 0.0], 0.0, 0.0)
    out = step(s, [1.0, 1.0, 1.0, 0.0], 0.0)
    assert_allclose(out.command, np.zeros(4), atol=1e-12)
    assert kinds(out) == [K.GEOFENCE_OUTWARD_REMOVED]


def test_polygon_fence_outward_removed():
    # triangle (either orientation): hypotenuse x + y = 10, outward normal (1, 1)/sqrt 2
    s = sup(fence_polygon_xy_m=((0, 0), (0, 10), (10, 0)), **FAST)
    s.on_state([4.9, 4.9, 1.0], [0.0, 0.0, 0.0], 0.0, 0.0)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)   # east: half of it is outward
    assert_allclose(out.command, [0.5, -0.5, 0.0, 0.0], atol=1e-12)
    s.on_state([6.0, 6.0, 1.0], [0.0, 0.0, 0.0], 0.0, DT)
    assert step(s, [0.0, 0.0, 0.0, 0.0], DT).mode is Mode.HOLD


def test_fence_without_state_holds():
    s = sup(**FENCE, **FAST)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.HOLD and kinds(out) == [K.GEOFENCE_HOLD]


def test_operator_stop_latched_until_reset():
    s = sup(**FAST)
    step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    iv = s.operator_stop(0.01, "e-stop button")
    assert iv.kind is K.OPERATOR_STOP_LAND and "e-stop button" in iv.reason
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.02)
    assert out.mode is Mode.LANDING and kinds(out) == [K.OPERATOR_STOP_LAND]
    assert_allclose(out.command, [0.0, 0.0, -0.5, 0.0])
    s.operator_stop(0.03)                                     # already latched: not reported again
    for t in (0.04, 5.0, 60.0):
        out = step(s, [1.0, 0.0, 0.0, 0.0], t)
        assert out.mode is Mode.LANDING and out.interventions == ()
    s.reset()
    out = step(s, [1.0, 0.0, 0.0, 0.0], 61.0)
    assert out.mode is Mode.FLYING
    assert_allclose(out.command, [1.0, 0.0, 0.0, 0.0])


def test_heartbeat_loss_stops_sending_reported_once():
    s = SafetySupervisor(SupervisorConfig(heartbeat_timeout_s=1.5, **FAST))
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.command is None and out.mode is Mode.WAITING_FOR_HEARTBEAT and out.interventions == ()
    s.on_heartbeat(0.1)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 1.6)
    assert out.mode is Mode.FLYING
    out = step(s, [1.0, 0.0, 0.0, 0.0], 1.61)                # 1.51 s since the last heartbeat
    assert out.command is None and out.mode is Mode.STOPPED_NO_HEARTBEAT
    assert kinds(out) == [K.HEARTBEAT_LOST] and out.interventions[0].command_out is None
    for t in (1.7, 3.0):
        out = step(s, [1.0, 0.0, 0.0, 0.0], t)
        assert out.command is None and out.interventions == ()
    s.on_heartbeat(3.1)                                      # link back: sending resumes
    out = step(s, [1.0, 0.0, 0.0, 0.0], 3.1)
    assert out.mode is Mode.FLYING
    assert_allclose(out.command, [1.0, 0.0, 0.0, 0.0])


def test_interventions_logged(caplog):
    s = sup(**FAST)
    with caplog.at_level(logging.WARNING, logger="airplay.supervisor"):
        step(s, [0.0, 0.0, 0.0, 9.0], 0.0)
    assert any(r.name == "airplay.supervisor" and "CLAMPED_YAW_RATE" in r.getMessage() for r in caplog.records)


def _scripted_run():
    s = SafetySupervisor(SupervisorConfig(heartbeat_timeout_s=1.0, **FENCE))
    rng = np.random.default_rng(7)
    pos = np.array([5.0, 5.0, 2.0])
    trace = []
    for k in range(400):
        t = k * DT
        if k % 10 == 0 and not 150 <= k < 250:
            s.on_heartbeat(t)
        cmd = rng.normal(scale=3.0, size=4)
        if k % 37 == 0:
            cmd[1] = np.nan
        if k % 5:
            s.on_command(cmd, t, t)
        out = s.output(t)
        if out.command is not None:
            pos = pos + DT * np.r_[out.command[:2], out.command[2]]  # yaw 0: heading frame = ENU
        s.on_state(pos, np.zeros(3) if out.command is None else out.command[:3], 0.0, t)
        trace.append((None if out.command is None else out.command.tolist(), out.mode,
                      [(i.time_s, i.kind, i.reason) for i in out.interventions]))
    return trace


def test_deterministic():
    a, b = _scripted_run(), _scripted_run()
    assert a == b
    assert {m for _, m, _ in a} >= {Mode.FLYING, Mode.STOPPED_NO_HEARTBEAT}


@pytest.mark.parametrize("field, value", [
    ("max_speed_xy_m_s", 0.0), ("max_speed_up_m_s", -1.0), ("max_speed_down_m_s", float("nan")),
    ("max_accel_xy_m_s2", float("inf")), ("max_accel_z_m_s2", "3"), ("max_yaw_rate_rad_s", 0),
    ("command_timeout_s", -0.25), ("heartbeat_timeout_s", 0.0), ("geofence_hold_s", -1.0),
    ("landing_speed_m_s", 0.0), ("fence_margin_m", -0.5), ("fence_brake_accel_m_s2", 0.0),
    ("fence_response_s", -0.1), ("fence_response_s", float("inf")),
    ("fence_box_xy_m", (10.0, 0.0, 0.0, 10.0)), ("fence_box_xy_m", (0.0, 0.0, 1.0)),
    ("fence_polygon_xy_m", ((0, 0), (1, 1))), ("fence_polygon_xy_m", ((0, 0), (1, 1), (2, 2))),
    ("fence_z_min_m", float("nan")),
])
def test_config_validation_names_field(field, value):
    with pytest.raises(ValueError, match=field):
        SupervisorConfig(**{field: value})


def test_config_validation_relations():
    with pytest.raises(ValueError, match="fence_z_min_m"):
        SupervisorConfig(fence_z_min_m=5.0, fence_z_max_m=1.0)
    with pytest.raises(ValueError, match="fence_polygon_xy_m and fence_box_xy_m"):
        SupervisorConfig(fence_polygon_xy_m=((0, 0), (1, 0), (0, 1)), fence_box_xy_m=(0, 0, 1, 1))


def test_intervention_to_dict():
    s = sup(**FAST)
    iv = s.on_command([np.nan, 0, 0, 0], 0.0, 0.0)
    d = iv.to_dict()
    assert d["kind"] == "refused_non_finite" and d["command_out"] is None and d["time_s"] == 0.0


# ------------------------------------------------------------------ flown against simulated vehicles
def _heading_to_enu(cmd, yaw):
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([c * cmd[0] - s * cmd[1], s * cmd[0] + c * cmd[1], cmd[2]])


def _enu_to_heading(v, yaw):
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([c * v[0] + s * v[1], -s * v[0] + c * v[1], v[2]])


class LagVehicle:
    """Map ENU velocity (m/s) follows the heading-frame command as a first-order lag of time
    constant ``tau_s``, integrated exactly per 50 Hz period; position (m) by the new velocity.
    Yaw fixed (the policies here command no yaw rate). The supervisor sees the state
    ``latency_steps`` periods late (odometry and link latency)."""

    def __init__(self, position, yaw, tau_s, latency_steps=1):
        self.position, self.velocity, self.yaw = np.array(position, float), np.zeros(3), float(yaw)
        self.alpha, self.latency = 1.0 - math.exp(-DT / tau_s), latency_steps
        self.history = [(self.position.copy(), self.velocity.copy())]

    def odometry(self):
        p, v = self.history[max(0, len(self.history) - 1 - self.latency)]
        return p, v, self.yaw

    def gust(self, velocity_enu):
        """Set the velocity (m/s, map ENU) now, as a gust would."""
        self.velocity[:] = velocity_enu
        self.history[-1] = (self.position.copy(), self.velocity.copy())

    def step(self, cmd):
        self.velocity += self.alpha * (_heading_to_enu(cmd, self.yaw) - self.velocity)
        self.position += self.velocity * DT
        self.history.append((self.position.copy(), self.velocity.copy()))


class ModelVehicle:
    """airplay's flight model (config/vehicle.yaml: 0.15 s lag, 3 / 4 m/s^2 limits, 250 Hz inside)."""

    def __init__(self, position, yaw):
        self.quad = QuadrotorBatch(load_vehicle_params(), 1)
        self.quad.reset(np.array([position], float), np.array([yaw], float))

    position = property(lambda self: self.quad.position[0].copy())
    velocity = property(lambda self: self.quad.velocity[0].copy())

    def odometry(self):
        return self.position, self.velocity, float(self.quad.yaw[0])

    def step(self, cmd):
        self.quad.step(np.asarray(cmd, float)[None])


def fly_at(supervisor, vehicle, velocity_enu, seconds, t0_s=0.0):
    """A policy commanding the map ENU ``velocity_enu`` (m/s, in the heading frame of the moment)
    every 50 Hz period for ``seconds`` from ``t0_s``. Returns the vehicle's true positions and the outputs."""
    positions, outputs = [], []
    for k in range(round(seconds / DT)):
        t = t0_s + k * DT
        p, v, yaw = vehicle.odometry()
        supervisor.on_state(p, v, yaw, t)
        assert supervisor.on_command(np.r_[_enu_to_heading(np.asarray(velocity_enu, float), yaw), 0.0], t, t) is None
        out = supervisor.output(t)
        vehicle.step(out.command)
        positions.append(vehicle.position.copy())
        outputs.append(out)
    return np.array(positions), outputs


def clearance(fence, p):
    """Metres from p to the nearest fence part, negative (-inf) outside."""
    return min(part.distance_m for part in fence.parts(p)) if fence.contains(p) else -math.inf


HEXAGON = tuple((20.0 * math.cos(a), 20.0 * math.sin(a)) for a in np.radians([0, 60, 120, 180, 240, 300]))
BIG_BOX = {"fence_box_xy_m": (-30.0, -30.0, 30.0, 30.0), "fence_z_min_m": 0.0, "fence_z_max_m": 20.0}
APPROACHES = {  # fence, start (m), yaw (rad), policy velocity (map ENU m/s: max speed straight at the fence)
    "box edge": (BIG_BOX, (0.0, 0.0, 10.0), 0.7, (5.0, 0.0, 0.0)),
    "polygon edge at 20 deg": ({"fence_polygon_xy_m": HEXAGON}, (0.0, 0.0, 5.0), 1.1,
                               (5.0 * math.cos(math.radians(10)), 5.0 * math.sin(math.radians(10)), 0.0)),
    "box corner": (BIG_BOX, (0.0, 0.0, 10.0), -0.4, (5.0 / math.sqrt(2), 5.0 / math.sqrt(2), 0.0)),
    "ceiling": (BIG_BOX, (0.0, 0.0, 10.0), 0.0, (0.0, 0.0, 3.0)),
    "floor": (BIG_BOX, (0.0, 0.0, 10.0), 0.0, (0.0, 0.0, -1.5)),
}


def check_stops_at_the_fence(name, positions, outputs, fence):
    gaps = [clearance(fence, p) for p in positions]
    closest = min(gaps)
    print(f"{name}: closest approach {closest:.3f} m, final gap {gaps[-1]:.3f} m")
    assert closest > 0.3, f"{name}: came within {closest:.3f} m of the fence (outside: -inf)"
    assert gaps[-1] < 0.6, f"{name}: stopped {gaps[-1]:.2f} m from the fence, not near it"
    assert np.linalg.norm(positions[-1] - positions[-2]) / DT < 0.05, f"{name}: still moving"
    assert {o.mode for o in outputs} == {Mode.FLYING}                 # braked, never needed a hold
    reported = [i.kind for o in outputs for i in o.interventions]
    assert reported.count(K.GEOFENCE_BRAKE) >= 1 and K.GEOFENCE_HOLD not in reported
    assert all(o.hold_position_enu is None and o.hold_yaw_rad is None for o in outputs)


@pytest.mark.parametrize("tau_s", [0.3, 0.5])
@pytest.mark.parametrize("name", list(APPROACHES))
@pytest.mark.slow
def test_lagging_vehicle_at_max_speed_stops_before_the_fence(name, tau_s):
    fence, start, yaw, velocity = APPROACHES[name]
    s = sup(**fence)
    positions, outputs = fly_at(s, LagVehicle(start, yaw, tau_s, latency_steps=2), velocity, 30.0)
    assert np.max(np.abs(positions - start)) > 8.0     # it did fly at the fence (a long way)
    check_stops_at_the_fence(f"{name}, lag {tau_s} s", positions, outputs, s.fence)


@pytest.mark.parametrize("name", ["box edge", "box corner", "ceiling"])
def test_vehicle_lagging_more_than_assumed_still_stops_inside(name):
    # 0.9 s lag + 40 ms latency, where fence_response_s assumes 0.7 s: the margin absorbs it (a hold may help)
    fence, start, yaw, velocity = APPROACHES[name]
    s = sup(**fence)
    positions, outputs = fly_at(s, LagVehicle(start, yaw, 0.9, latency_steps=2), velocity, 30.0)
    closest = min(clearance(s.fence, p) for p in positions)
    print(f"{name}, lag 0.9 s: closest approach {closest:.3f} m")
    assert closest > 0.1 and Mode.LANDING not in {o.mode for o in outputs}


@pytest.mark.parametrize("name", ["box edge", "box corner", "ceiling", "floor"])
def test_flight_model_at_max_speed_stops_before_the_fence(name):
    fence, start, yaw, velocity = APPROACHES[name]
    s = sup(**fence)
    positions, outputs = fly_at(s, ModelVehicle(start, yaw), velocity, 25.0)
    check_stops_at_the_fence(f"{name}, flight model", positions, outputs, s.fence)


def test_gust_too_fast_to_stop_holds_latched_then_lands_outside():
    s = sup(**FENCE)
    vehicle = LagVehicle([8.0, 5.0, 2.0], 0.0, 0.5, latency_steps=0)
    positions, outputs = fly_at(s, vehicle, (0.0, 0.0, 0.0), 1.0)       # hovering 2 m from the east edge
    assert {o.mode for o in outputs} == {Mode.FLYING}
    vehicle.gust([8.0, 0.0, 0.0])                                         # 8 m/s east
    positions, outputs = fly_at(s, vehicle, (0.0, 0.0, 0.0), 4.0, t0_s=1.0)
    modes = [o.mode for o in outputs]
    first_hold = modes.index(Mode.HOLD)
    assert first_hold == 0 and "predicted" in outputs[0].interventions[0].reason
    latched = outputs[0].hold_position_enu
    assert_allclose(latched, positions[0] - [8.0 * DT, 0, 0], atol=0.01) and outputs[0].hold_yaw_rad == 0.0
    landing = modes.index(Mode.LANDING)
    for o in outputs[:landing]:                                          # one HOLD, the same latch throughout
        assert o.mode is Mode.HOLD
        assert_allclose(o.hold_position_enu, latched)
        assert_allclose(o.command, np.zeros(4))
    assert max(p[0] for p in positions[:landing]) > 10.0                 # it was pushed outside ...
    reported = [i.kind for o in outputs for i in o.interventions]
    assert reported == [K.GEOFENCE_HOLD, K.GEOFENCE_LAND]                # ... held, then landed as before
    assert all(o.hold_position_enu is None for o in outputs[landing:])
    assert_allclose(outputs[-1].command, [0.0, 0.0, -0.5, 0.0])


# ------------------------------------------------------------------ hold position
def test_hold_latches_position_and_yaw_until_hold_ends():
    s = sup(**FAST)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.FLYING and out.hold_position_enu is None and out.hold_yaw_rad is None
    out = s.output(0.3)                                   # stale, no position known: hover without a hold point
    assert out.mode is Mode.HOLD and out.hold_position_enu is None and out.hold_yaw_rad is None
    s.on_state([1.0, 2.0, 3.0], [0.4, 0.0, 0.0], 0.5, 0.32)
    out = s.output(0.32)                                  # the first known position of this HOLD is latched
    assert_allclose(out.hold_position_enu, [1.0, 2.0, 3.0]) and out.hold_yaw_rad == 0.5
    s.on_state([1.2, 2.0, 3.0], [0.2, 0.0, 0.0], 0.6, 0.34)
    out = s.output(0.34)                                  # still the same HOLD: the latch stays
    assert_allclose(out.hold_position_enu, [1.0, 2.0, 3.0]) and out.hold_yaw_rad == 0.5
    assert_allclose(out.command, np.zeros(4))
    out.hold_position_enu[0] = 99.0                       # a copy: the caller cannot move the latch
    assert_allclose(s.output(0.35).hold_position_enu, [1.0, 2.0, 3.0])
    out = step(s, [0.5, 0.0, 0.0, 0.0], 0.4)              # fresh again: no hold point
    assert out.mode is Mode.FLYING and out.hold_position_enu is None and out.hold_yaw_rad is None
    s.on_state([1.5, 2.0, 3.0], [0.0, 0.0, 0.0], 0.7, 0.9)
    out = s.output(0.9)                                   # a new HOLD latches anew
    assert_allclose(out.hold_position_enu, [1.5, 2.0, 3.0]) and out.hold_yaw_rad == 0.7
    s.operator_stop(1.0)
    out = s.output(1.0)
    assert out.mode is Mode.LANDING and out.hold_position_enu is None and out.hold_yaw_rad is None


@pytest.mark.parametrize("fence, outside, latched", [
    (FENCE, [11.0, 5.0, 2.0], [9.5, 5.0, 2.0]),
    (FENCE, [5.0, 5.0, 5.5], [5.0, 5.0, 4.5]),                   # above the ceiling
    (FENCE, [11.0, 12.0, 6.0], [9.5, 9.5, 4.5]),                 # beyond a corner and the ceiling
    (FENCE, [9.8, -0.3, -0.2], [9.5, 0.5, 0.5]),
    ({"fence_polygon_xy_m": ((0, 0), (10, 0), (0, 10))}, [6.0, 6.0, 1.0],
     [5.0 - 0.5 / math.sqrt(2), 5.0 - 0.5 / math.sqrt(2), 1.0]),  # across the hypotenuse
    ({"fence_polygon_xy_m": ((0, 0), (10, 0), (0, 10))}, [-1.0, -2.0, 1.0], [0.5, 0.5, 1.0]),
])
def test_hold_outside_latches_nearest_point_a_margin_inside(fence, outside, latched):
    s = sup(**fence, **FAST)
    s.on_state(outside, [0.0, 0.0, 0.0], -1.0, 0.0)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.HOLD and kinds(out) == [K.GEOFENCE_HOLD]
    assert_allclose(out.hold_position_enu, latched, atol=1e-6) and out.hold_yaw_rad == -1.0
    assert s.fence.contains(out.hold_position_enu)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 2.0)
    assert out.mode is Mode.LANDING and out.hold_position_enu is None


def test_fence_without_state_holds_without_a_point():
    s = sup(**FENCE, **FAST)
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.HOLD and out.hold_position_enu is None and out.hold_yaw_rad is None


# ------------------------------------------------------------------ reports change the command
MODIFICATIONS = {K.CLAMPED_SPEED, K.CLAMPED_ACCEL, K.CLAMPED_YAW_RATE, K.GEOFENCE_OUTWARD_REMOVED, K.GEOFENCE_BRAKE}


def test_limits_met_to_within_float_noise_are_not_modified_nor_reported():
    s = sup()  # 3 m/s^2 xy, 4 m/s^2 z: 0.06 and 0.08 m/s per period
    out = step(s, [0.0, 0.0, 0.0, 0.0], 0.0)
    direction = np.array([0.6, 0.8])
    for k in range(1, 30):  # a ramp at the limit plus 1e-9 m/s (float noise): passed as it is
        cmd = np.r_[direction * (0.06 * k + 1e-9), 0.08 * k + 1e-9, 1.5708 + 1e-9]
        out = step(s, cmd, k * DT)
        assert out.interventions == ()
        np.testing.assert_array_equal(out.command, cmd)
    out = step(s, [3.0, 4.0 + 1e-9, 0.0, 0.0], 60 * DT + 10.0)     # |v| = 5 + 1e-9 m/s: at the speed limit
    assert K.CLAMPED_SPEED not in kinds(out)


def test_modification_reports_always_change_the_command():
    s = SafetySupervisor(SupervisorConfig(heartbeat_timeout_s=None, **FENCE))
    rng = np.random.default_rng(11)
    seen = set()
    for k in range(3000):
        t = k * DT
        s.on_state(rng.uniform([0.1, 0.1, 0.1], [9.9, 9.9, 4.9]), rng.normal(scale=0.3, size=3), 0.0, t)
        base = s.output(t).command if k % 3 == 0 else None   # now and then the last output again, plus float noise
        cmd = rng.normal(scale=2.0, size=4) if base is None else base + rng.normal(scale=1e-9, size=4)
        s.on_command(cmd, t, t)
        out = s.output(t)
        for iv in out.interventions:
            if iv.kind in MODIFICATIONS:
                seen.add(iv.kind)
                assert np.max(np.abs(iv.command_in - iv.command_out)) > 1e-6, iv
        if k % 400 == 399:
            s.reset()
    assert seen == MODIFICATIONS
