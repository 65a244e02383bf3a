"""Safety supervisor between the policy and the vehicle (or the simulator).

Pure, deterministic logic: time is passed in explicitly (``now_s``, seconds on the clock
of the caller: sim time in the sim, wall time on the vehicle; command stamps must be on the
same clock). No threads, no clocks, no ROS or MAVLink here (DESIGN.md sections 1 and 8).

Commands are airplay velocity commands ``[vx, vy, vz, yaw_rate]``: vx forward and vy left
in the heading frame (base_link FLU rotated by yaw only), vz up, m/s; yaw_rate rad/s
counter-clockwise (see :mod:`airplay.sim.dynamics`). Vehicle state is in map ENU.

Use: feed ``on_command`` (policy), ``on_state`` (odometry), ``on_heartbeat`` (autopilot),
``operator_stop`` (e-stop), and call ``output(now_s)`` once per control period; send
``output.command`` (None: send nothing). Priority of the rules in ``output``:

1. autopilot heartbeat (if monitored): none yet -> WAITING_FOR_HEARTBEAT, lost for longer
   than ``heartbeat_timeout_s`` -> STOPPED_NO_HEARTBEAT; both output None. Sending resumes
   when heartbeats return (re-entering OFFBOARD/GUIDED is the bridge's decision).
2. operator stop or geofence land (latched until :meth:`SafetySupervisor.reset`) ->
   LANDING: ``[0, 0, -landing_speed_m_s, 0]``.
3. geofence: position outside -> HOLD; still outside after ``geofence_hold_s`` -> land
   (latched). Position inside but the vehicle cannot stop before the fence any more ->
   HOLD: for some fence part (polygon edge, ceiling ``fence_z_max_m``, floor
   ``fence_z_min_m``) at distance d with measured approach speed s > 0 (the velocity's
   component towards the part's nearest point), ``s * fence_response_s + s^2 / (2 a_max) > d``
   with a_max the autopilot's own limit (``max_accel_xy_m_s2`` for edges,
   ``max_accel_z_m_s2`` for ceiling and floor): the hardest braking the autopilot does
   would still cross the fence (e.g. a gust pushed the vehicle). With a fence but no state
   yet -> HOLD (the fence cannot be checked).
4. stale command (none yet, or the newest is older than ``command_timeout_s`` by its stamp)
   -> HOLD until fresh commands return.
5. FLYING: the newest accepted command, speed-clamped (direction preserved), yaw-rate
   clamped, acceleration limited against the previous output (unless ``limit_command_accel`` is
   false: the autopilot limits its own acceleration, as airplay's flight model does, and a policy
   trained there flies its commands unfiltered), then the fence (last, so the
   result never points out of the fence nor approaches it faster than it can stop):
   a. within ``fence_margin_m`` of a fence part, its outward component removed
      (GEOFENCE_OUTWARD_REMOVED);
   b. braking envelope (GEOFENCE_BRAKE): for every fence part, the commanded velocity
      towards it (component along the part's outward direction, see
      :class:`airplay.bridge.geofence.FencePart`) is capped at
      ``sqrt(2 * fence_brake_accel_m_s2 * max(0, d - fence_margin_m - s * fence_response_s))``
      with d and s as in rule 3: the vehicle, which keeps its approach speed s for
      ``fence_response_s`` (autopilot lag) and then decelerates at ``fence_brake_accel_m_s2``,
      stops ``fence_margin_m`` before the fence. For a vehicle whose velocity follows the
      command as a first-order lag of time constant tau (plus latency) <= ``fence_response_s``
      this is exact: it travels tau * s beyond the commanded profile, whose own stopping
      distance is cap^2 / (2 a). The cap is met for all parts together (iterated
      projection, then a uniform scale-down of the velocity if needed); yaw rate untouched.

The fence's stand-off is ``fence_margin_m``, grown with the autopilot's reported horizontal
uncertainty (:meth:`SafetySupervisor.on_estimate_uncertainty`: ``max(fence_margin_m,
fence_margin_per_eph * eph)``) in rules 5a, 5b and the hold point below.

HOLD: ``command`` is the zero-velocity hover (simulators use it), and
``hold_position_enu``/``hold_yaw_rad`` the pose latched when the HOLD episode began (the
first HOLD output with a known position): the vehicle's position and yaw, except that
when the vehicle is then outside the fence or predicted to cross it (rule 3) the position
is moved to the nearest point at least ``fence_margin_m`` inside the fence
(:meth:`airplay.bridge.geofence.Geofence.inset`). A bridge sends that as a position
setpoint (a zero-velocity command lets the vehicle drift). The latch is kept while HOLD
lasts and cleared when it ends; other modes give None.

Safety outputs (hold, land) are not acceleration-limited: the autopilot smooths them. Each
kind of intervention is reported once per episode of violation (when it starts); it is
reported again only after the violation has ended. A limit counts as exceeded, and the
command is modified, only by more than ``CHANGE_TOLERANCE`` (1e-6 m/s or rad/s), so a
modification report (CLAMPED_*, GEOFENCE_OUTWARD_REMOVED, GEOFENCE_BRAKE) never has
``command_in`` equal to ``command_out``; a mode report (holds, land) may (a policy that
asked for zero velocity). Interventions go to the logger ``airplay.supervisor`` and are
returned by ``output`` (refusals in ``on_command`` too).

The parts: :mod:`airplay.bridge.supervisor_config` (the limits), :mod:`airplay.bridge.interventions`
(modes, interventions, the output), :mod:`airplay.bridge.fence_guard` (rules 3, 5a and 5b on a
command), :mod:`airplay.bridge.geofence` (the fence's geometry); this module holds the rules' order,
the latches and the reporting.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from airplay import frames
from airplay.bridge.fence_guard import FenceGuard
from airplay.bridge.geofence import Geofence
from airplay.bridge.interventions import (CHANGE_TOLERANCE, Intervention, InterventionKind, Mode, SupervisorOutput,
                                          format_vector as _fmt)
from airplay.bridge.supervisor_config import SupervisorConfig

log = logging.getLogger("airplay.supervisor")


class SafetySupervisor:
    """See the module docstring. Deterministic: the same calls give the same outputs."""

    def __init__(self, config: SupervisorConfig | None = None) -> None:
        self.config = config if config is not None else SupervisorConfig()
        cfg = self.config
        self.fence = Geofence(cfg.fence_vertices_ccw(), cfg.fence_z_min_m, cfg.fence_z_max_m) if cfg.has_fence else None
        self._fence_guard = FenceGuard(self.fence, cfg) if self.fence is not None else None
        self.fence_margin_m = cfg.fence_margin_m   # the stand-off now, m (grows with the estimate's eph)
        self._logged_margin_m = cfg.fence_margin_m
        self._last_heartbeat_s: float | None = None
        self._position_enu: np.ndarray | None = None
        self._velocity_enu: np.ndarray | None = None
        self._yaw_rad = 0.0
        self.reset()

    # ----------------------------------------------------------------- episode
    def reset(self) -> None:
        """New episode: clear commands, latches (operator stop, geofence land), the
        acceleration baseline and the once-per-episode reporting. Heartbeat and vehicle
        state are facts about the link and vehicle and are kept."""
        self._command: np.ndarray | None = None
        self._command_stamp_s: float | None = None
        self._previous_output: np.ndarray | None = None
        self._previous_output_s: float | None = None
        self._operator_stop = False
        self._geofence_land = False
        self._outside_since_s: float | None = None
        self._active: set[InterventionKind] = set()      # violations in progress at the last output
        self._refusing: set[InterventionKind] = set()    # refusals since the last accepted command
        self._pending: list[Intervention] = []
        self._mode: Mode | None = None
        self._hold_position: np.ndarray | None = None   # latched HOLD pose (map ENU m, rad)
        self._hold_yaw: float | None = None
        self._fence_exit = False                          # at this output: outside or predicted to cross
        log.info("supervisor reset")

    @property
    def mode(self) -> Mode | None:
        """Mode of the last output (None before the first)."""
        return self._mode

    @property
    def holding_at_fence(self) -> bool:
        """The last output holds because of the geofence (outside it, predicted to cross it, or no
        position to check it against), not for a stale command."""
        return self._mode is Mode.HOLD and (self._fence_exit or (self.fence is not None
                                                                 and self._position_enu is None))

    # ----------------------------------------------------------------- inputs
    def on_command(self, cmd, stamp_s: float, now_s: float) -> Intervention | None:
        """Record a policy command (4,) ``[vx, vy, vz m/s, yaw_rate rad/s]`` stamped ``stamp_s``.

        Returns None if accepted, else the refusal (also reported by the next ``output``, once
        per run of consecutive refusals of a kind); a refused command leaves the previous
        accepted one in force (until it goes stale).
        """
        try:
            arr = np.asarray(cmd, dtype=np.float64)
        except (TypeError, ValueError):
            arr = None
        if arr is None or arr.shape != (4,):
            shape = "not numeric" if arr is None else f"shape {arr.shape}"
            return self._refuse(InterventionKind.REFUSED_MALFORMED, now_s, None,
                                f"command must be 4 numbers [vx, vy, vz, yaw_rate], got {shape}")
        if not np.all(np.isfinite(arr)):
            return self._refuse(InterventionKind.REFUSED_NON_FINITE, now_s, arr,
                                f"non-finite command {_fmt(arr)}; keeping the previous safe command")
        if not (isinstance(stamp_s, (int, float)) and math.isfinite(stamp_s)):
            return self._refuse(InterventionKind.REFUSED_MALFORMED, now_s, arr, f"non-finite stamp {stamp_s!r}")
        if stamp_s > now_s + self.config.future_stamp_tolerance_s:
            return self._refuse(InterventionKind.REFUSED_MALFORMED, now_s, arr,
                                f"stamp {stamp_s:.3f} s is {stamp_s - now_s:.3f} s in the future (more than "
                                f"{self.config.future_stamp_tolerance_s:.2f} s: a clock ahead of the bridge's)")
        stamp_s = min(float(stamp_s), float(now_s))  # a little ahead (clock skew): taken as now
        if self._command_stamp_s is not None and stamp_s < self._command_stamp_s:
            return self._refuse(InterventionKind.REFUSED_OUT_OF_ORDER, now_s, arr,
                                f"stamp {stamp_s:.3f} s older than the newest command ({self._command_stamp_s:.3f} s)")
        self._command, self._command_stamp_s = arr.copy(), float(stamp_s)
        self._refusing.clear()
        return None

    def on_state(self, position_enu, velocity_enu, yaw_rad: float, now_s: float) -> None:
        """Vehicle state: position (3,) m and velocity (3,) m/s in map ENU, yaw rad CCW from east."""
        p = np.asarray(position_enu, dtype=np.float64).reshape(3)
        v = np.asarray(velocity_enu, dtype=np.float64).reshape(3)
        if not (np.all(np.isfinite(p)) and np.all(np.isfinite(v)) and math.isfinite(yaw_rad)):
            log.warning("ignoring non-finite vehicle state at %.3f s: p=%s v=%s yaw=%s", now_s, p, v, yaw_rad)
            return
        self._position_enu, self._velocity_enu, self._yaw_rad = p, v, float(yaw_rad)

    def on_estimate_uncertainty(self, eph_m: float | None) -> float:
        """The autopilot's horizontal uncertainty (m, 1 sigma; None: not reported): the fence
        margin becomes ``max(fence_margin_m, fence_margin_per_eph * eph_m)``. Returns the margin (m)."""
        cfg = self.config
        margin = cfg.fence_margin_m
        if eph_m is not None and math.isfinite(eph_m) and eph_m > 0:
            margin = max(margin, cfg.fence_margin_per_eph * float(eph_m))
        if abs(margin - self._logged_margin_m) >= 0.05:  # logged where it moved by 5 cm or more
            log.info("fence margin %.2f m (eph %s)", margin, "-" if eph_m is None else f"{eph_m:.2f} m")
            self._logged_margin_m = margin
        self.fence_margin_m = margin
        if self._fence_guard is not None:
            self._fence_guard.margin_m = margin
        return margin

    def on_heartbeat(self, now_s: float) -> None:
        """An autopilot HEARTBEAT arrived at ``now_s``."""
        self._last_heartbeat_s = float(now_s)

    def operator_stop(self, now_s: float, reason: str = "operator stop") -> Intervention:
        """Land now, latched until :meth:`reset`."""
        intervention = Intervention(now_s, InterventionKind.OPERATOR_STOP_LAND,
                                    f"{reason}: landing at {self.config.landing_speed_m_s:.2f} m/s until reset",
                                    self._command, self._land_command())
        if not self._operator_stop:
            self._operator_stop = True
            self._report(intervention)
        return intervention

    # ----------------------------------------------------------------- output
    def output(self, now_s: float) -> SupervisorOutput:
        """The command to send at ``now_s`` (None: send nothing), the mode, new interventions."""
        violated: set[InterventionKind] = set()
        command, mode = self._decide(now_s, violated)
        self._active = violated
        if command is None:
            self._previous_output, self._previous_output_s = None, None
        else:
            self._previous_output, self._previous_output_s = command.copy(), float(now_s)
        if mode is Mode.HOLD:
            if self._hold_position is None and self._position_enu is not None:
                self._latch_hold()
        else:
            self._hold_position, self._hold_yaw = None, None
        if mode != self._mode:
            log.info("mode %s -> %s at %.3f s", None if self._mode is None else self._mode.name, mode.name, now_s)
            self._mode = mode
        out, self._pending = tuple(self._pending), []
        return SupervisorOutput(None if command is None else command.copy(), mode, out,
                                None if self._hold_position is None else self._hold_position.copy(), self._hold_yaw)

    def _latch_hold(self) -> None:
        """Latch the HOLD pose: the vehicle's position and yaw; when it is outside the fence or
        predicted to cross it, the nearest point at least ``fence_margin_m`` inside instead."""
        p = self._position_enu.copy()
        if self.fence is not None and self._fence_exit:
            p = self.fence.inset(p, self.fence_margin_m)
        self._hold_position, self._hold_yaw = p, self._yaw_rad
        log.info("hold at %s m, yaw %.3f rad", _fmt(p), self._yaw_rad)

    def _decide(self, now_s: float, violated: set) -> tuple[np.ndarray | None, Mode]:
        cfg = self.config
        K = InterventionKind
        self._fence_exit = False
        if cfg.heartbeat_timeout_s is not None:
            if self._last_heartbeat_s is None:
                return None, Mode.WAITING_FOR_HEARTBEAT
            age_s = now_s - self._last_heartbeat_s
            if age_s > cfg.heartbeat_timeout_s:
                self._flag(violated, K.HEARTBEAT_LOST, now_s,
                           f"no autopilot heartbeat for {age_s:.2f} s (> {cfg.heartbeat_timeout_s:.2f} s); "
                           "stopped sending", self._command, None)
                return None, Mode.STOPPED_NO_HEARTBEAT
            if K.HEARTBEAT_LOST in self._active:
                log.info("autopilot heartbeat back at %.3f s", now_s)
        if self._operator_stop or self._geofence_land:
            return self._land_command(), Mode.LANDING

        hold = np.zeros(4)
        if self.fence is not None:
            if self._position_enu is None:
                self._flag(violated, K.GEOFENCE_HOLD, now_s, "no vehicle position yet: fence cannot be checked",
                           self._command, hold)
                return hold, Mode.HOLD
            p, v = self._position_enu, self._velocity_enu
            if not self.fence.contains(p):
                self._fence_exit = True
                if self._outside_since_s is None:
                    self._outside_since_s = float(now_s)
                outside_s = now_s - self._outside_since_s
                if outside_s >= cfg.geofence_hold_s:
                    self._geofence_land = True
                    land = self._land_command()
                    self._flag(violated, K.GEOFENCE_LAND, now_s,
                               f"outside the geofence at {_fmt(p)} m for {outside_s:.2f} s "
                               f"(>= {cfg.geofence_hold_s:.2f} s): landing", self._command, land)
                    return land, Mode.LANDING
                self._flag(violated, K.GEOFENCE_HOLD, now_s,
                           f"outside the geofence at {_fmt(p)} m: holding, landing after "
                           f"{cfg.geofence_hold_s:.2f} s", self._command, hold)
                return hold, Mode.HOLD
            self._outside_since_s = None
            crossing = self._fence_guard.predicted_crossing(p, v)
            if crossing is not None:
                self._fence_exit = True
                self._flag(violated, K.GEOFENCE_HOLD, now_s,
                           f"at {_fmt(p)} m with velocity {_fmt(v)} m/s, predicted to cross the geofence: "
                           + crossing + ": holding", self._command, hold)
                return hold, Mode.HOLD

        if self._command is None:
            self._flag(violated, K.STALE_COMMAND_HOLD, now_s, "no policy command received yet: hovering", None, hold)
            return hold, Mode.HOLD
        age_s = now_s - self._command_stamp_s
        if age_s > cfg.command_timeout_s:
            self._flag(violated, K.STALE_COMMAND_HOLD, now_s,
                       f"newest command is {age_s:.3f} s old (> {cfg.command_timeout_s:.3f} s): hovering",
                       self._command, hold)
            return hold, Mode.HOLD
        if K.STALE_COMMAND_HOLD in self._active:
            log.info("fresh commands again at %.3f s", now_s)
        return self._limit(self._command, now_s, violated), Mode.FLYING

    def _limit(self, cmd_in: np.ndarray, now_s: float, violated: set) -> np.ndarray:
        cfg = self.config
        K = InterventionKind
        cmd = cmd_in.copy()
        # speed: horizontal norm (direction kept), up and down separately
        speed_xy = float(np.hypot(cmd[0], cmd[1]))
        notes = []
        if speed_xy > cfg.max_speed_xy_m_s + CHANGE_TOLERANCE:
            cmd[:2] *= cfg.max_speed_xy_m_s / speed_xy
            notes.append(f"horizontal {speed_xy:.2f} -> {cfg.max_speed_xy_m_s:.2f} m/s")
        if cmd[2] > cfg.max_speed_up_m_s + CHANGE_TOLERANCE:
            notes.append(f"up {cmd[2]:.2f} -> {cfg.max_speed_up_m_s:.2f} m/s")
            cmd[2] = cfg.max_speed_up_m_s
        elif cmd[2] < -cfg.max_speed_down_m_s - CHANGE_TOLERANCE:
            notes.append(f"down {-cmd[2]:.2f} -> {cfg.max_speed_down_m_s:.2f} m/s")
            cmd[2] = -cfg.max_speed_down_m_s
        if notes:
            self._flag(violated, K.CLAMPED_SPEED, now_s, "speed clamped: " + ", ".join(notes), cmd_in, cmd)
        if abs(cmd[3]) > cfg.max_yaw_rate_rad_s + CHANGE_TOLERANCE:
            cmd[3] = math.copysign(cfg.max_yaw_rate_rad_s, cmd[3])
            self._flag(violated, K.CLAMPED_YAW_RATE, now_s,
                       f"yaw rate clamped: {cmd_in[3]:.3f} -> {cmd[3]:.3f} rad/s", cmd_in, cmd)
        # acceleration: change from the previous output over the elapsed time (where the supervisor limits it)
        if not cfg.limit_command_accel:
            pass
        elif self._previous_output is not None:
            base, dt_s = self._previous_output, max(0.0, now_s - self._previous_output_s)
        else:
            base, dt_s = self._baseline(), cfg.control_period_s
        before = cmd.copy()
        if cfg.limit_command_accel:
            d_xy = cmd[:2] - base[:2]
            max_d_xy = cfg.max_accel_xy_m_s2 * dt_s
            norm_d_xy = float(np.hypot(*d_xy))
            if norm_d_xy > max_d_xy + CHANGE_TOLERANCE:
                cmd[:2] = base[:2] + d_xy * (max_d_xy / norm_d_xy)
            max_d_z = cfg.max_accel_z_m_s2 * dt_s
            if abs(cmd[2] - base[2]) > max_d_z + CHANGE_TOLERANCE:
                cmd[2] = base[2] + math.copysign(max_d_z, cmd[2] - base[2])
        if not np.array_equal(before, cmd):
            self._flag(violated, K.CLAMPED_ACCEL, now_s,
                       f"acceleration limited over {dt_s:.3f} s: {_fmt(before[:3])} -> {_fmt(cmd[:3])} m/s "
                       f"(max {cfg.max_accel_xy_m_s2:.2f} m/s^2 xy, {cfg.max_accel_z_m_s2:.2f} m/s^2 z)", cmd_in, cmd)
        # fence (last: never point outwards): outward component near the boundary, then braking
        if self._fence_guard is not None:
            before = cmd.copy()
            cmd, removed = self._fence_guard.remove_outward(cmd, self._position_enu, self._yaw_rad)
            if removed:
                self._flag(violated, K.GEOFENCE_OUTWARD_REMOVED, now_s,
                           "at the geofence, outward velocity removed: " + "; ".join(removed[:4])
                           + f" ({_fmt(before)} -> {_fmt(cmd)})", cmd_in, cmd)
            cmd, why = self._fence_guard.brake(cmd, self._position_enu, self._velocity_enu, self._yaw_rad)
            if why is not None:
                self._flag(violated, K.GEOFENCE_BRAKE, now_s, why, cmd_in, cmd)
        return cmd

    def _baseline(self) -> np.ndarray:
        """Acceleration baseline when nothing was sent before: the measured velocity in the
        heading frame if known, else rest."""
        if self._velocity_enu is None:
            return np.zeros(4)
        return np.r_[frames.map_to_heading(self._velocity_enu, self._yaw_rad), 0.0]

    def _land_command(self) -> np.ndarray:
        return np.array([0.0, 0.0, -self.config.landing_speed_m_s, 0.0])

    # ----------------------------------------------------------------- reporting
    def _flag(self, violated: set, kind: InterventionKind, now_s: float, reason: str,
              command_in, command_out) -> None:
        """Mark ``kind`` violated at this output; report it if its episode starts now."""
        violated.add(kind)
        if kind not in self._active:
            self._report(Intervention(float(now_s), kind, reason,
                                      None if command_in is None else np.array(command_in, dtype=np.float64),
                                      None if command_out is None else np.array(command_out, dtype=np.float64)))

    def _refuse(self, kind: InterventionKind, now_s: float, cmd, reason: str) -> Intervention:
        intervention = Intervention(float(now_s), kind, reason, None if cmd is None else cmd.copy(),
                                    None if self._command is None else self._command.copy())
        if kind in self._refusing:
            log.debug("%s", intervention)
        else:
            self._refusing.add(kind)
            self._report(intervention)
        return intervention

    def _report(self, intervention: Intervention) -> None:
        log.warning("%s", intervention)
        self._pending.append(intervention)
