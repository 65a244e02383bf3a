"""The vehicles of :class:`~airplay.world.vector_env.AirPlayVectorEnv`, grouped by scene.

A batch of N sub-environments flies in one scene or several; sub-environment i is row
``local[i]`` of its scene's :class:`SceneBatch` (one compiled flight model and collision kernel
and one :class:`~airplay.world.camera_batch.CameraBatch` per scene). :class:`Fleet` moves, checks
and reads all N vehicles in sub-environment order, whatever the grouping. Positions are map ENU
metres, yaws radians about z, orientations base_link in map as quaternions (x, y, z, w).
"""

from __future__ import annotations

import gymnasium
import numpy as np

from airplay.sim.flight import FlightSim
from airplay.tasks.sampler import Task
from airplay.world.camera_batch import CameraBatch
from airplay.world.env import MAX_DEPTH_M
from airplay.world.world import World


class SceneBatch:
    """One scene of the batch: its World, the sub-environments in it (``rows``), their flight
    model and collision kernels, their cameras, tasks and (VLN) instructions."""

    def __init__(self, index: int, world: World, rows: np.ndarray, tasks: list[Task], texts: list[str] | None,
                 render_backend: str, threads: int | None) -> None:
        self.index, self.world, self.rows = index, world, rows
        self.tasks, self.texts = tasks, texts
        self.flight = FlightSim(world.vehicle, world.checker, len(rows))
        self.camera = CameraBatch(world, len(rows), render_backend, threads, MAX_DEPTH_M)
        self.local = np.full(int(rows.max()) + 1, -1, dtype=np.int64)
        self.local[rows] = np.arange(len(rows))  # sub-environment -> row of this scene's batch


class Fleet:
    """The N vehicles of the batch across its scenes (``scene_of[i]``: the scene of sub-environment i)."""

    def __init__(self, scenes: list[SceneBatch], scene_of: np.ndarray) -> None:
        self.scenes, self.scene_of, self.num_envs = scenes, scene_of, len(scene_of)

    def gather(self, name: str) -> np.ndarray:
        """The vehicles' ``name`` (a :class:`~airplay.sim.dynamics.QuadrotorBatch` property) for
        all N sub-environments, in sub-environment order (a copy)."""
        if len(self.scenes) == 1:
            return np.array(getattr(self.scenes[0].flight.vehicles, name))
        first = getattr(self.scenes[0].flight.vehicles, name)
        out = np.empty((self.num_envs, *first.shape[1:]), first.dtype)
        for s in self.scenes:
            out[s.rows] = getattr(s.flight.vehicles, name)
        return out

    def hold(self, rows: np.ndarray) -> list:
        """Copies of the vehicle state of sub-environments ``rows``, for :meth:`put_back`."""
        held = []
        for s in self.scenes:
            mine = s.local[rows[self.scene_of[rows] == s.index]]
            if len(mine):
                v = s.flight.vehicles
                held.append((v, mine, v.state[mine], v.rotation[mine], v.angular_velocity_body[mine]))
        return held

    @staticmethod
    def put_back(held: list) -> None:
        """Restore the vehicle state :meth:`hold` copied (undoing a move of the batch for those rows)."""
        for v, mine, state, rotation, omega in held:
            v.state[mine] = state
            v.rotation[mine] = rotation
            v.angular_velocity_body[mine] = omega

    def move(self, cmd: np.ndarray) -> None:
        """One control period of the flight model for every vehicle; ``cmd`` (N, 4) float64 heading-frame
        velocity m/s and yaw rate rad/s."""
        if len(self.scenes) == 1:
            self.scenes[0].flight.move(cmd)
        else:
            for s in self.scenes:
                s.flight.move(cmd[s.rows])

    def check(self) -> np.ndarray:
        """(N,) int8: each vehicle's collision and bounds code (:class:`~airplay.sim.flight.FlightSim`'s)."""
        if len(self.scenes) == 1:
            return self.scenes[0].flight.check()
        codes = np.empty(self.num_envs, dtype=np.int8)
        for s in self.scenes:
            codes[s.rows] = s.flight.check()
        return codes

    def in_scene(self, rows: np.ndarray, scene: SceneBatch) -> np.ndarray:
        """The sub-environments of ``rows`` that fly in ``scene``."""
        return rows[self.scene_of[rows] == scene.index]


def scene_entries(scene, num_envs: int) -> list:
    """The scene argument as a list of entries (one scene: a list of one)."""
    if not isinstance(scene, (list, tuple)):
        return [scene]
    if not scene:
        raise ValueError("scene: an empty list; give a scene, or a list of scenes (one per sub-environment, "
                         "or cycled)")
    if len(scene) > num_envs:
        raise ValueError(f"scene: {len(scene)} scenes for num_envs={num_envs}; give at most one per "
                         "sub-environment")
    return list(scene)


def merge_spaces(spaces: list, what: str):
    """One space holding every scene's observations: Boxes of one shape and dtype widened to
    the union of their bounds, Text spaces to the union of their characters and lengths.
    ValueError naming ``what`` where the shapes differ."""
    first = spaces[0]
    if all(s == first for s in spaces[1:]):
        return first
    if isinstance(first, gymnasium.spaces.Dict):
        return gymnasium.spaces.Dict({k: merge_spaces([s[k] for s in spaces], f"{what}[{k!r}]") for k in first})
    if isinstance(first, gymnasium.spaces.Text):
        return gymnasium.spaces.Text(max(s.max_length for s in spaces), min_length=min(s.min_length for s in spaces),
                                     charset="".join(sorted(set().union(*(s.character_set for s in spaces)))))
    if isinstance(first, gymnasium.spaces.Box) and all(s.shape == first.shape and s.dtype == first.dtype
                                                        for s in spaces):
        return gymnasium.spaces.Box(np.min([s.low for s in spaces], axis=0), np.max([s.high for s in spaces], axis=0),
                                    first.shape, first.dtype)
    raise ValueError(f"{what}: the scenes' spaces differ ({', '.join(map(str, spaces))})")
