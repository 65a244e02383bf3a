"""A vehicle's mission: the task it flies, where the policy takes over, and how the flight ends.

The fly graph flies one task of a scene (``scene:=``, ``index:=``), the very task the simulator
would give (:class:`airplay.tasks.sampler.Task`). As in the simulator, the policy takes over at
the task's start pose (position and heading, in the air) and the flight ends by the task's own
rules, judged on the vehicle's position estimate in the map frame (ENU, m):

==================  ==========================================================================
ending              rule (in this order at each control period, as in ``AirPlayEnv.step``)
==================  ==========================================================================
``collision``       the vehicle's sphere reaches ``collision_tolerance_m`` into the scene's
                    collision mesh: land at once (the simulator's rule is a touch; an estimate
                    is centimetres to decimetres off, and expert paths pass 6 cm from walls)
``out_of_bounds``   the vehicle left the navigable polygon or height band by more than
                    ``bounds_tolerance_m`` (an estimate hovering at the band's edge is not out):
                    hold, then land
``success``         within the success radius of the goal (not in the VLN setting, where only
                    the policy's STOP ends at the goal): hold, then land
``timeout``         the task's time limit since the policy took over: hold, then land
``stopped``         the policy's own stop away from the goal (``success`` within the radius)
==================  ==========================================================================

:class:`MissionJudge` applies the rules; the bridge (:mod:`airplay.bridge.flight`) holds and
lands, publishes the ending (``mission/result``) and never flies the policy past it. A
hardware-in-the-loop run judges the same rules on the simulator's true state instead
(``bench/hil.py``). Times are seconds on the caller's clock. No rclpy here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from airplay.episode_status import EpisodeStatus

LAND_AT_ONCE = frozenset({EpisodeStatus.COLLISION})
"""Endings after which the vehicle lands without holding first."""

COLLISION_TOLERANCE_M = 0.1
"""Metres the estimated sphere may reach into the collision mesh before the flight ends
``collision`` (the A* paths of the synthetic scenes pass as close as 0.06 m to a surface beyond the
vehicle's radius; ArduPilot SITL tracking the expert grazed one by 0.02 m)."""

BOUNDS_TOLERANCE_M = 0.2
"""Metres the estimate may stray outside the navigable region before the flight ends
``out_of_bounds``: tasks start at the edge of the height band (the lowest 0.1 m above it), and a
vehicle holding its start pose wanders a few centimetres about it."""


def distance_outside(region, position) -> float:
    """How far ``position`` (map m) lies outside ``region`` (:class:`~airplay.scene.spec.NavigableRegion`):
    the larger of the distance below or above the height band and the horizontal distance to the
    polygon; 0 inside."""
    from airplay.sim.collision import inside_polygon_xy

    x, y, z = (float(v) for v in np.asarray(position, np.float64)[:3])
    dz = max(region.z_min - z, z - region.z_max, 0.0)
    poly = np.asarray(region.polygon, np.float64)
    if inside_polygon_xy(poly, x, y):
        return dz
    a, b = poly, np.roll(poly, -1, axis=0)
    ab = b - a
    t = np.clip(((x - a[:, 0]) * ab[:, 0] + (y - a[:, 1]) * ab[:, 1]) / np.maximum((ab ** 2).sum(axis=1), 1e-12), 0, 1)
    nearest = a + t[:, None] * ab
    dxy = float(np.min(np.hypot(nearest[:, 0] - x, nearest[:, 1] - y)))
    return max(dz, dxy)


@dataclass(frozen=True)
class Mission:
    """One task on a vehicle (map frame: ENU metres, yaw rad CCW from x, times s).

    start_position, start_yaw: the pose at which the policy takes over (in the air).
    ground_z: map z of the ground under the start (take-off height = start z - ground_z).
    goal_position, success_radius_m: the goal and its radius. time_limit_s: from the policy's
    take-over. success_on_entry: entering the radius ends the flight (false in the VLN setting:
    only the policy's STOP does). task_id: the task's id (scene-index)."""

    task_id: str
    start_position: tuple[float, float, float]
    start_yaw: float
    goal_position: tuple[float, float, float]
    success_radius_m: float
    time_limit_s: float
    ground_z: float = 0.0
    success_on_entry: bool = True

    def __post_init__(self) -> None:
        for name in ("start_position", "goal_position"):
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != 3 or not all(math.isfinite(v) for v in value):
                raise ValueError(f"mission field '{name}' must be 3 finite numbers, got {getattr(self, name)!r}")
            object.__setattr__(self, name, value)
        for name in ("start_yaw", "ground_z"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"mission field '{name}' must be finite, got {getattr(self, name)!r}")
        for name in ("success_radius_m", "time_limit_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"mission field '{name}' must be > 0, got {getattr(self, name)!r}")
        if not self.start_position[2] - self.ground_z > 0.05:
            raise ValueError(f"mission: the start (z={self.start_position[2]:.2f} m) must be above the ground "
                             f"(ground_z={self.ground_z:.2f} m)")

    @classmethod
    def from_task(cls, task, success_radius_m: float, ground_z: float = 0.0,
                  success_on_entry: bool = True) -> Mission:
        """The mission of a :class:`~airplay.tasks.sampler.Task`."""
        return cls(task.task_id, tuple(task.start_position), float(task.start_yaw), tuple(task.goal_position),
                   float(success_radius_m), float(task.time_limit_s), float(ground_z), success_on_entry)

    @property
    def takeoff_height_m(self) -> float:
        """The start's height above the ground under it, m."""
        return self.start_position[2] - self.ground_z

    @property
    def start_on_ground(self) -> tuple[float, float, float]:
        """Where the vehicle stands before its take-off: the start, on the ground."""
        return (self.start_position[0], self.start_position[1], self.ground_z)

    def goal_distance(self, position) -> float:
        return float(np.linalg.norm(np.asarray(position, np.float64)[:3] - np.asarray(self.goal_position)))

    def to_dict(self) -> dict:
        return {"task_id": self.task_id, "start_position": list(self.start_position), "start_yaw": self.start_yaw,
                "goal_position": list(self.goal_position), "success_radius_m": self.success_radius_m,
                "time_limit_s": self.time_limit_s, "ground_z": self.ground_z,
                "success_on_entry": self.success_on_entry}


@dataclass(frozen=True)
class Ending:
    """How and where the mission ended: status (an :class:`EpisodeStatus`), reason (words),
    t_s (clock), flown_s (since the policy took over), position (map, m), goal_distance_m."""

    status: EpisodeStatus
    reason: str
    t_s: float
    flown_s: float
    position: tuple[float, float, float]
    goal_distance_m: float

    @property
    def land_at_once(self) -> bool:
        return self.status in LAND_AT_ONCE

    def to_dict(self) -> dict:
        return {"status": str(self.status), "reason": self.reason, "t_s": self.t_s, "flown_s": round(self.flown_s, 3),
                "position": [round(float(v), 4) for v in self.position],
                "goal_distance_m": round(self.goal_distance_m, 4)}


class MissionJudge:
    """The mission's end rules (module docstring) on a stream of positions.

    ``checker``: the scene's :class:`~airplay.sim.collision.CollisionChecker` (collision and
    bounds; None: those two rules are not judged). :meth:`start` when the policy takes over,
    :meth:`update` every control period, :meth:`policy_stop` on the policy's stop; the first
    ending is kept (:attr:`ending`) and every later call returns it unchanged. :attr:`path` holds
    the positions judged from the take-over to the ending (map m, the ending's own included), so
    whoever reports the ending reports the path that ended it.
    """

    def __init__(self, mission: Mission, checker=None, bounds_tolerance_m: float = BOUNDS_TOLERANCE_M,
                 collision_tolerance_m: float = COLLISION_TOLERANCE_M) -> None:
        self.mission = mission
        self.checker = checker
        self.bounds_tolerance_m = float(bounds_tolerance_m)
        self.collision_tolerance_m = float(collision_tolerance_m)
        self.started_s: float | None = None
        self.ending: Ending | None = None
        self.closest_m = math.inf
        self.path: list[tuple[float, float, float]] = []

    def start(self, now_s: float) -> None:
        self.started_s = float(now_s)

    def _end(self, status: EpisodeStatus, reason: str, position, now_s: float, on_path: bool = True) -> Ending:
        distance = self.mission.goal_distance(position)
        point = tuple(float(v) for v in np.asarray(position, np.float64)[:3])
        if on_path and np.all(np.isfinite(point)) and (not self.path or self.path[-1] != point):
            self.path.append(point)
        self.ending = Ending(status, reason, float(now_s), float(now_s - (self.started_s or now_s)), point, distance)
        return self.ending

    def update(self, position, now_s: float) -> Ending | None:
        """The ending reached at ``position`` (map m) and ``now_s``, or None while the mission goes on
        (or before :meth:`start`)."""
        if self.ending is not None or self.started_s is None:
            return self.ending
        p = np.asarray(position, np.float64)[:3]
        if not np.all(np.isfinite(p)):
            return None
        m = self.mission
        distance = m.goal_distance(p)
        self.closest_m = min(self.closest_m, distance)
        self.path.append(tuple(float(v) for v in p))
        if self.checker is not None:
            clearance = float(self.checker.clearance(p.reshape(1, 3))[0])
            if clearance < -self.collision_tolerance_m:
                return self._end(EpisodeStatus.COLLISION, f"the vehicle's sphere reached {-clearance:.2f} m into the "
                                 "scene's collision mesh", p, now_s)
            status = self.checker.status(p.reshape(1, 3))[0] if clearance >= 0.0 else \
                (EpisodeStatus.OUT_OF_BOUNDS if self.checker.out_of_bounds(p.reshape(1, 3))[0] else EpisodeStatus.RUNNING)
            if status is EpisodeStatus.OUT_OF_BOUNDS:
                outside = distance_outside(self.checker.region, p)
                if outside > self.bounds_tolerance_m:
                    return self._end(status, f"the vehicle left the navigable region by {outside:.2f} m", p, now_s)
        if m.success_on_entry and distance <= m.success_radius_m:
            return self._end(EpisodeStatus.SUCCESS, f"within {m.success_radius_m:.2f} m of the goal", p, now_s)
        if now_s - self.started_s >= m.time_limit_s - 1e-9:
            return self._end(EpisodeStatus.TIMEOUT, f"the task's time limit {m.time_limit_s:.1f} s", p, now_s)
        return None

    def policy_stop(self, position, now_s: float, why: str = "the policy's stop") -> Ending:
        """The policy ended the episode: ``success`` within the radius, else ``stopped``."""
        if self.ending is not None:
            return self.ending
        p = np.asarray(position, np.float64)[:3]
        inside = self.mission.goal_distance(p) <= self.mission.success_radius_m
        return self._end(EpisodeStatus.SUCCESS if inside else EpisodeStatus.STOPPED, why, p, now_s)

    def interrupted(self, position, now_s: float, reason: str) -> Ending:
        """The flight ended before the mission did (an operator's landing, a failure, the autopilot
        taking over): the mission's status is ``interrupted``."""
        if self.ending is not None:
            return self.ending
        p = np.zeros(3) if position is None else np.asarray(position, np.float64)[:3]
        return self._end(EpisodeStatus.INTERRUPTED, reason, p, now_s, on_path=position is not None)
