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
   clamped, acceleration limited against the previous output, then the fence (last, so the
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
"""

from __future__ import annotations

import enum
import logging
import math
from dataclasses import dataclass

import numpy as np

from airplay import frames
from airplay.bridge.geofence import Geofence, signed_area

log = logging.getLogger("airplay.supervisor")

CHANGE_TOLERANCE = 1e-6
"""m/s (rad/s for yaw rate): a limit is enforced, and reported, only when exceeded by more than this."""


class Mode(enum.Enum):
    WAITING_FOR_HEARTBEAT = "waiting_for_heartbeat"
    FLYING = "flying"
    HOLD = "hold"
    LANDING = "landing"
    STOPPED_NO_HEARTBEAT = "stopped_no_heartbeat"


class InterventionKind(enum.Enum):
    CLAMPED_SPEED = "clamped_speed"
    CLAMPED_ACCEL = "clamped_accel"
    CLAMPED_YAW_RATE = "clamped_yaw_rate"
    REFUSED_NON_FINITE = "refused_non_finite"
    REFUSED_MALFORMED = "refused_malformed"
    REFUSED_OUT_OF_ORDER = "refused_out_of_order"
    STALE_COMMAND_HOLD = "stale_command_hold"
    GEOFENCE_HOLD = "geofence_hold"
    GEOFENCE_OUTWARD_REMOVED = "geofence_outward_removed"
    GEOFENCE_BRAKE = "geofence_brake"
    GEOFENCE_LAND = "geofence_land"
    OPERATOR_STOP_LAND = "operator_stop_land"
    HEARTBEAT_LOST = "heartbeat_lost"
    AUTOPILOT_TOOK_OVER = "autopilot_took_over"


@dataclass(frozen=True)
class Intervention:
    """One refusal or modification. ``command_in``/``command_out``: (4,) heading-frame commands
    (m/s, rad/s) or None where there was none (e.g. a malformed input, or nothing sent)."""

    time_s: float
    kind: InterventionKind
    reason: str
    command_in: np.ndarray | None = None
    command_out: np.ndarray | None = None

    def to_dict(self) -> dict:
        """JSON-ready form (for publishing on a std_msgs/String topic)."""
        def as_list(c):
            return None if c is None else [float(x) for x in c]

        return {"time_s": self.time_s, "kind": self.kind.value, "reason": self.reason,
                "command_in": as_list(self.command_in), "command_out": as_list(self.command_out)}

    def __str__(self) -> str:
        return f"[{self.time_s:.3f} s] {self.kind.name}: {self.reason}"


@dataclass(frozen=True)
class SupervisorOutput:
    """What to send now: ``command`` (4,) heading-frame [vx, vy, vz m/s, yaw_rate rad/s] or None
    (send nothing), the ``mode``, and the interventions reported since the last output.

    In HOLD with a known vehicle position: ``hold_position_enu`` (3,) map ENU metres and
    ``hold_yaw_rad`` (map ENU yaw, rad, counter-clockwise from east), the pose latched when
    this HOLD began (see the module docstring), for a position setpoint; ``command`` is then
    still the zero-velocity hover. Otherwise both None."""

    command: np.ndarray | None
    mode: Mode
    interventions: tuple[Intervention, ...] = ()
    hold_position_enu: np.ndarray | None = None
    hold_yaw_rad: float | None = None


def _positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"SupervisorConfig.{name} must be a positive finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class SupervisorConfig:
    """Limits and behaviour of :class:`SafetySupervisor`; SI units, fence in map ENU metres.

    Fence: at most one of ``fence_polygon_xy_m`` (vertices (x, y) of a simple polygon, either
    orientation) and ``fence_box_xy_m`` ``(x_min, y_min, x_max, y_max)``, plus an optional
    altitude band ``fence_z_min_m``/``fence_z_max_m`` (map z). None everywhere: no fence.
    ``heartbeat_timeout_s=None`` disables heartbeat monitoring (simulation).

    Fence braking (module docstring, rules 3 and 5): ``fence_margin_m`` (m) is the stand-off
    kept from the fence (and the distance inside it at which a hold point is latched);
    ``fence_brake_accel_m_s2`` (m/s^2, every fence part, horizontal and vertical) the
    deceleration the braking envelope plans with, well below the autopilot's limits (PX4
    MPC_ACC_HOR 3 m/s^2) so that a lagging vehicle can follow it; ``fence_response_s``
    (s, >= 0) how long the vehicle keeps its approach speed before it brakes: the time
    constant of the autopilot's velocity response plus odometry and command latency. The
    default 0.7 s covers PX4's horizontal velocity loop (MPC_XY_VEL_P_ACC 1.8 /s: 0.56 s)
    plus attitude response and link latency; ArduCopter, which stopped 0.8 m after a
    zero-velocity command at 1.48 m/s in SITL, has about 0.55 s. A vehicle that lags by up
    to about 0.3 s more still stops inside the fence (eating into the margin); raise it for
    slower vehicles. A larger value costs stand-off only at speed (braking starts
    ``v * fence_response_s`` earlier), not where the vehicle stops.
    """

    max_speed_xy_m_s: float = 5.0
    max_speed_up_m_s: float = 3.0
    max_speed_down_m_s: float = 1.5
    max_accel_xy_m_s2: float = 3.0
    max_accel_z_m_s2: float = 4.0
    max_yaw_rate_rad_s: float = 1.5708
    control_period_s: float = 0.02
    command_timeout_s: float = 0.25
    heartbeat_timeout_s: float | None = 1.5
    fence_polygon_xy_m: tuple[tuple[float, float], ...] | None = None
    fence_box_xy_m: tuple[float, float, float, float] | None = None
    fence_z_min_m: float | None = None
    fence_z_max_m: float | None = None
    fence_margin_m: float = 0.5
    fence_brake_accel_m_s2: float = 1.5
    fence_response_s: float = 0.7
    geofence_hold_s: float = 2.0
    landing_speed_m_s: float = 0.5

    def __post_init__(self) -> None:
        for name in ("max_speed_xy_m_s", "max_speed_up_m_s", "max_speed_down_m_s", "max_accel_xy_m_s2",
                     "max_accel_z_m_s2", "max_yaw_rate_rad_s", "control_period_s", "command_timeout_s",
                     "fence_margin_m", "fence_brake_accel_m_s2", "geofence_hold_s", "landing_speed_m_s"):
            _positive(name, getattr(self, name))
        value = self.fence_response_s
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"SupervisorConfig.fence_response_s must be a finite number >= 0, got {value!r}")
        if self.heartbeat_timeout_s is not None:
            _positive("heartbeat_timeout_s", self.heartbeat_timeout_s)
        for name in ("fence_z_min_m", "fence_z_max_m"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not math.isfinite(value)):
                raise ValueError(f"SupervisorConfig.{name} must be a finite number or None, got {value!r}")
        z_min, z_max = self.fence_z_min_m, self.fence_z_max_m
        if z_min is not None and z_max is not None and z_min >= z_max:
            raise ValueError(f"SupervisorConfig.fence_z_min_m ({self.fence_z_min_m}) must be below "
                             f"fence_z_max_m ({self.fence_z_max_m})")
        if self.fence_polygon_xy_m is not None and self.fence_box_xy_m is not None:
            raise ValueError("SupervisorConfig.fence_polygon_xy_m and fence_box_xy_m: give at most one")
        if self.fence_box_xy_m is not None:
            try:
                box = np.asarray(self.fence_box_xy_m, dtype=np.float64)
            except (TypeError, ValueError):
                box = np.array([np.nan])
            if box.shape != (4,) or not np.all(np.isfinite(box)) or box[0] >= box[2] or box[1] >= box[3]:
                raise ValueError("SupervisorConfig.fence_box_xy_m must be finite (x_min, y_min, x_max, y_max) "
                                 f"with x_min < x_max and y_min < y_max, got {self.fence_box_xy_m!r}")
        if self.fence_polygon_xy_m is not None:
            try:
                poly = np.asarray(self.fence_polygon_xy_m, dtype=np.float64)
            except (TypeError, ValueError):
                poly = np.array([np.nan])
            if poly.ndim != 2 or poly.shape[1] != 2 or len(poly) < 3 or not np.all(np.isfinite(poly)):
                raise ValueError("SupervisorConfig.fence_polygon_xy_m must be at least 3 finite (x, y) vertices, "
                                 f"got {self.fence_polygon_xy_m!r}")
            if abs(signed_area(poly)) < 1e-9:
                raise ValueError("SupervisorConfig.fence_polygon_xy_m has zero area")

    @property
    def has_fence(self) -> bool:
        return (self.fence_polygon_xy_m is not None or self.fence_box_xy_m is not None
                or self.fence_z_min_m is not None or self.fence_z_max_m is not None)

    def fence_vertices_ccw(self) -> np.ndarray | None:
        """(K, 2) fence vertices in map x/y metres, counter-clockwise; None without a horizontal fence."""
        if self.fence_box_xy_m is not None:
            x0, y0, x1, y1 = (float(v) for v in self.fence_box_xy_m)
            return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
        if self.fence_polygon_xy_m is not None:
            poly = np.asarray(self.fence_polygon_xy_m, dtype=np.float64)
            return poly if signed_area(poly) > 0 else poly[::-1].copy()
        return None


def _fmt(v) -> str:
    return "[" + ", ".join(f"{float(x):.3g}" for x in v) + "]"


class SafetySupervisor:
    """See the module docstring. Deterministic: the same calls give the same outputs."""

    def __init__(self, config: SupervisorConfig | None = None) -> None:
        self.config = config if config is not None else SupervisorConfig()
        cfg = self.config
        self.fence = Geofence(cfg.fence_vertices_ccw(), cfg.fence_z_min_m, cfg.fence_z_max_m) if cfg.has_fence else None
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
        if stamp_s > now_s + self.config.command_timeout_s:
            return self._refuse(InterventionKind.REFUSED_MALFORMED, now_s, arr,
                                f"stamp {stamp_s:.3f} s is {stamp_s - now_s:.3f} s in the future")
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
            p = self.fence.inset(p, self.config.fence_margin_m)
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
            crossing = self._predicted_crossing(p, v)
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

    def _predicted_crossing(self, p: np.ndarray, v: np.ndarray) -> str | None:
        """Why the vehicle at ``p`` (m) moving at ``v`` (m/s, map ENU) cannot stop before the
        fence even at the autopilot's acceleration limit after ``fence_response_s`` (rule 3),
        for the worst fence part; None when it can."""
        cfg = self.config
        worst, why = 0.0, None
        for part in self.fence.parts(p):
            speed = float(np.dot(v, part.direction))
            if speed <= CHANGE_TOLERANCE:
                continue
            a = cfg.max_accel_z_m_s2 if part.vertical else cfg.max_accel_xy_m_s2
            stop_m = speed * cfg.fence_response_s + speed * speed / (2.0 * a)
            if stop_m - part.distance_m > worst:
                worst = stop_m - part.distance_m
                why = (f"{speed:.2f} m/s towards {part.name} {part.distance_m:.2f} m away, stopping distance "
                       f"{stop_m:.2f} m ({cfg.fence_response_s:.2f} s response, {a:.2f} m/s^2)")
        return why

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
        # acceleration: change from the previous output over the elapsed time
        if self._previous_output is not None:
            base, dt_s = self._previous_output, max(0.0, now_s - self._previous_output_s)
        else:
            base, dt_s = self._baseline(), cfg.control_period_s
        before = cmd.copy()
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
        if self.fence is not None:
            normals, names = self.fence.near_normals(self._position_enu, cfg.fence_margin_m)
            if normals:
                v_enu = frames.heading_to_map(cmd[:3], self._yaw_rad)
                removed = []
                for _ in range(3):  # repeat for corners, where removing one component can add another
                    for n, name in zip(normals, names):
                        outward = float(np.dot(v_enu, n))
                        if outward > CHANGE_TOLERANCE:
                            v_enu = v_enu - outward * n
                            removed.append(f"{outward:.2f} m/s towards {name}")
                if removed:
                    before = cmd.copy()
                    cmd[:3] = frames.map_to_heading(v_enu, self._yaw_rad)
                    cmd[np.abs(cmd) < 1e-12] = 0.0
                    self._flag(violated, K.GEOFENCE_OUTWARD_REMOVED, now_s,
                               "at the geofence, outward velocity removed: " + "; ".join(removed[:4])
                               + f" ({_fmt(before)} -> {_fmt(cmd)})", cmd_in, cmd)
            cmd = self._brake(cmd, cmd_in, now_s, violated)
        return cmd

    def _brake(self, cmd: np.ndarray, cmd_in: np.ndarray, now_s: float, violated: set) -> np.ndarray:
        """Rule 5b: cap the commanded velocity towards every fence part by the braking envelope."""
        cfg = self.config
        p, v_meas = self._position_enu, self._velocity_enu
        v_enu = frames.heading_to_map(cmd[:3], self._yaw_rad)
        speed = float(np.linalg.norm(v_enu))
        limits = []   # (part, cap m/s) for the parts whose cap can bind
        for part in self.fence.parts(p):
            approach = max(0.0, float(np.dot(v_meas, part.direction)))
            room_m = part.distance_m - cfg.fence_margin_m - approach * cfg.fence_response_s
            cap = math.sqrt(2.0 * cfg.fence_brake_accel_m_s2 * max(0.0, room_m))
            if cap < speed:
                limits.append((part, cap))
        if not limits:
            return cmd
        v = v_enu.copy()
        for _ in range(100):  # cyclic projection onto the half-spaces v . w <= cap (0 satisfies them all)
            changed = False
            for part, cap in limits:
                excess = float(np.dot(v, part.direction)) - cap
                if excess > CHANGE_TOLERANCE:
                    v = v - excess * part.direction
                    changed = True
            if not changed:
                break
        towards = [(float(np.dot(v, part.direction)), cap) for part, cap in limits]
        if any(t - cap > CHANGE_TOLERANCE for t, cap in towards):  # not converged: scale down (caps >= 0)
            v = v * min(cap / t for t, cap in towards if t > cap)
        if float(np.max(np.abs(v - v_enu))) <= CHANGE_TOLERANCE:
            return cmd
        before = cmd.copy()
        cmd = cmd.copy()
        cmd[:3] = frames.map_to_heading(v, self._yaw_rad)
        binding = [f"{float(np.dot(v_enu, part.direction)):.2f} -> {cap:.2f} m/s towards {part.name} "
                   f"{part.distance_m:.2f} m away" for part, cap in limits
                   if float(np.dot(v_enu, part.direction)) > cap + CHANGE_TOLERANCE]
        self._flag(violated, InterventionKind.GEOFENCE_BRAKE, now_s,
                   "braking for the geofence: " + "; ".join(binding[:4])
                   + f" ({_fmt(before)} -> {_fmt(cmd)}; {cfg.fence_brake_accel_m_s2:.2f} m/s^2, "
                   f"{cfg.fence_response_s:.2f} s response, {cfg.fence_margin_m:.2f} m margin)", cmd_in, cmd)
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
