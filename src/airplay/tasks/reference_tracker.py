"""The expert's 50 Hz tracker of a reference trajectory, compiled with numba.

The map-frame velocity command is ``v_ref + tau * a_ref + kp * (p_ref - p)`` (feed-forward
that compensates the vehicle's first-order velocity lag ``tau``, plus P on position), clamped
to the vehicle's limits and rotated into the heading frame; the yaw rate turns the vehicle to
face the path direction a little ahead. A time governor slows the reference clock when the
position error grows or the vehicle does not yet face its direction of travel.

Positions map (ENU) metres, velocities m/s, angles rad, yaw rate rad/s CCW; the command is
``[vx forward, vy left, vz up, yaw_rate]`` in the heading frame.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from airplay import frames


@njit(cache=True, inline="always")
def _np_clip(x, lo, hi):
    """np.clip of a float64 scalar, bit for bit: min(max(x, lo), hi), NaN passed through."""
    m = x if (x != x or x > lo) else lo
    return m if (m != m or m < hi) else hi


# airplay.frames' scalar functions, compiled for the tracker (the same float operations).
_wrap_angle = njit(cache=True, inline="always")(frames.wrap_angle)
_yaw_from_quat = njit(cache=True, inline="always")(frames.yaw_from_quat)


@njit(cache=True, inline="always")
def _track(ref, prm, trk, px, py, pz, yaw, buf, out):
    """One period of :meth:`~airplay.tasks.expert.ExpertPilot.act`, compiled (the maths is in
    this module's docstring).

    Same floating-point operations in the same order as the numpy / Python version it
    replaces (np.clip, Python's min and max, numpy's float modulo and the 3-vector norm
    sqrt((x*x + y*y) + z*z) have their exact semantics here). ``ref``: the reference packed
    as rows [t, p (3), v (3), a (3), heading] (``ExpertPilot._packed``); ``prm``: the
    settings (``ExpertPilot._track_params``); ``trk``: [reference clock tau (s), governor
    rate, yaw target (rad), rate set (0/1)], updated. The map command before the horizontal limit
    and the yaw rate go to ``buf``; when the command is clearly within the limit the heading-
    frame command goes to ``out`` (1, 4) and True is returned, else False: the caller applies
    the limit with Python's ``math.hypot`` (whose rounding differs from libm's) and rotates.
    """
    e0, e1, y0, y1 = prm[0], prm[1], prm[2], prm[3]
    slew, tau_v, kp, yaw_gain = prm[4], prm[5], prm[6], prm[7]
    vz_lo, vz_hi, r_lo, r_hi = prm[8], prm[9], prm[10], prm[11]
    vmax, half_dt, dt = prm[12], prm[13], prm[14]
    tau = trk[0]
    n = ref.shape[0]
    t_end = ref[n - 1, 0]
    if tau >= t_end:
        rx, ry, rz = ref[n - 1, 1], ref[n - 1, 2], ref[n - 1, 3]
        vx = vy = vz = 0.0
        ax = ay = az = 0.0
        hd = ref[n - 1, 10]
    else:
        lo, hi = 0, n  # np.searchsorted(t, tau, side="right")
        while lo < hi:
            mid = (lo + hi) // 2
            if tau < ref[mid, 0]:
                hi = mid
            else:
                lo = mid + 1
        i = min(max(lo - 1, 0), n - 2)
        r0, r1 = ref[i], ref[i + 1]
        den = r1[0] - r0[0]
        if 1e-12 > den:
            den = 1e-12
        w = (tau - r0[0]) / den
        rx = r0[1] + w * (r1[1] - r0[1])
        ry = r0[2] + w * (r1[2] - r0[2])
        rz = r0[3] + w * (r1[3] - r0[3])
        vx = r0[4] + w * (r1[4] - r0[4])
        vy = r0[5] + w * (r1[5] - r0[5])
        vz = r0[6] + w * (r1[6] - r0[6])
        ax = r0[7] + w * (r1[7] - r0[7])
        ay = r0[8] + w * (r1[8] - r0[8])
        az = r0[9] + w * (r1[9] - r0[9])
        hd = r0[10]
    ex, ey, ez = rx - px, ry - py, rz - pz
    if not math.isnan(hd):
        trk[2] = hd
    yaw_err = _wrap_angle(trk[2] - yaw)
    g_err = _np_clip((e1 - math.sqrt(ex * ex + ey * ey + ez * ez)) / (e1 - e0), 0.0, 1.0)
    g_yaw = _np_clip((y1 - abs(yaw_err)) / (y1 - y0), 0.0, 1.0)
    target = g_yaw if g_yaw < g_err else g_err
    if trk[3] == 0.0:  # first period: start at the rate the heading allows
        rate = target
        trk[3] = 1.0
    else:
        rate = trk[1]
    rate = _np_clip(target, rate - slew, rate + slew)
    trk[1] = rate
    cx = rate * (vx + tau_v * ax) + kp * ex
    cy = rate * (vy + tau_v * ay) + kp * ey
    cz = _np_clip(rate * (vz + tau_v * az) + kp * ez, vz_lo, vz_hi)
    yaw_rate = _np_clip(yaw_gain * yaw_err, r_lo, r_hi)
    tau_next = tau + rate * dt
    trk[0] = t_end if t_end < tau_next else tau_next
    buf[0], buf[1], buf[2], buf[3] = cx, cy, cz, yaw_rate
    if math.sqrt(cx * cx + cy * cy) >= vmax * (1.0 - 1e-9):
        return False  # at or near the limit: math.hypot decides (see above)
    psi = yaw + half_dt * yaw_rate
    c, s = math.cos(psi), math.sin(psi)
    out[0, 0] = c * cx + s * cy
    out[0, 1] = -s * cx + c * cy
    out[0, 2] = cz
    out[0, 3] = yaw_rate
    return True


@njit(cache=True)
def track_position(ref, prm, trk, px, py, pz, yaw, buf, out):
    """:func:`_track` (compiled entry point)."""
    return _track(ref, prm, trk, px, py, pz, yaw, buf, out)


@njit(cache=True)
def track_state(ref, prm, trk, state, buf, out):
    """:func:`_track` from a 13-vector state: position and the yaw of the quaternion (x, y, z, w),
    :func:`airplay.frames.yaw_from_quat` in float64, which goes to buf[4]."""
    yaw = _yaw_from_quat(np.float64(state[3]), np.float64(state[4]), np.float64(state[5]), np.float64(state[6]))
    buf[4] = yaw
    return _track(ref, prm, trk, np.float64(state[0]), np.float64(state[1]), np.float64(state[2]), yaw, buf, out)

