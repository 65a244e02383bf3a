"""The expert pilot: A* on the planning grid, smoothed, time-parametrised and tracked at 50 Hz.

Planning (:meth:`ExpertPilot.reset`), all in map (ENU, metres):

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

Tracking (:meth:`ExpertPilot.act`, once per 50 Hz control period): the map-frame
velocity command is ``v_ref + tau * a_ref + kp * (p_ref - p)`` (feed-forward that
compensates the vehicle's first-order velocity lag ``tau``, plus P on position), clamped
to the vehicle's limits and rotated into the heading frame; the yaw rate turns the vehicle
to face the path direction a little ahead. A time governor slows the reference clock when
the position error grows or the vehicle does not yet face its direction of travel, so the
expert turns before it flies into what its camera cannot see.

Commands: ``[vx forward, vy left]`` in the heading frame (map velocity rotated by -yaw),
``vz`` up (map z), ``yaw_rate`` rad/s CCW. Deterministic: no randomness at all.

The parts: :mod:`airplay.tasks.path_smoothing` (steps 2 and 3),
:mod:`airplay.tasks.reference_trajectory` (step 4), :mod:`airplay.tasks.reference_tracker`
(the compiled tracking kernel), :mod:`airplay.tasks.expert_settings` (the tuning); this module
holds the pilot that plans and tracks with them. It is not a policy of the contract in
:mod:`airplay.policies.base`: :class:`airplay.policies.expert.ExpertNavigator` flies it as one.
"""

from __future__ import annotations

import math

import numpy as np

from airplay.tasks.astar import astar
from airplay.tasks.expert_settings import ExpertSettings
from airplay.tasks.navigable import NavigableGrid
from airplay.tasks.path_smoothing import SAMPLE_M, ClearanceCheck, resample, round_corners, shortcut
from airplay.tasks.reference_tracker import track_position, track_state
from airplay.tasks.reference_trajectory import Reference, time_parametrise


class ExpertPilot:
    """The A* expert pilot. ``reset(task)`` plans, ``act(...)`` returns the 50 Hz command.

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
        points, s = resample(dense, SAMPLE_M)
        return time_parametrise(points, s, self.vehicle, self.settings)

    def reset(self, task) -> None:
        """Plan for ``task`` (:class:`~airplay.tasks.sampler.Task`) and restart the clock."""
        self.reference = self.plan(task.start_position, task.goal_position, getattr(task, "path_m", None))
        # reference clock tau (s), governor rate, yaw target (rad), rate set (0: first period)
        self._trk = np.array([0.0, 0.0, float(task.start_yaw), 0.0])

    # -- tracking ----------------------------------------------------------------------
    def _track_params(self) -> np.ndarray:
        """The settings the tracker (:mod:`airplay.tasks.reference_tracker`) reads, computed as the Python
        tracker computed them."""
        st, veh = self.settings, self.vehicle
        e0, e1 = st.governor_error_m
        y0, y1 = np.radians(st.governor_yaw_deg)
        return np.array([e0, e1, y0, y1, st.governor_slew_per_s * self.dt, veh.velocity_time_constant_s,
                         st.position_gain, st.yaw_gain, -0.95 * veh.max_speed_down_m_s, 0.95 * veh.max_speed_up_m_s,
                         -0.95 * veh.max_yaw_rate_rad_s, 0.95 * veh.max_yaw_rate_rad_s, 0.95 * veh.max_speed_xy_m_s,
                         0.5 * self.dt, self.dt], dtype=np.float64)

    def _packed(self) -> np.ndarray:
        """The reference as rows [t, p (3), v (3), a (3), heading] (N, 11) float64, for
        the tracker (memoised per reference)."""
        ref = self.reference
        if self._packed_of is not ref:
            self._ref_packed = np.ascontiguousarray(np.column_stack([ref.t, ref.p, ref.v, ref.a, ref.heading]),
                                                    dtype=np.float64)
            self._packed_of = ref
        return self._ref_packed

    def _limit(self, yaw: float, out: np.ndarray) -> np.ndarray:
        """The end of :meth:`act` where the tracker left it (near the horizontal limit):
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
            raise RuntimeError("ExpertPilot.act called before reset(task)")
        out = np.empty((1, 4), np.float32)
        if not track_position(self._packed(), self._prm, self._trk, px, py, pz, yaw, self._buf, out):
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
            raise RuntimeError("ExpertPilot.act called before reset(task)")
        out = np.empty((1, 4), np.float32)
        buf = self._buf
        if not track_state(self._packed(), self._prm, self._trk, state, buf, out):
            self._limit(float(buf[4]), out)
        return out
