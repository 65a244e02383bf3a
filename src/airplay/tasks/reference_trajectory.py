"""The expert's reference trajectory: a smoothed path time-parametrised along its arc length.

Speed profile along the arc length (map ENU, metres, seconds): cruise speed, lateral
acceleration limit in turns, vertical speed limits of the vehicle, tangential acceleration
limit, start and end at rest (forward/backward passes). This gives a reference p(t), v(t),
a(t) and the heading to face at each sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airplay.tasks.expert_settings import ExpertSettings


@dataclass(frozen=True)
class Reference:
    """Time-parametrised reference: times (N,) s; positions, velocities, accelerations
    (N, 3) map; arc length (N,) m; heading to face (N,) rad (NaN where undefined)."""

    t: np.ndarray
    p: np.ndarray
    v: np.ndarray
    a: np.ndarray
    s: np.ndarray
    heading: np.ndarray

    @property
    def duration_s(self) -> float:
        return float(self.t[-1])

    @property
    def length_m(self) -> float:
        return float(self.s[-1])



def time_parametrise(points: np.ndarray, s: np.ndarray, vehicle, settings: ExpertSettings) -> Reference:
    """Reference from arc-length samples: speed limited by cruise, lateral acceleration
    (curvature), vertical speed limits, and tangential acceleration; at rest at both ends."""
    n = len(points)
    if n < 2:
        z = np.zeros((1, 3))
        return Reference(np.zeros(1), points[:1].copy(), z, z.copy(), np.zeros(1), np.full(1, np.nan))
    seg = np.diff(points, axis=0)
    ds = np.linalg.norm(seg, axis=1)
    tang_seg = seg / np.maximum(ds, 1e-12)[:, None]
    tang = np.empty_like(points)
    tang[0], tang[-1] = tang_seg[0], tang_seg[-1]
    mid = tang_seg[:-1] + tang_seg[1:]
    tang[1:-1] = mid / np.maximum(np.linalg.norm(mid, axis=1), 1e-12)[:, None]
    # curvature at interior samples: turn angle between neighbouring segments / mean length
    cosang = np.clip(np.sum(tang_seg[:-1] * tang_seg[1:], axis=1), -1.0, 1.0)
    kappa = np.zeros(n)
    kappa[1:-1] = np.arccos(cosang) / np.maximum(0.5 * (ds[:-1] + ds[1:]), 1e-9)
    # widen by the neighbours: the discrete curvature of a resampled curve is noisy
    kappa = np.maximum.reduce([kappa, np.r_[kappa[1:], 0.0], np.r_[0.0, kappa[:-1]]])
    v_lim = np.full(n, settings.cruise_speed_m_s)
    v_lim = np.minimum(v_lim, np.sqrt(settings.lateral_accel_m_s2 / np.maximum(kappa, 1e-9)))
    vz_up = settings.vertical_speed_fraction * vehicle.max_speed_up_m_s
    vz_dn = settings.vertical_speed_fraction * vehicle.max_speed_down_m_s
    tz = tang[:, 2]
    with np.errstate(divide="ignore"):
        v_lim = np.minimum(v_lim, np.where(tz > 1e-6, vz_up / np.abs(tz), np.inf))
        v_lim = np.minimum(v_lim, np.where(tz < -1e-6, vz_dn / np.abs(tz), np.inf))
    v_lim = np.minimum(v_lim, settings.accel_fraction * vehicle.max_speed_xy_m_s)
    acc = settings.accel_fraction * min(vehicle.max_accel_xy_m_s2, vehicle.max_accel_z_m_s2)
    v = v_lim.copy()
    v[0] = v[-1] = 0.0
    for i in range(n - 1):
        v[i + 1] = min(v[i + 1], math.sqrt(v[i] ** 2 + 2.0 * acc * ds[i]))
    for i in range(n - 2, -1, -1):
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2.0 * acc * ds[i]))
    dt = 2.0 * ds / np.maximum(v[:-1] + v[1:], 1e-9)
    t = np.r_[0.0, np.cumsum(dt)]
    vel = v[:, None] * tang
    a = np.zeros_like(vel)
    a[1:-1] = (vel[2:] - vel[:-2]) / (t[2:] - t[:-2])[:, None]
    a[0] = (vel[1] - vel[0]) / max(t[1] - t[0], 1e-9)
    a[-1] = (vel[-1] - vel[-2]) / max(t[-1] - t[-2], 1e-9)
    return Reference(t=t, p=points.copy(), v=vel, a=a, s=s.copy(), heading=_headings(points, s, settings))


def _headings(points: np.ndarray, s: np.ndarray, settings: ExpertSettings) -> np.ndarray:
    """Yaw to face at each sample: direction from it to the point ``yaw_lookahead_m`` ahead
    (horizontal); where that is nearly vertical, the next defined value (else NaN)."""
    ahead = np.searchsorted(s, s + settings.yaw_lookahead_m)
    ahead = np.minimum(ahead, len(s) - 1)
    d = points[ahead, :2] - points[:, :2]
    norm = np.hypot(d[:, 0], d[:, 1])
    heading = np.where(norm > 0.1 * settings.yaw_lookahead_m, np.arctan2(d[:, 1], d[:, 0]), np.nan)
    # fill undefined values backwards from the next defined one, then forwards at the end
    for i in range(len(heading) - 2, -1, -1):
        if np.isnan(heading[i]):
            heading[i] = heading[i + 1]
    for i in range(1, len(heading)):
        if np.isnan(heading[i]):
            heading[i] = heading[i - 1]
    return heading

