"""A queue of episodes flown N at a time on an :class:`~airplay.world.vector_env.AirPlayVectorEnv`.

:class:`EpisodeFeed` is the start-park-refill loop that batched evaluation
(:mod:`airplay.eval.batched`) and DAgger's batched rollouts (:mod:`airplay.policies.dagger_rollouts`)
share: a row whose episode ended starts the next queued episode at once
(:meth:`~airplay.world.vector_env.AirPlayVectorEnv.start`), or, with none left, is parked; an episode
that ends at its start (its vehicle already within the success radius) is reported and its row
refilled in the same call. The feed keeps each row's item (what the caller queued: a task index, a
job), the latest observation of every row and each row's wall-clock seconds; what the caller does
per step (the policy, labels, records) stays the caller's.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.tasks.sampler import Task

T = TypeVar("T")
R = TypeVar("R")


class EpisodeFeed(Generic[T]):
    """Feeds ``items`` (flown in order) to the rows of ``venv``; ``task_of(item)`` is the item's task.

    Attributes:
        pending: the items not started yet (a deque, front first).
        item: per row, the item it flies (None: none).
        obs: per observation key, the (N, ...) array of every row's latest observation (rows not
            flying hold their last one).
        wall_s: per row, wall-clock seconds its episode has taken (its share of each batched start;
            the caller adds its share of each step).
    """

    def __init__(self, venv, items: Iterable[T], task_of: Callable[[T], Task]) -> None:
        self.venv = venv
        self.pending: deque[T] = deque(items)
        self.item: list[T | None] = [None] * venv.num_envs
        self.obs: dict[str, np.ndarray] = {}
        self.wall_s = np.zeros(venv.num_envs)
        self._task_of = task_of

    def live(self) -> list[int]:
        """The rows flying an item, ascending."""
        return [row for row, item in enumerate(self.item) if item is not None]

    def end(self, row: int) -> T:
        """Row ``row``'s item, which it no longer flies."""
        item, self.item[row] = self.item[row], None
        return item

    def begin(self, rows: Sequence[int], on_start: Callable[[list[int], list[T]], None],
              on_done: Callable[[int, str, int], R]) -> list[R]:
        """Start the next items in ``rows`` (parking those left without one). ``on_start(rows, items)``
        runs once per batched start, before the rows' observations are kept; ``on_done(row, status,
        steps)`` for each episode that ends at its start (its row is refilled). Returns what
        ``on_done`` returned, in order."""
        venv, done = self.venv, []
        rows = list(rows)
        while rows:
            now = rows[:len(self.pending)]
            if len(now) < len(rows):
                venv.park(rows[len(now):])
            if not now:
                break
            t0 = time.perf_counter()
            items = [self.pending.popleft() for _ in now]
            obs, info = venv.start(now, [self._task_of(item) for item in items])
            for row, item in zip(now, items):
                self.item[row], self.wall_s[row] = item, 0.0
            on_start(now, items)
            for key, value in obs.items():
                if key not in self.obs:
                    self.obs[key] = np.zeros((venv.num_envs, *value.shape[1:]), value.dtype)
                self.obs[key][now] = value
            dt = (time.perf_counter() - t0) / len(now)
            rows = []
            for j, row in enumerate(now):
                self.wall_s[row] += dt
                if info["status"][j] != EpisodeStatus.RUNNING.value:
                    done.append(on_done(row, str(info["status"][j]), int(info["steps"][j])))
                    rows.append(row)
        return done

    def settle(self, rows: Sequence[int], terminated: np.ndarray, truncated: np.ndarray, info: dict,
               share_s: float, on_done: Callable[[int, str, int], R]) -> tuple[list[R], list[int]]:
        """After a step of ``rows``: each gets ``share_s`` more wall-clock seconds, and
        ``on_done(row, status, steps)`` runs for each whose episode ended (terminated or truncated),
        in order. Returns what ``on_done`` returned and those rows (for :meth:`begin` to refill)."""
        done, ended = [], []
        for row in rows:
            self.wall_s[row] += share_s
            if terminated[row] or truncated[row]:
                done.append(on_done(row, str(info["status"][row]), int(info["steps"][row])))
                ended.append(row)
        return done, ended

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        """Step the environment with ``actions`` (N, 4) and keep its observations; returns
        (terminated, truncated, info) of all N rows."""
        obs, _, terminated, truncated, info = self.venv.step(actions)
        self.obs.update(obs)
        return terminated, truncated, info
