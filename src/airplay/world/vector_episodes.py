"""The episodes of :class:`~airplay.world.vector_env.AirPlayVectorEnv`'s N rows: their state, and
their start (the batched reset and task draw).

:class:`EpisodeRows` holds, per sub-environment, the running episode's goal (map ENU m), time limit
(s), control periods flown, distance to the goal and its minimum (m), path length (m), status code,
task id, instruction (VLN) and goal image (ImageGoal), and its cost-to-go field (geodesic progress).
:meth:`EpisodeRows.start` begins episodes as :meth:`airplay.world.env.AirPlayEnv.reset` does: each row
draws a task of its scene with its own generator (``task_order="random"``), or flies a given one.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.tasks.sampler import Task
from airplay.world.geodesic import cost_to_go, field_cache, goal_field
from airplay.world.vector_scenes import Fleet

# status codes of the batch: FlightSim's 0-2, then the two the episode adds
RUNNING, COLLISION, OUT_OF_BOUNDS, SUCCESS, TIMEOUT = 0, 1, 2, 3, 4
STATUS_NAMES = np.array([EpisodeStatus.RUNNING.value, EpisodeStatus.COLLISION.value,
                         EpisodeStatus.OUT_OF_BOUNDS.value, EpisodeStatus.SUCCESS.value,
                         EpisodeStatus.TIMEOUT.value], dtype=object)
"""The :class:`~airplay.episode_status.EpisodeStatus` value of each status code."""


class EpisodeRows:
    """Per-row episode state of a batch of ``fleet.num_envs`` sub-environments (module docstring).

    Args:
        fleet: the batch's vehicles and scenes.
        geodesic: keep each row's cost-to-go field and value (``progress="geodesic"``).
        goal_images: keep each row's goal image, ``hw`` (height, width) pixels (ImageGoal).
    """

    def __init__(self, fleet: Fleet, geodesic: bool, goal_images: bool, hw: tuple[int, int]) -> None:
        n = fleet.num_envs
        self.fleet, self.geodesic, self.hw = fleet, geodesic, hw
        self.dt = np.empty(n)  # control period, s
        self.radius = np.empty(n)  # success radius, m
        for s in fleet.scenes:
            self.dt[s.rows] = s.world.vehicle.control_dt_s
            self.radius[s.rows] = s.world.protocol.success_radius_m
        self.goals = np.zeros((n, 3))
        self.time_limits = np.zeros(n)
        self.steps = np.zeros(n, dtype=np.int64)
        self.distance = np.zeros(n)
        self.min_distance = np.zeros(n)
        self.goal_fields: list = [None] * n  # each row's cost-to-go field (geodesic progress)
        self.cost_to_go = np.full(n, np.inf)  # its value at the vehicle after the last step, m
        self.path_length = np.zeros(n)
        self.status = np.zeros(n, dtype=np.int64)
        self.task_ids = np.full(n, None, dtype=object)
        self.instructions = [""] * n
        self.goal_images = np.zeros((n, *hw, 3), np.uint8) if goal_images else None

    def start(self, rows: np.ndarray, rngs: list, given: Sequence[Task] | None = None) -> None:
        """New episodes for sub-environments ``rows``: each draws a task of its scene with its
        generator ``rngs[i]``, as :meth:`AirPlayEnv.reset` does with ``task_order="random"``, or flies
        ``given[k]`` in row ``rows[k]``. Places the vehicles at the tasks' starts."""
        rows = np.asarray(rows, dtype=np.int64)
        fleet = self.fleet
        for s in fleet.scenes:
            in_scene = fleet.scene_of[rows] == s.index
            mine = rows[in_scene]
            if len(mine) == 0:
                continue
            if given is None:
                draws = [int(rngs[i].integers(len(s.tasks))) for i in mine]
                tasks = [s.tasks[k] for k in draws]
            else:
                draws, tasks = None, [t for t, here in zip(given, in_scene) if here]
            starts = np.array([t.start_position for t in tasks], dtype=np.float64).reshape(-1, 3)
            s.flight.reset_rows(s.local[mine], starts, np.array([t.start_yaw for t in tasks], dtype=np.float64))
            pos = s.flight.vehicles.position
            for i, task in zip(mine, tasks):
                self.goals[i] = np.ascontiguousarray(task.goal_position, dtype=np.float64).reshape(3)
                self.time_limits[i] = task.time_limit_s
                self.distance[i] = self.min_distance[i] = float(np.linalg.norm(task.goal_position
                                                                               - pos[s.local[i]]))
                if self.geodesic:
                    fields = field_cache(s.world)
                    self.goal_fields[i] = goal_field(fields, self.goals[i])
                    self.cost_to_go[i] = cost_to_go(fields, self.goal_fields[i], pos[s.local[i]])[0]
            self.task_ids[mine] = [t.task_id for t in tasks]
            if s.texts is not None and draws is not None:
                for i, k in zip(mine, draws):
                    self.instructions[i] = s.texts[k]
            if self.goal_images is not None:
                goals = np.array([t.goal_position for t in tasks], dtype=np.float64).reshape(-1, 3)
                yaws = np.array([t.goal_yaw for t in tasks], dtype=np.float64)
                imgs = np.empty((len(mine), *self.hw, 3), np.uint8)
                s.camera.render(goals, yaws, imgs, None)
                self.goal_images[mine] = imgs
        self.steps[rows] = 0
        self.path_length[rows] = 0.0
        self.status[rows] = np.where(self.distance[rows] <= self.radius[rows], SUCCESS, RUNNING)

    def infos(self) -> dict:
        """The batch's infos (Gymnasium's vector layout: each key with its ``_key`` mask)."""
        n, ones = len(self.steps), np.ones(len(self.steps), dtype=bool)
        info = {
            "status": STATUS_NAMES[self.status],
            "task_id": self.task_ids.copy(),
            "steps": self.steps.copy(),
            "time_s": self.steps * self.dt,
            "distance_to_goal_m": self.distance.copy(),
            "min_distance_m": self.min_distance.copy(),
            "path_length_m": self.path_length.copy(),
        }
        for key in list(info):
            info["_" + key] = ones.copy()
        assert len(info["status"]) == n
        return info
