"""Reward and termination of :class:`~airplay.world.vector_env.AirPlayVectorEnv`, for all N rows at once.

The arithmetic is :class:`~airplay.world.env.AirPlayEnv`'s, element by element, so that each row's
reward and status equal the single environment's bit for bit: per control period the distance moved
and the distance to the goal (map ENU m, the single kernel's sums), the status (collision or bounds
from the flight kernel, then success within the success radius, then timeout at the task's time
limit), and the reward (``progress_weight`` x progress, + ``success`` or + ``collision``); with
geodesic progress, the drop of the cost-to-go over the whole step is added after the periods.
"""

from __future__ import annotations

import numpy as np

from airplay.world.env_config import RewardConfig
from airplay.world.geodesic import cost_to_go_rows, field_cache, geodesic_progress
from airplay.world.vector_episodes import COLLISION, OUT_OF_BOUNDS, RUNNING, SUCCESS, TIMEOUT, EpisodeRows


def period(episodes: EpisodeRows, reward: RewardConfig, codes: np.ndarray, before: np.ndarray, pos: np.ndarray,
           live: np.ndarray, total: np.ndarray, status: np.ndarray) -> None:
    """Book one control period of the rows ``live`` (bool (N,)): ``codes`` the flight kernel's
    collision/bounds codes, ``before`` and ``pos`` the (N, 3) map positions before and after it (m).
    Updates ``episodes`` (periods, path length, distances) and adds each live row's period reward to
    ``total`` and its status code to ``status``."""
    ep = episodes
    dx, dy, dz = pos[:, 0] - before[:, 0], pos[:, 1] - before[:, 1], pos[:, 2] - before[:, 2]
    moved = np.sqrt(dx * dx + dy * dy + dz * dz)  # the single environment's kernel's sums
    gx, gy, gz = ep.goals[:, 0] - pos[:, 0], ep.goals[:, 1] - pos[:, 1], ep.goals[:, 2] - pos[:, 2]
    distance = np.sqrt(gx * gx + gy * gy + gz * gz)
    ep.steps[live] += 1
    ep.path_length[live] += moved[live]
    ep.min_distance[live] = np.minimum(ep.min_distance[live], distance[live])
    r = ep.distance - distance if not ep.geodesic else np.zeros(len(distance))
    if reward.progress_weight != 1.0:
        r *= reward.progress_weight
    ep.distance[live] = distance[live]
    st = codes.astype(np.int64)
    running = st == RUNNING
    st[running & (distance <= ep.radius)] = SUCCESS
    running = st == RUNNING
    st[running & (ep.steps * ep.dt >= ep.time_limits - 1e-9)] = TIMEOUT
    r[st == SUCCESS] += reward.success
    r[(st == COLLISION) | (st == OUT_OF_BOUNDS)] += reward.collision
    total[live] += r[live]
    status[live] = st[live]


def add_geodesic_progress(episodes: EpisodeRows, reward: RewardConfig, total: np.ndarray, rows: np.ndarray,
                          pos: np.ndarray) -> None:
    """Add ``progress_weight`` x the drop of each row's cost-to-go over this step (``rows`` flown
    this step; ``pos`` the batch's map positions after it, m) to ``total``, as :class:`AirPlayEnv`
    does after a step's periods."""
    ep, fleet = episodes, episodes.fleet
    for s in fleet.scenes:
        mine = fleet.in_scene(rows, s)
        if len(mine) == 0:
            continue
        after = cost_to_go_rows(field_cache(s.world), [ep.goal_fields[i] for i in mine], pos[mine])
        progress = geodesic_progress(ep.cost_to_go[mine], after)
        if reward.progress_weight != 1.0:
            progress = progress * reward.progress_weight
        total[mine] += progress
        ep.cost_to_go[mine] = after


def outcome(status: np.ndarray, parked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(terminated, truncated) of each row from its status code: success, collision and leaving the
    region terminate, the time limit truncates; parked rows report neither."""
    terminated = (status == SUCCESS) | (status == COLLISION) | (status == OUT_OF_BOUNDS)
    truncated = status == TIMEOUT
    terminated[parked] = False
    truncated[parked] = False
    return terminated, truncated
