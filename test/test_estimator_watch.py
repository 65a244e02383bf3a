"""The bridge's watch on the autopilot's estimate (airplay.bridge.estimator_watch) and the fence
margin that grows with the estimate's uncertainty (SafetySupervisor.on_estimate_uncertainty), on
the numbers PX4 SIH and ArduCopter SITL were seen to send."""

from __future__ import annotations

import numpy as np
import pytest

from airplay.bridge.estimator_watch import EstimateLimits, EstimatorWatch
from airplay.bridge.supervisor import SafetySupervisor
from airplay.bridge.supervisor_config import SupervisorConfig

PX4_FLYING = 0x37F     # PX4 SIH flying on GPS (ESTIMATOR_STATUS flags)
PX4_DEAD_RECKONING_LOST = 0x365  # 5.5 s after its GPS stopped: no horizontal velocity or position


def flying_watch() -> EstimatorWatch:
    w = EstimatorWatch()
    w.on_gps(3)
    w.on_estimator_status(PX4_FLYING, 0.3)
    for i in range(50):  # 1 s of positions at 50 Hz, 1 m/s north
        w.on_position(i * 0.02, i * 20, (0.02 * i, 0.0, -1.0), (1.0, 0.0, 0.0))
    return w


def test_a_healthy_estimate_has_no_problems():
    w = flying_watch()
    assert w.problems(1.0, last_message_s=1.0) == []
    assert w.eph_m == pytest.approx(0.3)


def test_gps_loss_is_seen_in_the_fix_and_the_flags():
    w = flying_watch()
    w.on_gps(0)   # PX4 SIH ~1 s after its GPS stopped
    problems = w.problems(1.1)
    assert len(problems) == 1 and problems[0].startswith("GPS lost"), problems
    w.on_estimator_status(PX4_DEAD_RECKONING_LOST, 2.3)
    text = " | ".join(w.problems(6.5))
    assert "no horizontal position" in text and "horizontal uncertainty 2.30 m" in text


def test_a_vehicle_that_never_had_a_fix_is_judged_on_its_flags():
    w = EstimatorWatch()
    w.on_gps(0)                     # indoors: no GPS at all, a vision estimate
    w.on_estimator_status(PX4_FLYING & ~16, 0.1)  # relative position only
    assert w.problems(0.0) == []


@pytest.mark.parametrize("source, flags, expected", [
    ("px4", PX4_FLYING | 1024, "GPS glitch"),
    ("px4", PX4_FLYING | 2048, "accelerometer"),
    ("ardupilot", 0x37F | 32768, "GPS glitch"),
    ("ardupilot", 0x37F | 1024, "not initialised"),
    ("ardupilot", 0x37F & ~(8 | 16), "no horizontal position"),
])
def test_the_estimators_own_alarms(source, flags, expected):
    w = EstimatorWatch()
    if source == "px4":
        w.on_estimator_status(flags, 0.3)
    else:
        w.on_ekf_status(flags, 0.1, 0.1)
    assert any(expected in p for p in w.problems(0.0)), w.problems(0.0)


def test_ardupilot_test_ratios_past_the_limit():
    w = EstimatorWatch(EstimateLimits(ekf_variance_max=0.8))
    w.on_ekf_status(0x37F, 0.2, 0.79)
    assert w.problems(0.0) == []
    w.on_ekf_status(0x37F, 0.2, 0.95)
    assert w.problems(0.2) == ["the EKF's horizontal position test ratio is 0.95 (> 0.80)"]


def test_severe_texts_about_the_estimate_count_from_the_start_of_control():
    w = EstimatorWatch()
    w.on_statustext(1.0, 2, "PreArm: GPS not healthy")          # an answer on the ground
    w.on_statustext(2.0, 4, "GPS Glitch cleared")               # a warning, not severe
    w.on_statustext(3.0, 2, "Battery 1 is critical")            # severe, not the estimate
    assert w.problems(3.0) == []
    w.on_statustext(5.0, 2, "GPS Glitch or Compass error")     # ArduCopter, CRITICAL
    assert w.problems(5.0, since_s=6.0) == []
    assert w.problems(5.0, since_s=4.0) == ["the autopilot says: GPS Glitch or Compass error"]


def test_a_jump_beyond_the_velocity_and_a_stale_position():
    w = flying_watch()
    # ArduCopter taking in a 22 m glitch: one step north far beyond the 1 m/s it flies
    w.on_position(1.0, 1000, (22.0, 0.0, -1.0), (1.0, 0.0, 0.0))
    assert any("jumped 21.00 m" in p for p in w.problems(1.0)), w.problems(1.0)
    w2 = flying_watch()
    # a burst after a stall on this side: the autopilot's clock says 0.6 s passed at 1 m/s, no jump
    w2.on_position(5.0, 1580, (0.98 + 0.6, 0.0, -1.0), (1.0, 0.0, 0.0))
    assert w2.problems(5.0, last_message_s=5.0) == []
    # positions stop while other messages come: stale; nothing comes at all: the link watch's business
    assert w2.problems(7.0, last_message_s=5.0) == []
    assert "no position estimate" in w2.problems(7.0, last_message_s=6.9)[0]


def test_limits_are_checked():
    with pytest.raises(ValueError, match="max_eph_m"):
        EstimateLimits(max_eph_m=0.0)
    with pytest.raises(ValueError, match="fence_margin_per_eph"):
        SupervisorConfig(fence_margin_per_eph=-1.0)


def test_the_fence_margin_grows_with_the_uncertainty():
    """A vehicle flying at 1 m/s towards a fence 3 m away: the braking cap (rule 5b) leaves it
    less room once the estimate's eph (x fence_margin_per_eph) exceeds fence_margin_m; the hold
    point of a vehicle outside the fence is inset by the grown margin."""
    cfg = SupervisorConfig(fence_box_xy_m=(-10.0, -10.0, 3.0, 10.0), fence_margin_m=0.5, fence_margin_per_eph=2.0,
                           heartbeat_timeout_s=None, limit_command_accel=False)

    def capped(eph):
        sup = SafetySupervisor(cfg)
        assert sup.on_estimate_uncertainty(eph) == pytest.approx(max(0.5, 2.0 * (eph or 0.0)))
        sup.on_state(np.zeros(3), np.array([1.0, 0.0, 0.0]), 0.0, 0.0)
        sup.on_command([3.0, 0.0, 0.0, 0.0], 0.0, 0.0)
        return float(sup.output(0.0).command[0])

    assert capped(None) == pytest.approx(capped(0.2))           # 2 x 0.2 < 0.5: unchanged
    assert capped(1.0) < capped(0.2)                            # 2 m margin: a lower cap
    room = 3.0 - 2.0 - 1.0 * cfg.fence_response_s
    assert capped(1.0) == pytest.approx(np.sqrt(2 * cfg.fence_brake_accel_m_s2 * room), abs=1e-6)
    sup = SafetySupervisor(cfg)
    sup.on_estimate_uncertainty(1.5)
    sup.on_state(np.array([3.5, 0.0, 1.0]), np.zeros(3), 0.0, 0.0)
    sup.on_command([0.0, 0.0, 0.0, 0.0], 0.0, 0.0)
    out = sup.output(0.0)
    assert out.hold_position_enu is not None and out.hold_position_enu[0] == pytest.approx(3.0 - 3.0, abs=1e-6)
