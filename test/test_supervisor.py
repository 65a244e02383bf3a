"""SafetySupervisor: every intervention against hand-computed expectations."""

import logging
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

from airplay.bridge.supervisor import (InterventionKind as K, Mode, SafetySupervisor,
                                       SupervisorConfig)

DT = 0.02
FAST = dict(max_accel_xy_m_s2=1e6, max_accel_z_m_s2=1e6)  # accel limit out of the way


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


FENCE = dict(fence_box_xy_m=(0.0, 0.0, 10.0, 10.0), fence_z_min_m=0.0, fence_z_max_m=5.0)


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
    s = sup(**FENCE, **FAST)
    s.on_state([9.99, 5.0, 2.0], [1.0, 0.0, 0.0], 0.0, 0.0)  # 9.99 + 1 * 0.02 = 10.01 > 10
    out = step(s, [1.0, 0.0, 0.0, 0.0], 0.0)
    assert out.mode is Mode.HOLD and kinds(out) == [K.GEOFENCE_HOLD]
    assert "predicted" in out.interventions[0].reason
    assert step(s, [1.0, 0.0, 0.0, 0.0], 5.0).mode is Mode.HOLD   # inside: never lands


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
    ("landing_speed_m_s", 0.0), ("fence_margin_m", -0.5), ("fence_lookahead_s", 0.0),
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
