"""Closed-loop navigation metrics per episode (DESIGN.md section 6).

An episode is described by its task (start and goal positions in the ``map`` frame, metres;
the A* path length) and its executed trajectory: positions ``(T, 3)`` in map metres sampled
at every 50 Hz control step *including the start*, so ``steps = T - 1`` and one step lasts
``dt = 0.02 s``. The episode ends with one status of :data:`STATUSES`; it ends with
``"success"`` as soon as the vehicle is within the success radius ``r`` (default 1.0 m,
``config/protocol.yaml``) of the goal. Distances are 3-D Euclidean.

Definitions (lower-case names are the keys used everywhere, e.g. ``summary.json``):

- ``ne``: navigation error, distance from the final position to the goal (m).
- ``sr``: success, 1 if ``status == "success"`` else 0.
- ``osr``: oracle success, 1 if at any sample (start included) the distance to the goal was
  ``<= r``, else 0. A success counts as reached (``osr >= sr`` always).
- ``spl``: ``sr * l / max(p, l)`` with ``l`` the straight-line start-goal distance and ``p``
  the executed path length (sum of segment lengths, m). If ``l == 0`` and ``p == 0``,
  ``spl = sr``.
- ``astar_spl``: the same with ``l`` the A* path length (``astar_length_m``).
- ``cr``: 1 if ``status == "collision"``; ``ob``: 1 if ``status == "out_of_bounds"``.
- ``tts``: time to success, ``steps * dt`` (s), successful episodes only (NaN otherwise).

Aggregation (per scene first, then scenes weighted equally) is in :mod:`airplay.eval.aggregate`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from airplay.episode_status import RESULT_STATUSES, EpisodeStatus

STATUSES: tuple[str, ...] = RESULT_STATUSES
"""The statuses of :mod:`airplay.episode_status` an evaluated episode ends with."""
METRICS: tuple[str, ...] = ("ne", "sr", "osr", "spl", "astar_spl", "cr", "ob", "tts")
CONTROL_DT_S = 0.02  # 50 Hz control period (DESIGN.md section 6)
DEFAULT_SUCCESS_RADIUS_M = 1.0


@dataclass
class EpisodeResult:
    """One evaluated episode: the line written to ``episodes.jsonl``.

    Lengths and distances in metres, times in seconds. ``shortest_length_m`` is the A* path
    length (the A*-SPL reference); ``euclidean_distance_m`` the straight start-goal distance.
    ``time_to_success_s`` is None unless ``status == "success"``.
    """

    scene: str
    task_id: str | int
    setting: str
    status: str
    steps: int
    path_length_m: float
    shortest_length_m: float
    euclidean_distance_m: float
    final_distance_m: float
    min_distance_m: float
    time_to_success_s: float | None
    seed: int
    policy: str = ""
    error: str | None = None
    """What ended a ``policy_error`` or ``over_budget`` episode; None otherwise (then not written)."""

    def __post_init__(self) -> None:
        # Normalise numpy scalars to builtins so that the record is JSON-serialisable.
        if isinstance(self.task_id, np.generic):
            self.task_id = self.task_id.item()
        self.steps = int(self.steps)
        self.seed = int(self.seed)
        for name in ("path_length_m", "shortest_length_m", "euclidean_distance_m", "final_distance_m", "min_distance_m"):
            setattr(self, name, float(getattr(self, name)))
        if self.time_to_success_s is not None:
            self.time_to_success_s = float(self.time_to_success_s)
        if self.status not in STATUSES:
            raise ValueError(f"EpisodeResult: unknown status {self.status!r}; expected one of {STATUSES}")
        if self.steps < 0:
            raise ValueError(f"EpisodeResult: steps must be >= 0, got {self.steps}")
        if (self.time_to_success_s is None) != (self.status != EpisodeStatus.SUCCESS):
            raise ValueError(
                f"EpisodeResult: time_to_success_s must be set exactly for successes "
                f"(status {self.status!r}, time_to_success_s {self.time_to_success_s!r})"
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of builtin types (JSON-ready); ``error`` only where set."""
        d = asdict(self)
        if d["error"] is None:
            del d["error"]
        return d

    def to_json(self) -> str:
        """One-line JSON object (keys in field order)."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_json(cls, data: str | dict[str, Any]) -> EpisodeResult:
        """Inverse of :meth:`to_json` (also accepts the parsed dict).

        Unknown keys are ignored (later writers may add fields); a missing field raises
        ``ValueError`` naming it (``policy`` defaults to ``""``).
        """
        d = json.loads(data) if isinstance(data, str) else dict(data)
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in d and n not in ("policy", "error")]
        if missing:
            raise ValueError(f"EpisodeResult.from_json: missing field(s) {missing}")
        return cls(**{n: d[n] for n in names if n in d})


def path_length(trajectory: np.ndarray) -> float:
    """Sum of segment lengths of a ``(T, 3)`` trajectory (m); 0 for ``T <= 1``."""
    p = np.asarray(trajectory, dtype=float)
    if len(p) < 2:
        return 0.0
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum())


def episode_result(
    *,
    scene: str,
    task_id: str | int,
    setting: str,
    start: np.ndarray,
    goal: np.ndarray,
    astar_length_m: float,
    trajectory: np.ndarray,
    status: str,
    seed: int,
    policy: str = "",
    dt_s: float = CONTROL_DT_S,
    error: str | None = None,
) -> EpisodeResult:
    """Compute an :class:`EpisodeResult` from the task and the executed trajectory.

    Args:
        start, goal: ``(3,)`` task start and goal in the map frame (m). ``start`` is only used
            for the straight-line distance; the trajectory's first sample is the actual spawn.
        astar_length_m: A* path length of the task (m).
        trajectory: ``(T, 3)`` positions (m) at every control step including the start,
            ``T >= 1``; ``steps = T - 1``.
        status: one of :data:`STATUSES`.
        dt_s: control period (s), 0.02 at 50 Hz.
        error: what ended a ``policy_error`` / ``over_budget`` episode.
    """
    traj = np.asarray(trajectory, dtype=float)
    if traj.ndim != 2 or traj.shape[1] != 3 or len(traj) < 1:
        raise ValueError(f"episode_result: trajectory must be (T>=1, 3), got shape {traj.shape}")
    if not np.all(np.isfinite(traj)):
        raise ValueError("episode_result: trajectory contains non-finite positions")
    start = np.asarray(start, dtype=float).reshape(3)
    goal = np.asarray(goal, dtype=float).reshape(3)
    d_goal = np.linalg.norm(traj - goal, axis=1)
    steps = len(traj) - 1
    return EpisodeResult(
        scene=str(scene),
        task_id=task_id,
        setting=str(setting),
        status=status,
        steps=steps,
        path_length_m=path_length(traj),
        shortest_length_m=float(astar_length_m),
        euclidean_distance_m=float(np.linalg.norm(goal - start)),
        final_distance_m=float(d_goal[-1]),
        min_distance_m=float(d_goal.min()),
        time_to_success_s=steps * float(dt_s) if status == EpisodeStatus.SUCCESS else None,
        seed=int(seed),
        policy=str(policy),
        error=None if error is None else str(error),
    )


def _spl(sr: float, reference_m: float, path_m: float) -> float:
    if reference_m <= 0.0 and path_m <= 0.0:
        return sr
    return sr * reference_m / max(path_m, reference_m)


def episode_metrics(result: EpisodeResult, success_radius_m: float = DEFAULT_SUCCESS_RADIUS_M) -> dict[str, float]:
    """The metrics of one episode: ``{ne, sr, osr, spl, astar_spl, cr, ob, tts}`` (floats).

    ``ne`` in m, ``tts`` in s (NaN unless successful), the others 0 or 1 except the SPLs in
    [0, 1]. ``success_radius_m`` (m) decides ``osr``.
    """
    sr = 1.0 if result.status == EpisodeStatus.SUCCESS else 0.0
    osr = 1.0 if (sr or result.min_distance_m <= success_radius_m) else 0.0
    tts = result.time_to_success_s
    return {
        "ne": float(result.final_distance_m),
        "sr": sr,
        "osr": osr,
        "spl": _spl(sr, result.euclidean_distance_m, result.path_length_m),
        "astar_spl": _spl(sr, result.shortest_length_m, result.path_length_m),
        "cr": 1.0 if result.status == EpisodeStatus.COLLISION else 0.0,
        "ob": 1.0 if result.status == EpisodeStatus.OUT_OF_BOUNDS else 0.0,
        "tts": float(tts) if (sr and tts is not None) else math.nan,
    }
