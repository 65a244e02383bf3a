"""The expert pilot: A* on the planning grid, smoothed, time-parametrised and tracked at 50 Hz.

Planning (:meth:`ExpertPolicy.reset`), all in map (ENU, metres):

1. A* on the navigable grid with a wall penalty: cells closer to the mesh than the
   planning clearance + ``preferred_extra_clearance_m`` cost more, so the expert keeps off
   walls where there is room (the task's own, unpenalised A* length stays the A*-SPL
   reference).
2. Line-of-sight shortcutting: from each anchor the path jumps to the farthest following
   point whose straight segment keeps, against the SDF, the clearance the original path
   had there (capped at the preferred clearance) and stays in the navigable region.
3. Corner rounding: each corner of the shortcut polyline becomes a quadratic Bezier with
   legs of up to ``corner_cut_max_m``, halved until the curve passes the same check.
4. Speed profile along the arc length: cruise speed, lateral acceleration limit in turns,
   vertical speed limits of the vehicle, tangential acceleration limit, start and end at
   rest (forward/backward passes). This gives a reference p(t), v(t), a(t).

Tracking (:meth:`ExpertPolicy.act`, once per 50 Hz control period): the map-frame
velocity command is ``v_ref + tau * a_ref + kp * (p_ref - p)`` (feed-forward that
compensates the vehicle's first-order velocity lag ``tau``, plus P on position), clamped
to the vehicle's limits and rotated into the heading frame; the yaw rate turns the vehicle
to face the path direction a little ahead. A time governor slows the reference clock when
the position error grows or the vehicle does not yet face its direction of travel, so the
expert turns before it flies into what its camera cannot see.

Commands: ``[vx forward, vy left]`` in the heading frame (map velocity rotated by -yaw),
``vz`` up (map z), ``yaw_rate`` rad/s CCW. Deterministic: no randomness at all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from airplay import frames
from airplay.sim.collision import inside_polygon_xy
from airplay.sim.sdf import trilinear_at
from airplay.tasks.astar import astar
from airplay.tasks.navigable import NavigableGrid, _signed_edge_distance_at

_SAMPLE_M = 0.05  # spacing of clearance checks and of the reference's arc-length samples
_TOL_M = 0.02  # shortcuts may come this much closer to walls than the path they replace


@dataclass(frozen=True)
class ExpertSettings:
    """Tuning of the expert; speeds m/s, accelerations m/s^2, lengths m, gains 1/s."""

    cruise_speed_m_s: float = 2.0
    accel_fraction: float = 0.6  # share of the vehicle's acceleration limits the reference uses
    lateral_accel_m_s2: float = 1.5
    vertical_speed_fraction: float = 0.8  # share of the vehicle's climb / descent limits
    preferred_extra_clearance_m: float = 0.45
    wall_penalty: float = 2.0  # step-cost weight at the planning clearance (0 at the preferred one)
    corner_cut_max_m: float = 1.2
    position_gain: float = 1.5
    yaw_gain: float = 2.5
    yaw_lookahead_m: float = 0.6
    governor_error_m: tuple[float, float] = (0.25, 0.6)  # full speed below, stop above
    governor_yaw_deg: tuple[float, float] = (25.0, 70.0)  # full speed below, stop above
    governor_slew_per_s: float = 0.5


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


# ---------------------------------------------------------------------------------------
# geometry


def _segment_points(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    n = max(2, int(math.ceil(np.linalg.norm(b - a) / _SAMPLE_M)) + 1)
    return a + np.linspace(0.0, 1.0, n)[:, None] * (b - a)


@njit(cache=True, inline="always")
def _point_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, x, y, z, required, in_f32):
    """One point of :class:`ClearanceCheck`: SDF.query's float32 value >= required (compared in
    float32 when ``in_f32``, as numpy compares a float32 with a Python float, else in float64),
    inside the height band and the polygon by ``margin`` (NavigableGrid.inside_region)."""
    d = np.float32(trilinear_at(values, origin, inv_res, x, y, z))
    if in_f32:
        if not d >= np.float32(required):
            return False
    elif not np.float64(d) >= required:
        return False
    if not (z >= z_lo and z <= z_hi):
        return False
    if margin <= 0:  # NavigableRegion.contains_xy: even-odd rule
        return inside_polygon_xy(poly, x, y)
    return _signed_edge_distance_at(poly, x, y) >= margin


@njit(cache=True)
def _points_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, points, required, in_f32):
    for k in range(points.shape[0]):
        if not _point_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, points[k, 0], points[k, 1],
                            points[k, 2], required, in_f32):
            return False
    return True


@njit(cache=True)
def _segment_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, a, b, required, in_f32, sample_m):
    """:class:`ClearanceCheck` of ``_segment_points(a, b)``, the points made as np.linspace makes them."""
    dx, dy, dz = b[0] - a[0], b[1] - a[1], b[2] - a[2]
    n = max(2, int(math.ceil(math.sqrt(dx * dx + dy * dy + dz * dz) / sample_m)) + 1)
    step = 1.0 / (n - 1)
    for k in range(n):
        t = 1.0 if k == n - 1 else k * step
        if not _point_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, a[0] + t * dx, a[1] + t * dy,
                            a[2] + t * dz, required, in_f32):
            return False
    return True


@njit(cache=True)
def _shortcut(points, clearance, cap, cap_f32, tol, values, origin, inv_res, poly, z_lo, z_hi, margin, sample_m):
    """:func:`shortcut` with a :class:`ClearanceCheck`, compiled (Python's min and the float32 /
    float64 comparison of the required clearance kept)."""
    k = points.shape[0]
    keep = np.empty(max(k, 1), dtype=np.int64)
    keep[0] = 0
    count = 1
    i = 0
    while i < k - 1:
        best = i + 1
        lo = clearance[i]
        if clearance[i + 1] < lo:
            lo = clearance[i + 1]
        for j in range(i + 2, k):
            if clearance[j] < lo:
                lo = clearance[j]
            if lo < cap:  # min(cap_m, lo) is lo, a numpy float64
                required, in_f32 = lo - tol, False
            else:
                required, in_f32 = cap - tol, cap_f32
            if _segment_clear(values, origin, inv_res, poly, z_lo, z_hi, margin, points[i], points[j], required,
                              in_f32, sample_m):
                best = j
            else:
                break
        keep[count] = best
        count += 1
        i = best
    return keep[:count]


def _compares_in_float32(value) -> bool | None:
    """How numpy compares a float32 array's minimum with ``value``: True (in float32: a Python
    float, NEP 50, or a float32), False (in float64: a float64), None (anything else)."""
    if type(value) is float or isinstance(value, (np.float32, np.float16)):
        return True
    if isinstance(value, np.float64):
        return False
    return None


class ClearanceCheck:
    """Is a sampled curve clear: signed distance >= a required value and inside the
    navigable region (polygon and height band) by the grid's boundary margin?

    Compiled for a :class:`~airplay.sim.sdf.SignedDistanceField` and a
    :class:`~airplay.tasks.navigable.NavigableGrid` (the answers of the numpy version,
    :meth:`check_numpy`, bit for bit); other kinds of ``sdf`` / ``grid`` use that version.
    """

    def __init__(self, sdf, grid: NavigableGrid):
        self.sdf, self.grid = sdf, grid

    def _compiled_args(self) -> tuple | None:
        """Arguments of the compiled checks (None: not the expected sdf / grid types)."""
        from airplay.sim.sdf import SignedDistanceField

        sdf, grid = self.sdf, self.grid
        if type(sdf) is not SignedDistanceField or type(grid) is not NavigableGrid \
                or np.asarray(grid.region.polygon).dtype != np.float64:
            return None  # (contains_xy computes in the polygon's own dtype)
        m = grid.boundary_margin_m
        return (sdf.values, sdf.origin_m.astype(np.float64), 1.0 / sdf.resolution_m,
                np.ascontiguousarray(grid.region.polygon, dtype=np.float64), float(grid.region.z_min + m),
                float(grid.region.z_max - m), float(m))

    def check_numpy(self, points: np.ndarray, required_m: float) -> bool:
        """The check in numpy (the reference of the compiled one)."""
        if not bool(np.min(self.sdf.query(points)) >= required_m):
            return False
        return bool(self.grid.inside_region(points).all())

    def __call__(self, points: np.ndarray, required_m: float) -> bool:
        pts = np.ascontiguousarray(np.atleast_2d(points), dtype=np.float64)
        in_f32 = _compares_in_float32(required_m)
        args = self._compiled_args() if in_f32 is not None and len(pts) and pts.shape[1] == 3 else None
        if args is None:
            return self.check_numpy(points, required_m)
        return bool(_points_clear(*args, pts, float(required_m), in_f32))


def shortcut(points: np.ndarray, clearance: np.ndarray, check: ClearanceCheck, cap_m: float) -> list[int]:
    """Indices of the waypoints kept by greedy line-of-sight shortcutting of ``points`` (K, 3),
    given the clearance (K,) at each point: a segment i->j must keep
    ``min(cap_m, min(clearance[i..j])) - tol``.

    Compiled for a :class:`ClearanceCheck` on float64 ``points`` and ``clearance``, with the
    same answer as the Python loop, which any other ``check`` gets."""
    cap_f32 = _compares_in_float32(cap_m)
    if (type(check) is ClearanceCheck and cap_f32 is not None and isinstance(points, np.ndarray)
            and points.dtype == np.float64 and points.ndim == 2 and points.shape[1] == 3
            and isinstance(clearance, np.ndarray) and clearance.dtype == np.float64
            and clearance.shape == (len(points),)):
        args = check._compiled_args()
        if args is not None:
            keep = _shortcut(np.ascontiguousarray(points), np.ascontiguousarray(clearance), float(cap_m), cap_f32,
                             _TOL_M, *args, _SAMPLE_M)
            return keep.tolist()
    keep = [0]
    i, k = 0, len(points)
    while i < k - 1:
        best = i + 1
        lo = clearance[i]
        lo = min(lo, clearance[i + 1])
        for j in range(i + 2, k):
            lo = min(lo, clearance[j])
            if check(_segment_points(points[i], points[j]), min(cap_m, lo) - _TOL_M):
                best = j
            else:
                break
        keep.append(best)
        i = best
    return keep


def _bezier(a: np.ndarray, c: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    t = np.linspace(0.0, 1.0, n)[:, None]
    return (1 - t) ** 2 * a + 2 * t * (1 - t) * c + t ** 2 * b


def round_corners(waypoints: np.ndarray, check: ClearanceCheck, cap_m: float, cut_max_m: float) -> np.ndarray:
    """Dense polyline (M, 3) through ``waypoints`` (W, 3) with each corner replaced by a
    quadratic Bezier whose legs (<= cut_max_m, <= 45 % of each adjacent segment) are halved
    until the curve keeps the clearance of the corner it replaces (capped at ``cap_m``)."""
    w = np.asarray(waypoints, dtype=np.float64)
    if len(w) < 3:
        return np.concatenate([_segment_points(w[0], w[-1])]) if len(w) == 2 else w.copy()
    pieces = []
    prev_end = w[0]
    for i in range(1, len(w) - 1):
        u1, u2 = w[i] - w[i - 1], w[i + 1] - w[i]
        l1, l2 = np.linalg.norm(u1), np.linalg.norm(u2)
        u1, u2 = u1 / l1, u2 / l2
        d = min(cut_max_m, 0.45 * l1, 0.45 * l2)
        corner = np.concatenate([_segment_points(w[i] - d * u1, w[i]), _segment_points(w[i], w[i] + d * u2)])
        required = min(cap_m, float(np.min(check.sdf.query(corner)))) - _TOL_M
        curve = None
        if float(np.dot(u1, u2)) < 1.0 - 1e-9:
            for _ in range(6):
                a, b = w[i] - d * u1, w[i] + d * u2
                cand = _bezier(a, w[i], b, max(3, int(math.ceil(2 * d / _SAMPLE_M)) + 1))
                if check(cand, required):
                    curve = cand
                    break
                d *= 0.5
        if curve is None:
            curve = w[i:i + 1]
        pieces.append(_segment_points(prev_end, curve[0]))
        pieces.append(curve)
        prev_end = curve[-1]
    pieces.append(_segment_points(prev_end, w[-1]))
    dense = np.concatenate(pieces)
    step = np.linalg.norm(np.diff(dense, axis=0), axis=1)
    return dense[np.r_[True, step > 1e-9]]


def resample(polyline: np.ndarray, ds: float) -> tuple[np.ndarray, np.ndarray]:
    """Points (N, 3) every ``ds`` metres of arc length along ``polyline`` (end included) and
    their arc lengths (N,)."""
    seg = np.linalg.norm(np.diff(polyline, axis=0), axis=1)
    s = np.r_[0.0, np.cumsum(seg)]
    total = float(s[-1])
    if total < 1e-9:
        return polyline[:1].copy(), np.zeros(1)
    n = max(2, int(math.ceil(total / ds)) + 1)
    si = np.linspace(0.0, total, n)
    return np.column_stack([np.interp(si, s, polyline[:, k]) for k in range(3)]), si


# ---------------------------------------------------------------------------------------
# speed profile


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


# ---------------------------------------------------------------------------------------
# tracking kernel


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
    """One period of :meth:`ExpertPolicy.act` (its docstring has the maths), compiled.

    Same floating-point operations in the same order as the numpy / Python version it
    replaces (np.clip, Python's min and max, numpy's float modulo and the 3-vector norm
    sqrt((x*x + y*y) + z*z) have their exact semantics here). ``ref``: the reference packed
    as rows [t, p (3), v (3), a (3), heading] (:meth:`ExpertPolicy._packed`); ``prm``: the settings
    (:meth:`ExpertPolicy._track_params`); ``trk``: [reference clock tau (s), governor rate,
    yaw target (rad), rate set (0/1)], updated. The map command before the horizontal limit
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
def _track_position(ref, prm, trk, px, py, pz, yaw, buf, out):
    """:func:`_track` (compiled entry point)."""
    return _track(ref, prm, trk, px, py, pz, yaw, buf, out)


@njit(cache=True)
def _track_state(ref, prm, trk, state, buf, out):
    """:func:`_track` from a 13-vector state: position and the yaw of the quaternion (x, y, z, w),
    :func:`airplay.frames.yaw_from_quat` in float64, which goes to buf[4]."""
    yaw = _yaw_from_quat(np.float64(state[3]), np.float64(state[4]), np.float64(state[5]), np.float64(state[6]))
    buf[4] = yaw
    return _track(ref, prm, trk, np.float64(state[0]), np.float64(state[1]), np.float64(state[2]), yaw, buf, out)


# ---------------------------------------------------------------------------------------
# the policy


class ExpertPolicy:
    """A*-based expert. ``reset(task)`` plans, ``act(...)`` returns the 50 Hz command.

    grid: :class:`~airplay.tasks.navigable.NavigableGrid`; sdf: the scene's
    :class:`~airplay.sim.sdf.SignedDistanceField`; vehicle_params: the
    :class:`~airplay.sim.dynamics.VehicleParams`; settings: :class:`ExpertSettings`.
    """

    def __init__(self, grid: NavigableGrid, sdf, vehicle_params, settings: ExpertSettings | None = None):
        self.grid, self.sdf, self.vehicle = grid, sdf, vehicle_params
        self.settings = settings if settings is not None else ExpertSettings()
        self.dt = 1.0 / float(vehicle_params.control_rate_hz)
        self.check = ClearanceCheck(sdf, grid)
        self._penalty: np.ndarray | None = None
        self.reference: Reference | None = None
        self.waypoints: np.ndarray | None = None
        self._prm = self._track_params()
        self._buf = np.empty(5)  # the map command and yaw rate before the limit; the yaw (rad)
        self._packed_of: Reference | None = None
        self._ref_packed = np.empty((0, 11))
        self._trk = np.zeros(4)

    # -- planning ----------------------------------------------------------------------
    @property
    def preferred_clearance_m(self) -> float:
        return self.grid.clearance_m + self.settings.preferred_extra_clearance_m

    def penalty(self) -> np.ndarray:
        """Per-cell step-cost penalty (computed once): ``wall_penalty * x^2`` with x going
        from 1 at the planning clearance to 0 at the preferred clearance."""
        if self._penalty is None:
            c0, c1 = self.grid.clearance_m, self.preferred_clearance_m
            x = np.clip((c1 - self.grid.distance_m) / max(c1 - c0, 1e-6), 0.0, 1.0)
            self._penalty = (self.settings.wall_penalty * x * x).astype(np.float32)
        return self._penalty

    def _cell_for(self, point: np.ndarray) -> np.ndarray | None:
        """The point's own cell when free, else the nearest free cell within 1 m."""
        cell = self.grid.to_cell(point)
        if self.grid.in_grid(cell)[0] and self.grid.free[tuple(cell)]:
            return cell
        return self.grid.nearest_free(point, max_radius_m=1.0)

    def plan(self, start: np.ndarray, goal: np.ndarray, fallback_path: np.ndarray | None = None) -> Reference:
        """Reference trajectory from ``start`` to ``goal`` (map, m)."""
        start, goal = np.asarray(start, np.float64), np.asarray(goal, np.float64)
        ends = [self._cell_for(start), self._cell_for(goal)]
        found = None
        if ends[0] is not None and ends[1] is not None:
            found = astar(self.grid.free, ends[0], ends[1], self.grid.resolution_m, self.penalty())
        if found is not None:
            pts = self.grid.to_world(found.cells)
        elif fallback_path is not None and len(fallback_path):
            pts = np.asarray(fallback_path, np.float64)
        else:
            pts = np.stack([start, goal])  # no path: fly straight, the episode will tell
        pts = np.concatenate([start[None], pts[1:-1], goal[None]]) if len(pts) >= 2 else np.stack([start, goal])
        cap = self.preferred_clearance_m
        clearance = np.asarray(self.sdf.query(pts), dtype=np.float64)
        keep = shortcut(pts, clearance, self.check, cap)
        self.waypoints = pts[keep]
        dense = round_corners(self.waypoints, self.check, cap, self.settings.corner_cut_max_m)
        points, s = resample(dense, _SAMPLE_M)
        return time_parametrise(points, s, self.vehicle, self.settings)

    def reset(self, task) -> None:
        """Plan for ``task`` (:class:`~airplay.tasks.sampler.Task`) and restart the clock."""
        self.reference = self.plan(task.start_position, task.goal_position, getattr(task, "path_m", None))
        # reference clock tau (s), governor rate, yaw target (rad), rate set (0: first period)
        self._trk = np.array([0.0, 0.0, float(task.start_yaw), 0.0])

    # -- tracking ----------------------------------------------------------------------
    def _track_params(self) -> np.ndarray:
        """The settings :func:`_track` reads, computed as the Python tracker computed them."""
        st, veh = self.settings, self.vehicle
        e0, e1 = st.governor_error_m
        y0, y1 = np.radians(st.governor_yaw_deg)
        return np.array([e0, e1, y0, y1, st.governor_slew_per_s * self.dt, veh.velocity_time_constant_s,
                         st.position_gain, st.yaw_gain, -0.95 * veh.max_speed_down_m_s, 0.95 * veh.max_speed_up_m_s,
                         -0.95 * veh.max_yaw_rate_rad_s, 0.95 * veh.max_yaw_rate_rad_s, 0.95 * veh.max_speed_xy_m_s,
                         0.5 * self.dt, self.dt], dtype=np.float64)

    def _packed(self) -> np.ndarray:
        """The reference as rows [t, p (3), v (3), a (3), heading] (N, 11) float64, for
        :func:`_track` (memoised per reference)."""
        ref = self.reference
        if self._packed_of is not ref:
            self._ref_packed = np.ascontiguousarray(np.column_stack([ref.t, ref.p, ref.v, ref.a, ref.heading]),
                                                    dtype=np.float64)
            self._packed_of = ref
        return self._ref_packed

    def _limit(self, yaw: float, out: np.ndarray) -> np.ndarray:
        """The end of :meth:`act` where :func:`_track` left it (near the horizontal limit):
        the limit by ``math.hypot``, the rotation into the heading frame, into ``out``."""
        cx, cy, cz, yaw_rate = self._buf[:4].tolist()
        vmax, half_dt = self._prm[12:14].tolist()  # 0.95 x the horizontal speed limit, dt / 2 (_track_params)
        sxy = math.hypot(cx, cy)
        if sxy > vmax:
            f = vmax / sxy
            cx *= f
            cy *= f
        psi = yaw + half_dt * yaw_rate
        c, s = math.cos(psi), math.sin(psi)
        out[0] = (c * cx + s * cy, -s * cx + c * cy, cz, yaw_rate)
        return out

    def _command(self, px: float, py: float, pz: float, yaw: float) -> np.ndarray:
        """(1, 4) float32 command from the map position (m) and yaw (rad); see :meth:`act`."""
        if self.reference is None:
            raise RuntimeError("ExpertPolicy.act called before reset(task)")
        out = np.empty((1, 4), np.float32)
        if not _track_position(self._packed(), self._prm, self._trk, px, py, pz, yaw, self._buf, out):
            self._limit(yaw, out)
        return out

    def act(self, position: np.ndarray, velocity: np.ndarray, yaw: float) -> np.ndarray:
        """Command (4,) float32 ``[vx, vy, vz, yaw_rate]`` for one control period, from the
        vehicle's map position (m), map velocity (m/s) and yaw (rad).

        Call exactly once per control period: the reference clock advances one period per
        call. ``velocity`` is part of the common policy signature; the tracker does not
        need it (the feed-forward carries the motion, the lag model is in the gains).
        """
        x, y, z = np.asarray(position, dtype=np.float64).reshape(3).tolist()
        return self._command(x, y, z, float(yaw))[0]

    def act_on_state(self, state: np.ndarray) -> np.ndarray:
        """(1, 4) float32: :meth:`act` from a 13-vector state (position, quaternion x, y, z, w,
        map velocity, body rates; :class:`airplay.world.env.AirPlayEnv`'s ``obs["state"]``), the
        yaw being :func:`airplay.frames.yaw_from_quat` of its quaternion."""
        if type(state) is not np.ndarray or state.ndim != 1 or state.dtype.char not in "fd":
            state = np.ascontiguousarray(state, dtype=np.float64).reshape(-1)
        if len(state) < 7:
            raise ValueError(f"state must hold position and quaternion (>= 7 values), got {len(state)}")
        if self.reference is None:
            raise RuntimeError("ExpertPolicy.act called before reset(task)")
        out = np.empty((1, 4), np.float32)
        buf = self._buf
        if not _track_state(self._packed(), self._prm, self._trk, state, buf, out):
            self._limit(float(buf[4]), out)
        return out
