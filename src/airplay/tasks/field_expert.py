"""The field expert: a state-only pilot whose command is a pure function of (state, goal).

:class:`~airplay.tasks.expert.ExpertPilot` tracks a time-parametrised plan made at reset
with a reference clock, so its command for a state depends on the flight before it. The
field expert answers from the state alone, which makes it a labeller for DAgger: the same
state and goal give the same command bit for bit, whatever was asked before.

Per goal, a geodesic cost-to-go field (:mod:`airplay.tasks.cost_to_go`, the A* expert's
penalised step costs, so it keeps off walls) is built once; each command then:

1. takes the position (map ENU, m) and the heading yaw of the quaternion,
   :func:`airplay.frames.yaw_from_quat` (state[0:3], state[3:7] = x, y, z, w; the
   velocity and body rates of the state are not read);
2. finds the carrot :meth:`CostToGo.lookahead_point` ``lookahead_m`` ahead along the field
   from each of the 8 cell centres around the position and blends their offsets with
   trilinear weights (``blend_cells``): the command then varies continuously with the
   position. From the position's own cell alone it jumps at cell borders: 4x larger
   step-to-step changes of the labels, which a learned policy cannot fit (measured on
   indoor_0, 20 tasks: mean |change| of vx per step 0.087 unblended, 0.020 blended, the A*
   expert's 0.018);
3. yaw rate = ``yaw_gain * (bearing to the carrot - yaw)`` clamped to 0.95 x the vehicle's
   limit, faded to 0 as the carrot's horizontal distance falls below ``yaw_fade_m`` (near
   the goal it holds its yaw and stops);
4. speed = min(cruise, ``goal_gain`` x the distance left via the carrot (so it stops on the
   goal), ``carrot_gain`` x the distance to the carrot (the carrot comes near where the path
   turns sharply or the view is blocked), a wall-clearance ramp), the horizontal part times a heading factor
   ``clip((cos err - cos max_err) / (1 - cos max_err), 0, 1)``: it turns before it flies
   where its camera does not look (0 beyond ``max_heading_error_deg``);
5. map velocity = speed x unit vector to the carrot, limited to 0.95 x the vehicle's
   limits, rotated into the heading frame as :class:`ExpertPilot` does (by -(yaw + dt/2 x
   yaw rate), the heading in the middle of the control period).

Command: (1, 4) float32 ``[vx forward, vy left, vz up, yaw_rate]`` (m/s, rad/s CCW), the
convention of :class:`~airplay.tasks.expert.ExpertPilot`. rclpy-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airplay.frames import wrap_angle, yaw_of_state
from airplay.tasks.cost_to_go import CostToGo, FieldCache, wall_penalty
from airplay.tasks.navigable import NavigableGrid


@dataclass(frozen=True)
class FieldExpertSettings:
    """Tuning; speeds m/s, lengths m, gains 1/s."""

    cruise_speed_m_s: float = 2.0
    lookahead_m: float = 1.5
    blend_cells: bool = True  # the carrot offset blended over the 8 cells around the position (continuous labels)
    carrot_gain: float = 1.5  # speed <= carrot_gain x distance to the carrot (a near carrot: a sharp turn)
    yaw_gain: float = 1.5
    yaw_fade_m: float = 0.4  # below this horizontal distance to the carrot the yaw rate fades to 0
    max_heading_error_deg: float = 60.0  # no horizontal speed beyond this heading error
    goal_gain: float = 1.0  # speed <= goal_gain x distance left (m) near the goal
    wall_speed_m_s: float = 0.6  # speed at the planning clearance; cruise at the preferred one
    field_cache: int = 4  # cost-to-go fields kept (per goal cell)
    wall_penalty: float = 6.0  # step-cost weight at the planning clearance (the A* expert: 2)
    preferred_extra_clearance_m: float = 0.8  # the penalty is 0 this far beyond it (the A* expert: 0.45)


class FieldExpert:
    """State-only expert: ``reset(task)`` gets the goal's field, ``act_on_state(state)`` the command.

    grid: :class:`~airplay.tasks.navigable.NavigableGrid`; sdf: the scene's SDF (kept for the
    interface of :class:`~airplay.tasks.expert.ExpertPilot`; the grid's distances are used);
    vehicle_params: :class:`~airplay.sim.dynamics.VehicleParams`.
    """

    def __init__(self, grid: NavigableGrid, sdf, vehicle_params, settings: FieldExpertSettings | None = None):
        self.grid, self.sdf, self.vehicle = grid, sdf, vehicle_params
        self.settings = settings if settings is not None else FieldExpertSettings()
        st = self.settings
        self.fields = FieldCache(grid, wall_penalty(grid, st.wall_penalty, st.preferred_extra_clearance_m),
                                 cache_size=st.field_cache, preferred_extra_clearance_m=st.preferred_extra_clearance_m)
        self.dt = 1.0 / float(vehicle_params.control_rate_hz)
        self.field: CostToGo | None = None
        self.goal: np.ndarray | None = None

    def reset(self, task) -> None:
        """Get (build or reuse) the cost-to-go field of ``task.goal_position`` (map, m)."""
        self.set_goal(task.goal_position)

    def set_goal(self, goal: np.ndarray) -> None:
        """Fly to ``goal`` (3,) map metres from now on."""
        self.field = self.fields.get(goal)
        self.goal = self.field.goal

    def _clearance(self, p: np.ndarray) -> float:
        """Distance to the mesh at ``p`` (m), trilinear over the grid's cell centres."""
        g = self.grid
        f = (p - g.origin_m) / g.resolution_m
        lo = np.clip(np.floor(f).astype(np.int64), 0, np.array(g.shape) - 2)
        t = np.clip(f - lo, 0.0, 1.0)
        c = g.distance_m[lo[0]:lo[0] + 2, lo[1]:lo[1] + 2, lo[2]:lo[2] + 2].astype(np.float64)
        c = c[0] * (1 - t[0]) + c[1] * t[0]
        c = c[0] * (1 - t[1]) + c[1] * t[1]
        return float(c[0] * (1 - t[2]) + c[1] * t[2])

    def _blended_offset(self, p: np.ndarray) -> np.ndarray:
        """Carrot minus ``p`` (3,) m: the carrots of the 8 cell centres around ``p`` (each a
        function of its cell alone), blended with trilinear weights, so the command varies
        continuously with the position instead of jumping at cell borders."""
        g = self.grid
        f = (p - g.origin_m) / g.resolution_m
        lo = np.floor(f).astype(np.int64)
        t = f - lo
        total = np.zeros(3)
        weight = 0.0
        for corner in range(8):
            bits = np.array([(corner >> 0) & 1, (corner >> 1) & 1, (corner >> 2) & 1])
            w = float(np.prod(np.where(bits == 1, t, 1.0 - t)))
            if w <= 1e-12:
                continue
            centre = g.to_world((lo + bits)[None])[0]
            carrot = self.field.lookahead_point(centre, self.settings.lookahead_m)
            total += w * (carrot - centre)
            weight += w
        return total / max(weight, 1e-12)

    def command(self, position: np.ndarray, yaw: float) -> np.ndarray:
        """(1, 4) float32 heading-frame command for a map position (m) and heading yaw (rad)."""
        if self.field is None:
            raise RuntimeError("FieldExpert.act_on_state called before reset(task)")
        st, veh = self.settings, self.vehicle
        p = np.asarray(position, dtype=np.float64).reshape(3)
        if st.blend_cells:
            d = self._blended_offset(p)
        else:
            d = self.field.lookahead_point(p, st.lookahead_m) - p
        carrot = p + d
        dist_c = float(np.linalg.norm(d))
        out = np.zeros((1, 4), np.float32)
        if dist_c < 1e-9:
            return out
        u = d / dist_c
        dxy = math.hypot(d[0], d[1])
        err = wrap_angle(math.atan2(d[1], d[0]) - yaw) if dxy > 1e-9 else 0.0
        r_max = 0.95 * veh.max_yaw_rate_rad_s
        yaw_rate = min(max(st.yaw_gain * err, -r_max), r_max) * min(1.0, dxy / st.yaw_fade_m)
        # speed: cruise, the distance left (via the carrot), the clearance here
        left = dist_c + float(np.linalg.norm(self.goal - carrot))
        c0 = self.grid.clearance_m
        c1 = self.fields.preferred_clearance_m
        ramp = min(max((self._clearance(p) - c0) / max(c1 - c0, 1e-6), 0.0), 1.0)
        cruise = st.cruise_speed_m_s
        near_wall = st.wall_speed_m_s + (cruise - st.wall_speed_m_s) * ramp
        speed = min(cruise, st.goal_gain * left, st.carrot_gain * dist_c, near_wall)
        cmax = math.cos(math.radians(st.max_heading_error_deg))
        heading = min(max((math.cos(err) - cmax) / (1.0 - cmax), 0.0), 1.0)
        vx, vy = speed * heading * u[0], speed * heading * u[1]
        vmax = 0.95 * veh.max_speed_xy_m_s
        sxy = math.hypot(vx, vy)
        if sxy > vmax:
            vx, vy = vx * vmax / sxy, vy * vmax / sxy
        vz = min(max(speed * u[2], -0.95 * veh.max_speed_down_m_s), 0.95 * veh.max_speed_up_m_s)
        psi = yaw + 0.5 * self.dt * yaw_rate
        c, s = math.cos(psi), math.sin(psi)
        out[0] = (c * vx + s * vy, -s * vx + c * vy, vz, yaw_rate)
        return out

    def act_on_state(self, state: np.ndarray) -> np.ndarray:
        """(1, 4) float32 command from a 13-vector state (:class:`~airplay.world.env.AirPlayEnv`'s
        ``obs["state"]``); reads only the position and the quaternion."""
        s = np.asarray(state, dtype=np.float64).reshape(-1)
        if len(s) < 7:
            raise ValueError(f"state must hold position and quaternion (>= 7 values), got {len(s)}")
        return self.command(s[0:3], yaw_of_state(s))
