"""The flight's mission: the map tied at the task's start, the hand-over at the start pose, the end.

A mixin of :class:`~airplay.bridge.flight.FlightController` (it uses the controller's
autopilot, config, supervisor, phase, lock and callbacks), active when the controller was given
a :class:`~airplay.bridge.mission.MissionJudge` (the fly graph with ``scene:=`` and ``index:=``):

- **tie** (``map_tie`` "task_start"): once the pre-arm checks pass, the vehicle's estimated pose
  on the ground becomes the task's start on the ground, facing the start heading
  (:meth:`airplay.bridge.map_tie.MapTie.at_pose`); everything after (odom, setpoints, the
  fences) is in that map frame.
- **positioning**: after the take-off, under offboard control, the bridge flies to the task's
  start pose (PX4 ends its take-off up to ``NAV_MC_ALT_RAD`` short of its target, and faces where
  it booted) by velocity commands of a proportional law (:func:`approach_command`), fed through
  the safety supervisor as a policy's would be: the policy's own velocity commands then follow
  without a change of setpoint type (PX4 SIH sagged 0.3 m when position setpoints gave way to
  velocity ones at the hand-over, out of the height band the tasks start 0.1 m above), until the
  estimate has stayed within
  ``positioning_tolerance_m`` and ``positioning_yaw_tolerance_rad`` of it, slower than
  ``positioning_speed_m_s``, for ``positioning_settle_s``; only then does the policy fly
  (``flying``), as from the simulator's first step.
- **end**: every control period the judge applies the task's rules
  (:mod:`airplay.bridge.mission`); at an ending the bridge stops flying the policy: it holds
  (a position setpoint) for ``end_hold_s`` where the ending came, or at a success at the goal
  itself where the straight line there is clear of the scene (the mission's goal is where the
  vehicle should land), then lands (``end_action`` "land") or keeps holding ("hold": the operator
  lands); a collision lands at once. The
  policy's stop ends the same way (``success`` within the radius, else ``stopped``).

Positions map ENU metres, yaws rad CCW, times seconds on the controller's clock.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np

from airplay import frames
from airplay.bridge.flight_config import FlightFailure, Phase
from airplay.bridge.interventions import Mode
from airplay.bridge.map_tie import MapTie

log = logging.getLogger("airplay.bridge")


APPROACH_GAIN_PER_S = 1.0
"""Proportional gain of the approach to the start pose: m/s of velocity per m of error."""
APPROACH_YAW_GAIN_PER_S = 1.5
"""rad/s of yaw rate per rad of heading error."""
APPROACH_SPEED_M_S = 0.6
"""Largest approach speed, m/s (horizontal and vertical)."""


def approach_command(state, target, target_yaw: float, limits) -> np.ndarray:
    """The heading-frame command ``[vx, vy, vz m/s, yaw_rate rad/s]`` that brings the vehicle at
    ``state`` (13-vector, map ENU) to ``target`` (map m) facing ``target_yaw`` (rad): velocity
    :data:`APPROACH_GAIN_PER_S` x the error, at most :data:`APPROACH_SPEED_M_S` (and the
    supervisor's ``limits``), yaw rate :data:`APPROACH_YAW_GAIN_PER_S` x the heading error."""
    p = np.asarray(state[0:3], np.float64)
    v = APPROACH_GAIN_PER_S * (np.asarray(target, np.float64) - p)
    cap_xy = min(APPROACH_SPEED_M_S, limits.max_speed_xy_m_s)
    speed_xy = float(np.hypot(v[0], v[1]))
    if speed_xy > cap_xy:
        v[0:2] *= cap_xy / speed_xy
    v[2] = float(np.clip(v[2], -min(APPROACH_SPEED_M_S, limits.max_speed_down_m_s),
                         min(APPROACH_SPEED_M_S, limits.max_speed_up_m_s)))
    yaw = frames.yaw_of_state(state)
    yaw_rate = float(np.clip(APPROACH_YAW_GAIN_PER_S * frames.wrap_angle(target_yaw - yaw),
                             -limits.max_yaw_rate_rad_s, limits.max_yaw_rate_rad_s))
    return np.r_[frames.map_to_heading(v, yaw), yaw_rate]


class MissionControl:
    """Tie, positioning and end of a :class:`~airplay.bridge.flight.FlightController`'s mission."""

    judge = None            # airplay.bridge.mission.MissionJudge, or None: no mission
    _goto = None            # (position map m, yaw rad): a position setpoint that replaces the policy's command
    _end_hold_until = None  # clock s: the end's hold lasts until then
    _mission_flying = False

    @property
    def mission(self):
        return None if self.judge is None else self.judge.mission

    # -- the tie -----------------------------------------------------------------------------
    def _tie_at_start(self) -> None:
        """``map_tie`` task_start: the vehicle's estimated pose now is the task's start on the ground."""
        if self.mission is None or self.config.map_tie != "task_start":
            return
        local = self.autopilot.telemetry.local_state()
        if local is None:
            raise FlightFailure("map_tie task_start: no position estimate to tie the map to")
        m = self.mission
        tie = MapTie.at_pose(local[0:3], frames.yaw_of_state(local), m.start_on_ground, m.start_yaw)
        self.autopilot.telemetry.tie = tie
        log.info("map tied to the task's start: the vehicle at local ENU (%.2f, %.2f, %.2f) m, yaw %.1f deg is map "
                 "(%.2f, %.2f, %.2f) m, yaw %.1f deg (map = Rz(%.1f deg) local + (%.2f, %.2f, %.2f))",
                 *local[0:3], math.degrees(frames.yaw_of_state(local)), *m.start_on_ground, math.degrees(m.start_yaw),
                 math.degrees(tie.yaw_rad), *tie.origin_enu)
        self.on_tie(tie)

    # -- positioning ---------------------------------------------------------------------------
    def _position_at_start(self) -> None:
        """``positioning``: fly to the task's start pose (:func:`approach_command` through the
        supervisor) and settle there; FlightFailure after ``positioning_timeout_s``."""
        m, cfg = self.mission, self.config
        if m is None or self.judge.started_s is not None:
            return  # no mission, or a flight resumed after a link loss: the policy flies on
        self._set_phase(Phase.POSITIONING)
        target = np.asarray(m.start_position, np.float64)
        deadline = time.monotonic() + cfg.positioning_timeout_s
        settled_since = None
        while True:
            self._check_going("the positioning at the task's start")
            if self._landing_requested or self.phase != Phase.POSITIONING:
                return
            state = self.autopilot.telemetry.state()
            if state is not None:
                self.on_command(approach_command(state, target, m.start_yaw, self.supervisor.config), self.clock())
                error_m = float(np.linalg.norm(state[0:3] - target))
                error_xy, error_z = float(np.hypot(*(state[0:2] - target[0:2]))), abs(float(state[2] - target[2]))
                yaw_error = abs(float(frames.wrap_angle(frames.yaw_of_state(state) - m.start_yaw)))
                speed = float(np.linalg.norm(state[7:10]))
                if (error_xy <= cfg.positioning_tolerance_m and error_z <= cfg.positioning_z_tolerance_m
                        and yaw_error <= cfg.positioning_yaw_tolerance_rad and speed <= cfg.positioning_speed_m_s):
                    settled_since = settled_since or time.monotonic()
                    if time.monotonic() - settled_since >= cfg.positioning_settle_s:
                        log.info("at the task's start pose: %.2f m and %.1f deg off, %.2f m/s: the policy flies",
                                 error_m, math.degrees(yaw_error), speed)
                        return
                else:
                    settled_since = None
            if time.monotonic() >= deadline:
                where = "no estimate" if state is None else (
                    f"{error_m:.2f} m and {math.degrees(yaw_error):.1f} deg off at {speed:.2f} m/s")
                raise FlightFailure(f"the vehicle did not settle at the task's start pose within "
                                    f"{cfg.positioning_timeout_s:.0f} s (positioning_timeout_s; {where})")
            self._sleep(0.02)

    def _start_mission(self, now: float) -> None:
        """The policy takes over: the mission's clock starts, the setpoints are the policy's (the
        supervisor is not reset: a geofence hold or landing under way goes on)."""
        with self._lock:
            self._goto = None
        if self.judge is not None and self.judge.started_s is None:
            self.judge.start(now)
            self._mission_flying = True
            log.info("mission %s: the policy flies (time limit %.1f s, success radius %.2f m)", self.mission.task_id,
                     self.mission.time_limit_s, self.mission.success_radius_m)

    def _goto_setpoint(self, out):
        """The position setpoint that replaces the supervisor's output this period (positioning, the
        end's hold), or None. The supervisor's own safety outputs win: landing, and a hold at the fence."""
        goto = self._goto
        if goto is None or out.command is None or out.mode is Mode.LANDING:
            return None
        if out.mode is Mode.HOLD and self.supervisor.holding_at_fence:
            return None
        return goto

    # -- the end -------------------------------------------------------------------------------
    def _judge_mission(self, now: float, state) -> None:
        """Once per control period while ``flying``: the end rules, and the end's hold running out."""
        judge = self.judge
        if judge is None or self.phase != Phase.FLYING:
            return
        with self._lock:  # the policy's stop comes on another thread
            if judge.ending is None and self._mission_flying and state is not None:
                ending = judge.update(state[0:3], now)
                if ending is not None:
                    self._end_mission(ending, state)
        if self._end_hold_until is not None and now >= self._end_hold_until:
            self._end_hold_until = None
            ending = judge.ending
            if self.config.end_action == "land":
                self.land(f"mission ended: {ending.status} ({ending.reason})")
            else:
                log.info("mission ended: %s; end_action hold: holding until the operator lands", ending.status)

    def _end_mission(self, ending, state) -> None:
        log.info("mission %s ended: %s (%s) after %.1f s, %.2f m from the goal at (%.2f, %.2f, %.2f)",
                 self.mission.task_id, ending.status, ending.reason, ending.flown_s, ending.goal_distance_m,
                 *ending.position)
        self._mission_flying = False
        self.on_mission_end(ending)
        if ending.land_at_once:
            with self._lock:
                self._goto = None
            self.land(f"mission ended: {ending.status} ({ending.reason})")
            return
        yaw = frames.yaw_of_state(state) if state is not None else self.mission.start_yaw
        hold = np.asarray(ending.position, np.float64)
        if ending.status == "success" and self._clear_to_goal(hold):
            hold = np.asarray(self.mission.goal_position, np.float64)
            log.info("holding at the goal (%.2f m away, the straight line there clear of the scene)",
                     ending.goal_distance_m)
        with self._lock:
            self._goto = (hold, float(yaw))
            self._end_hold_until = self.clock() + self.config.end_hold_s

    def _clear_to_goal(self, position) -> bool:
        """The straight line from ``position`` to the goal keeps the vehicle's sphere out of the scene
        (sampled every 5 cm; True without a collision model only where the two are within 0.05 m)."""
        goal = np.asarray(self.mission.goal_position, np.float64)
        length = float(np.linalg.norm(goal - position))
        checker = self.judge.checker
        if checker is None:
            return length <= 0.05
        points = position + np.linspace(0.0, 1.0, max(2, int(length / 0.05) + 2))[:, None] * (goal - position)
        return bool(np.all(checker.clearance(points) >= 0.0))

    def policy_stop(self, reason: str) -> None:
        """The policy ended its episode (its STOP, its step budget): with a mission, end it
        (``success`` within the radius, else ``stopped``: hold, then land); without, land."""
        with self._lock:
            if self.judge is not None and self.judge.ending is not None:
                log.info("the policy's stop (%s) after the mission's end (%s): the end goes on", reason,
                         self.judge.ending.status)
                return
            if self.judge is None or not self._mission_flying or self.phase != Phase.FLYING:
                if self.phase in (Phase.FLYING, Phase.POSITIONING):
                    self.land(reason)
                return
            state = self.autopilot.telemetry.state()
            if state is None:
                self.land(reason)
                return
            self._end_mission(self.judge.policy_stop(state[0:3], self.clock(), reason), state)
