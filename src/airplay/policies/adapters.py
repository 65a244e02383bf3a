"""Adapters: a policy's native chunk of K outputs -> one 50 Hz command per control period.

DESIGN.md section 6. Every adapter has ``reset()`` and ``step(obs, predict) -> (4,) float32``
where ``predict(obs) -> (K, 4)`` is the policy's ``predict_action_chunk``; the adapter calls it
only when it needs a new chunk, which ``needs_chunk()`` says before the step (so that a batch of
episodes can predict the chunks of all that need one in one forward pass,
:mod:`airplay.policies.batched`). The same code runs in-process and in the ``policy`` node.

* ``prefix`` (ACT H = 50, DP H = 16): execute the first H controls of each chunk, then predict.
* ``hold`` (CNN-BC, H = 1): execute the chunk's first control for H periods (H = 1: direct).
* ``ensemble``: temporal ensembling (ACT paper): predict every period and average all
  predictions for the current period with weights ``exp(-m * i)``, i = 0 for the oldest.
* ``tracker``: the chunk holds waypoints ``[x, y, z, yaw]`` (m, rad) relative to the pose at
  prediction, in that pose's heading frame (x forward, y left, z up), waypoint k reached at
  (k + 1) control periods; a feed-forward + proportional tracker turns the first H into
  heading-frame velocity commands, reading the pose from ``obs["state"]``.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from airplay.frames import map_to_heading_xyz, wrap_angle as _wrap, yaw_of_state

CONTROL_DT_S = 0.02
"""One control period at 50 Hz (DESIGN.md section 6)."""


def _chunk(predict, obs: dict, horizon: int) -> np.ndarray:
    chunk = np.asarray(predict(obs), dtype=np.float32)
    if chunk.ndim != 2 or chunk.shape[1] != 4 or len(chunk) < horizon:
        raise ValueError(f"predict_action_chunk must return (K >= {horizon}, 4) commands, got shape {chunk.shape}")
    return chunk


class PrefixAdapter:
    """Queue the first ``horizon`` controls of each chunk; predict when the queue is empty."""

    def __init__(self, horizon: int) -> None:
        self.horizon = int(horizon)
        self.queue: deque[np.ndarray] = deque()

    def reset(self) -> None:
        self.queue.clear()

    def needs_chunk(self) -> bool:
        return not self.queue

    def step(self, obs: dict, predict) -> np.ndarray:
        if not self.queue:
            self.queue.extend(_chunk(predict, obs, self.horizon)[: self.horizon])
        return self.queue.popleft()


class HoldAdapter:
    """Hold the first control of each chunk for ``horizon`` periods (horizon 1: direct)."""

    def __init__(self, horizon: int) -> None:
        self.horizon = int(horizon)
        self.held: np.ndarray | None = None
        self.left = 0

    def reset(self) -> None:
        self.held, self.left = None, 0

    def needs_chunk(self) -> bool:
        return self.left == 0

    def step(self, obs: dict, predict) -> np.ndarray:
        if self.left == 0:
            self.held, self.left = _chunk(predict, obs, 1)[0], self.horizon
        self.left -= 1
        return self.held


class EnsembleAdapter:
    """Temporal ensembling over all chunks that cover the current period (predicts every step).

    ``coefficient`` m: weight ``exp(-m * i)`` of the i-th oldest prediction (ACT: 0.01).
    """

    def __init__(self, chunk_size: int, coefficient: float = 0.01) -> None:
        self.chunk_size = int(chunk_size)
        self.coefficient = float(coefficient)
        self.chunks: deque[np.ndarray] = deque()  # oldest first; chunks[i][j] is for j periods after its step

    def reset(self) -> None:
        self.chunks.clear()

    def needs_chunk(self) -> bool:
        return True

    def step(self, obs: dict, predict) -> np.ndarray:
        self.chunks.append(_chunk(predict, obs, 1))
        while len(self.chunks[0]) < len(self.chunks):  # the oldest no longer covers this period
            self.chunks.popleft()
        n = len(self.chunks)
        candidates = np.stack([c[n - 1 - i] for i, c in enumerate(self.chunks)])  # oldest first
        weights = np.exp(-self.coefficient * np.arange(n))
        return (weights @ candidates / weights.sum()).astype(np.float32)


def _pose(state: np.ndarray) -> tuple[np.ndarray, float]:
    """(position in map (m), yaw (rad)) from the 13-vector state (quaternion x, y, z, w)."""
    return np.asarray(state[0:3], np.float64), yaw_of_state(state)


class TrackerAdapter:
    """Track waypoint chunks (see the module docstring) with feed-forward + P control.

    ``gain_1_s``: proportional gain on the position/yaw error to the previous waypoint (1/s).
    """

    def __init__(self, horizon: int, gain_1_s: float = 2.0, dt_s: float = CONTROL_DT_S) -> None:
        self.horizon, self.gain, self.dt = int(horizon), float(gain_1_s), float(dt_s)
        self.waypoints: np.ndarray | None = None
        self.origin: tuple[np.ndarray, float] | None = None
        self.index = 0

    def reset(self) -> None:
        self.waypoints, self.origin, self.index = None, None, 0

    def needs_chunk(self) -> bool:
        return self.waypoints is None or self.index >= self.horizon

    def step(self, obs: dict, predict) -> np.ndarray:
        if self.waypoints is None or self.index >= self.horizon:
            self.waypoints = _chunk(predict, obs, self.horizon).astype(np.float64)
            self.origin, self.index = _pose(obs["state"]), 0
        (p0, yaw0), (p, yaw) = self.origin, _pose(obs["state"])
        d = p - p0
        here = np.r_[map_to_heading_xyz(d[0], d[1], d[2], yaw0), _wrap(yaw - yaw0)]  # origin frame
        target = self.waypoints[self.index]
        before = self.waypoints[self.index - 1] if self.index else np.zeros(4)
        err = before - here
        err[3] = _wrap(err[3])
        step = target - before
        step[3] = _wrap(step[3])
        v = step / self.dt + self.gain * err  # origin heading frame
        rel = yaw - yaw0  # rotate the velocity into the current heading frame
        self.index += 1
        return np.r_[map_to_heading_xyz(v[0], v[1], v[2], rel), v[3]].astype(np.float32)


ADAPTERS = ("prefix", "hold", "ensemble", "tracker")


def make_adapter(kind: str, horizon: int, chunk_size: int):
    """The adapter ``kind`` executing ``horizon`` controls of ``chunk_size``-long chunks (``hold``
    takes any horizon >= 1: it holds the chunk's first control that long)."""
    if kind == "hold" and horizon >= 1:
        return HoldAdapter(horizon)
    if not 1 <= horizon <= chunk_size:
        raise ValueError(f"execution horizon must be in 1..{chunk_size} (the chunk size), got {horizon}")
    if kind == "prefix":
        return PrefixAdapter(horizon)
    if kind == "hold":
        return HoldAdapter(horizon)
    if kind == "ensemble":
        return EnsembleAdapter(chunk_size)
    if kind == "tracker":
        return TrackerAdapter(horizon)
    raise ValueError(f"unknown adapter {kind!r}; choose one of {', '.join(ADAPTERS)}")
