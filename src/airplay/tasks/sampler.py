"""Navigation tasks sampled the way AirPlayground samples them.

1. Endpoint candidates: ``endpoint_candidates`` free cells drawn uniformly (without
   replacement) among the cells that keep ``endpoint_extra_clearance_m`` more clearance
   than the planning clearance (signed distance > clearance + extra).
2. Candidate pairs (ordered: start, goal) at least ``min_endpoint_separation_m`` apart
   (straight-line distance between the cell centres) and in the same 26-connected component
   of the free space; the ``distance_quantile`` filter keeps pairs whose straight-line
   distance is at or above that quantile of all pair distances (0.0 keeps all).
3. Pairs are drawn uniformly from those left, without replacement; each is kept when A*
   connects it (its length is the A*-SPL reference), until ``n`` tasks exist.

PointGoal, ImageGoal and goal-free tasks come from the same sampler and differ only in
what the environment shows the policy. Start yaw is uniform in [-pi, pi); goal yaw is the
direction of travel of the A* path's last metre (so an ImageGoal image looks the way the
vehicle arrives), or uniform when the path ends vertically. Everything is drawn from
``np.random.default_rng(seed)`` in a fixed order: same inputs, same tasks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage

from airplay.tasks.astar import astar
from airplay.tasks.navigable import NavigableGrid
from airplay.tasks.protocol import Protocol, load_protocol

SETTINGS = ("pointgoal", "imagegoal", "goalfree")


@dataclass(frozen=True)
class Task:
    """One navigation episode's task. Positions in map (ENU, m), yaws in rad (CCW from +x).

    path_m: (K, 3) the A* path's cell centres in map, start to goal.
    astar_length_m: its length (the shortest length of A*-SPL).
    euclidean_distance_m: straight-line start-goal distance.
    time_limit_s: protocol time limit for this task.
    """

    task_id: str
    scene: str
    setting: str
    start_position: np.ndarray
    start_yaw: float
    goal_position: np.ndarray
    goal_yaw: float
    path_m: np.ndarray = field(repr=False)
    astar_length_m: float
    euclidean_distance_m: float
    time_limit_s: float

    def to_dict(self, path: bool = False) -> dict:
        """JSON-ready dict: the summary, and with ``path`` also ``path_m`` as a list of
        [x, y, z]. Floats are Python floats, so ``json.dumps`` writes them exactly and
        :meth:`from_dict` gives the same task back, bit for bit."""
        d = {
            "task_id": self.task_id, "scene": self.scene, "setting": self.setting,
            "start_position": [float(v) for v in self.start_position], "start_yaw": float(self.start_yaw),
            "goal_position": [float(v) for v in self.goal_position], "goal_yaw": float(self.goal_yaw),
            "astar_length_m": float(self.astar_length_m),
            "euclidean_distance_m": float(self.euclidean_distance_m), "time_limit_s": float(self.time_limit_s),
        }
        if path:
            d["path_m"] = np.asarray(self.path_m, np.float64).reshape(-1, 3).tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Task":
        """The task of :meth:`to_dict` (``path_m`` may be absent: an empty (0, 3) path).

        Raises ValueError naming the first missing or malformed field."""
        def vector(key: str) -> np.ndarray:
            v = np.asarray(d[key], np.float64)
            if v.shape != (3,) or not np.all(np.isfinite(v)):
                raise ValueError(f"task field '{key}' must be 3 finite numbers, got {d[key]!r}")
            return v

        try:
            path = np.asarray(d.get("path_m", []), np.float64).reshape(-1, 3)
            task = cls(task_id=str(d["task_id"]), scene=str(d["scene"]), setting=str(d["setting"]),
                       start_position=vector("start_position"), start_yaw=float(d["start_yaw"]),
                       goal_position=vector("goal_position"), goal_yaw=float(d["goal_yaw"]), path_m=path,
                       astar_length_m=float(d["astar_length_m"]), euclidean_distance_m=float(d["euclidean_distance_m"]),
                       time_limit_s=float(d["time_limit_s"]))
        except KeyError as exc:
            raise ValueError(f"task field {exc} is missing") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"malformed task: {exc}") from None
        if not task.time_limit_s > 0:
            raise ValueError(f"task field 'time_limit_s' must be > 0, got {task.time_limit_s!r}")
        return task


class TaskSamplingError(RuntimeError):
    """The scene does not admit the requested tasks (too little free space, none connected)."""


def endpoint_candidates(grid: NavigableGrid, count: int, extra_clearance_m: float,
                        rng: np.random.Generator) -> np.ndarray:
    """``count`` distinct cells (count, 3) drawn uniformly among free cells whose signed
    distance exceeds the grid's clearance + ``extra_clearance_m``; fewer if fewer exist."""
    ok = grid.free & (grid.distance_m > grid.clearance_m + extra_clearance_m)
    cells = np.argwhere(ok)  # C order: deterministic
    if len(cells) == 0:
        return cells
    pick = rng.choice(len(cells), size=min(count, len(cells)), replace=False)
    return cells[pick]


def candidate_pairs(grid: NavigableGrid, cells: np.ndarray, min_separation_m: float,
                    distance_quantile: float) -> tuple[np.ndarray, np.ndarray]:
    """Ordered pairs (P, 2) of indices into ``cells`` that are ``min_separation_m`` apart, in
    one connected component of free space and pass the distance-quantile filter; and their
    straight-line distances (P,) in metres."""
    labels, _ = ndimage.label(grid.free, structure=np.ones((3, 3, 3), dtype=bool))
    comp = labels[cells[:, 0], cells[:, 1], cells[:, 2]]
    pts = grid.to_world(cells)
    d = np.linalg.norm(pts[:, None, :] - pts[None, :, :], axis=-1)
    i, j = np.nonzero((d >= min_separation_m) & (comp[:, None] == comp[None, :]) & ~np.eye(len(cells), dtype=bool))
    dist = d[i, j]
    if distance_quantile > 0.0 and len(dist):
        keep = dist >= np.quantile(dist, distance_quantile)
        i, j, dist = i[keep], j[keep], dist[keep]
    return np.column_stack([i, j]), dist


def _goal_yaw(path_m: np.ndarray, rng_yaw: float) -> float:
    """Heading of the path's last metre, or ``rng_yaw`` when that is (nearly) vertical."""
    end = path_m[-1]
    seg = np.linalg.norm(path_m - end, axis=1)
    far = np.nonzero(seg >= 1.0)[0]
    ref = path_m[far[-1]] if len(far) else path_m[0]
    d = end[:2] - ref[:2]
    if np.hypot(*d) < 0.05:
        return rng_yaw
    return float(math.atan2(d[1], d[0]))


def sample_tasks(scene, grid: NavigableGrid, n: int, seed: int, setting: str = "pointgoal",
                 settings: Protocol | None = None) -> list[Task]:
    """``n`` tasks for ``scene`` (a Scene, or its name) on ``grid``; deterministic in ``seed``.

    settings: the :class:`~airplay.tasks.protocol.Protocol` (default: config/protocol.yaml).
    Raises :class:`TaskSamplingError` when fewer than ``n`` connected pairs exist.
    """
    if setting not in SETTINGS:
        raise ValueError(f"unknown task setting {setting!r}; choose one of {', '.join(SETTINGS)}")
    if n < 0:
        raise ValueError(f"n must be non-negative, got {n}")
    protocol = settings if settings is not None else load_protocol()
    ts = protocol.task
    name = scene if isinstance(scene, str) else scene.name
    rng = np.random.default_rng(seed)
    cells = endpoint_candidates(grid, ts.endpoint_candidates, ts.endpoint_extra_clearance_m, rng)
    if len(cells) < 2:
        raise TaskSamplingError(f"{name}: {len(cells)} endpoint candidates with "
                                f"{grid.clearance_m + ts.endpoint_extra_clearance_m:.2f} m clearance")
    pairs, dist = candidate_pairs(grid, cells, ts.min_endpoint_separation_m, ts.distance_quantile)
    order = rng.permutation(len(pairs))
    tasks: list[Task] = []
    for p in order:
        if len(tasks) == n:
            break
        a, b = cells[pairs[p, 0]], cells[pairs[p, 1]]
        start_yaw, alt_goal_yaw = rng.uniform(-math.pi, math.pi, 2)
        found = astar(grid.free, a, b, grid.resolution_m)
        if found is None:  # cannot happen within one component; kept as the contract
            continue
        path_m = grid.to_world(found.cells)
        k = len(tasks)
        tasks.append(Task(
            task_id=f"{name}-{setting}-{seed}-{k}", scene=name, setting=setting,
            start_position=path_m[0].copy(), start_yaw=float(start_yaw),
            goal_position=path_m[-1].copy(), goal_yaw=_goal_yaw(path_m, float(alt_goal_yaw)),
            path_m=path_m, astar_length_m=found.length_m, euclidean_distance_m=float(dist[p]),
            time_limit_s=protocol.time_limit_s(found.length_m),
        ))
    if len(tasks) < n:
        raise TaskSamplingError(f"{name}: only {len(tasks)} of {n} tasks: too few connected endpoint pairs "
                                f"({len(pairs)} candidate pairs from {len(cells)} candidates)")
    return tasks
