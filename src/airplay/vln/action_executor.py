"""Discrete action -> 50 Hz ``[vx, vy, vz, yaw_rate]`` commands, through the safety supervisor.

(An executor of VLN actions, the ``executor`` section of config/vln.yaml; the ROS nodes' callback
executor is another thing, :mod:`airplay.nodes.executor`.)

An action (:mod:`airplay.vln.actions`) is a motion relative to the pose where it starts:
MOVE_* a translation in that pose's heading frame (x forward, y left, z up; m), TURN_* a
rotation about map z (rad), STOP nothing (the vehicle hovers). The executor flies it as a
reference trajectory with a trapezoidal speed profile (peak ``cruise_speed_m_s``,
acceleration ``accel_fraction`` of the limits of ``config/vehicle.yaml``; turns at
``yaw_rate_fraction`` of the yaw-rate limit) tracked in closed loop on the measured state:

    v_cmd (map) = v_ref(t) + tau_v a_ref(t) + k_p (p_ref(t) - p)
    yaw_rate    = w_ref(t) + tau_w dw_ref(t) + k_yaw wrap(yaw_ref(t) - yaw)

(tau: the flight model's first-order time constants, config/vehicle.yaml)

rotated into the current heading frame (the command frame of :mod:`airplay.sim.dynamics`
and of a PX4 body-frame velocity setpoint). An action ends once the profile is over and the
pose is within ``position_tolerance_m`` / ``yaw_tolerance_deg`` of its target at rest
(below 0.05 m/s and 0.05 rad/s), or
``settle_timeout_s`` after the profile at the latest. A hold (format failure, STOP) is a
zero command (hover) for ``hold_s``.

Every command passes through :class:`airplay.bridge.supervisor.SafetySupervisor` (speed,
acceleration and yaw-rate limits of the vehicle; the supervisor the MAVLink bridge runs), on
the executor's own clock (one control period per command, i.e. sim time in the sim), so the
commands flown here are the ones a real vehicle would accept. State vectors are the 13-vector
of :class:`airplay.world.env.AirPlayEnv`: position (map, m), quaternion x y z w (base_link in
map), velocity (map, m/s), body rates (rad/s).
"""

from __future__ import annotations

import math

import numpy as np

from airplay.bridge.supervisor import SafetySupervisor
from airplay.bridge.supervisor_config import SupervisorConfig
from airplay.frames import heading_to_map, map_to_heading_xyz, wrap_angle, yaw_of_state
from airplay.sim.dynamics import VehicleParams, load_vehicle_params
from airplay.vln.actions import ActionSpace, ExecutorSettings

HOVER = np.zeros(4, dtype=np.float32)
SETTLED_SPEED_M_S = 0.05
"""An action is settled only below this speed (and below SETTLED_YAW_RATE_RAD_S)."""
SETTLED_YAW_RATE_RAD_S = 0.05


def trapezoid(distance: float, v_max: float, a_max: float) -> tuple[float, float, float]:
    """(duration s, accel time s, peak speed) of a rest-to-rest trapezoidal profile over
    ``distance`` (>= 0) with peak ``v_max`` and acceleration ``a_max`` (triangular if short)."""
    if distance <= 0.0:
        return 0.0, 0.0, 0.0
    t_acc = v_max / a_max
    if a_max * t_acc * t_acc >= distance:  # never reaches v_max
        t_acc = math.sqrt(distance / a_max)
        return 2.0 * t_acc, t_acc, a_max * t_acc
    return t_acc * 2.0 + (distance - a_max * t_acc * t_acc) / v_max, t_acc, v_max


def profile_at(t: float, duration: float, t_acc: float, peak: float) -> tuple[float, float, float]:
    """(distance travelled, speed, acceleration) at time ``t`` of :func:`trapezoid`'s profile."""
    if duration <= 0.0:
        return 0.0, 0.0, 0.0
    a = peak / t_acc if t_acc > 0 else 0.0
    total = peak * (duration - t_acc)
    if t >= duration:
        return total, 0.0, 0.0
    t = max(t, 0.0)
    if t < t_acc:
        return 0.5 * a * t * t, a * t, a
    if t <= duration - t_acc:
        return 0.5 * a * t_acc * t_acc + peak * (t - t_acc), peak, 0.0
    r = duration - t
    return total - 0.5 * a * r * r, a * r, -a


def supervisor_config(vehicle: VehicleParams) -> SupervisorConfig:
    """The supervisor with the vehicle's limits, no heartbeat monitoring (the sim) and no fence."""
    return SupervisorConfig(
        max_speed_xy_m_s=vehicle.max_speed_xy_m_s, max_speed_up_m_s=vehicle.max_speed_up_m_s,
        max_speed_down_m_s=vehicle.max_speed_down_m_s, max_accel_xy_m_s2=vehicle.max_accel_xy_m_s2,
        max_accel_z_m_s2=vehicle.max_accel_z_m_s2, max_yaw_rate_rad_s=vehicle.max_yaw_rate_rad_s,
        control_period_s=vehicle.control_dt_s, heartbeat_timeout_s=None)


class ActionExecutor:
    """Flies one discrete action (or a hover hold) at a time; see the module docstring.

    Use: ``start(action, state)`` or ``hold(seconds, state)``, then ``step(state)`` every
    control period until it returns None (the action is over; the caller starts the next
    one in the same period). ``supervisor``: a SafetySupervisor to pass commands through
    (default: one with the vehicle's limits); ``interventions`` counts its reports.
    """

    def __init__(self, actions: ActionSpace, vehicle: VehicleParams | None = None,
                 settings: ExecutorSettings | None = None, supervisor: SafetySupervisor | None = None) -> None:
        self.actions = actions
        self.vehicle = vehicle or load_vehicle_params()
        self.settings = settings or ExecutorSettings()
        self.supervisor = supervisor or SafetySupervisor(supervisor_config(self.vehicle))
        self.dt = self.vehicle.control_dt_s
        self.reset()

    def reset(self) -> None:
        """New episode: no action, clock at 0, supervisor reset."""
        self.supervisor.reset()
        self.now_s = 0.0
        self.interventions = 0
        self.action: str | None = None
        self._k = 0

    @property
    def busy(self) -> bool:
        return self.action is not None

    def start(self, action: str, state: np.ndarray) -> None:
        """Begin ``action`` from the pose in ``state`` (13-vector)."""
        s = self.settings
        v = self.vehicle
        dx, dy, dz, dyaw = self.actions.delta(action)
        self.action = action
        self._k = 0
        self._p0 = np.asarray(state[0:3], dtype=np.float64).copy()
        self._yaw0 = yaw_of_state(state)
        d_map = heading_to_map(np.array([dx, dy, dz], np.float64), self._yaw0)
        dist = float(np.linalg.norm(d_map))
        self._dir = d_map / dist if dist > 0 else np.zeros(3)
        if dist > 0:
            horizontal = math.hypot(d_map[0], d_map[1]) / dist
            vertical = abs(d_map[2]) / dist
            v_lim = v.max_speed_up_m_s if d_map[2] > 0 else v.max_speed_down_m_s
            peak = min(s.cruise_speed_m_s, v.max_speed_xy_m_s / max(horizontal, 1e-9),
                       v_lim / max(vertical, 1e-9))
            acc = s.accel_fraction * min(v.max_accel_xy_m_s2 / max(horizontal, 1e-9),
                                         v.max_accel_z_m_s2 / max(vertical, 1e-9))
            self._lin = trapezoid(dist, peak, acc)
        else:
            self._lin = (0.0, 0.0, 0.0)
        if dyaw != 0.0:
            w = s.yaw_rate_fraction * v.max_yaw_rate_rad_s
            # yaw acceleration: reach the rate within about two yaw time constants
            self._ang = trapezoid(abs(dyaw), w, w / max(2.0 * v.yaw_rate_time_constant_s, self.dt))
        else:
            self._ang = (0.0, 0.0, 0.0)
        self._dyaw_sign = math.copysign(1.0, dyaw) if dyaw else 0.0
        self._dist = dist
        self._duration = max(self._lin[0], self._ang[0])
        self._hold_steps = 0

    def hold(self, seconds: float, state: np.ndarray) -> None:
        """Hover (zero command) for ``seconds`` (rounded up to whole control periods)."""
        self.action = "HOLD"
        self._k = 0
        self._hold_steps = max(1, int(math.ceil(seconds / self.dt - 1e-9)))

    def _supervise(self, cmd: np.ndarray, state: np.ndarray) -> np.ndarray:
        sup = self.supervisor
        sup.on_state(state[0:3], state[7:10], yaw_of_state(state), self.now_s)
        sup.on_command(cmd, self.now_s, self.now_s)
        out = sup.output(self.now_s)
        self.interventions += len(out.interventions)  # refusals are reported here too
        self.now_s += self.dt
        return HOVER.copy() if out.command is None else np.asarray(out.command, dtype=np.float32)

    def step(self, state: np.ndarray) -> np.ndarray | None:
        """The next command (4,) float32 for the current action, or None when it is over."""
        if self.action is None:
            return None
        state = np.asarray(state, dtype=np.float64)
        k, self._k = self._k, self._k + 1
        if self.action == "HOLD":
            if k >= self._hold_steps:
                self.action = None
                return None
            return self._supervise(np.zeros(4), state)
        s = self.settings
        t = k * self.dt
        pos, yaw = state[0:3], yaw_of_state(state)
        dist_t, speed_t, acc_t = profile_at(t, *self._lin) if self._dist > 0 else (0.0, 0.0, 0.0)
        ang_t, rate_t, yaw_acc_t = profile_at(t, *self._ang)
        p_ref = self._p0 + self._dir * dist_t
        yaw_ref = self._yaw0 + self._dyaw_sign * ang_t
        err_p = p_ref - pos
        err_yaw = wrap_angle(yaw_ref - yaw)
        if t >= self._duration:
            settled = (np.linalg.norm(err_p) <= s.position_tolerance_m
                       and abs(err_yaw) <= math.radians(s.yaw_tolerance_deg)
                       and np.linalg.norm(state[7:10]) <= SETTLED_SPEED_M_S
                       and abs(state[12]) <= SETTLED_YAW_RATE_RAD_S)
            if settled or t >= self._duration + s.settle_timeout_s:
                self.action = None
                return None
        # feed-forward speed plus the first-order lag's share (tau * acceleration), then P on the error
        v = self.vehicle
        v_map = self._dir * (speed_t + v.velocity_time_constant_s * acc_t) + s.position_gain_1_s * err_p
        cmd = np.r_[map_to_heading_xyz(v_map[0], v_map[1], v_map[2], yaw),
                    self._dyaw_sign * (rate_t + v.yaw_rate_time_constant_s * yaw_acc_t) + s.yaw_gain_1_s * err_yaw]
        return self._supervise(cmd, state)
