"""Warm-up before a node reports ready: its compiled kernels run once outside any episode.

numba compiles a kernel on its first call (or loads it from its cache, ``NUMBA_CACHE_DIR`` or
``__pycache__``); with a cold cache that takes seconds to minutes on a loaded machine. The
graph's nodes therefore call their part once on a short task of the first scene before they
subscribe to ``episode/command`` (which is how the evaluator sees them ready), so that no
episode ever waits on a compiler. Nothing here changes a result: the sim and renderer are reset
for every real episode, and the policy node resets its policy.
"""

from __future__ import annotations

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.tasks.sampler import Task

WARMUP_TASK_ID = "warm-up"


def warmup_task(world) -> Task:
    """A short task for warm-up only (map frame, m): from the point of the navigable region
    with the most clearance in the signed distance field to a point up to 1 m along +x, inside
    that clearance."""
    sdf, nav = world.sdf, world.scene.spec.navigable
    xs, ys, zs = sdf.centres(0), sdf.centres(1), sdf.centres(2)
    inside_xy = nav.contains_xy(np.stack(np.meshgrid(xs, ys, indexing="ij"), axis=-1).reshape(-1, 2))
    band = (zs >= nav.z_min) & (zs <= nav.z_max)
    values = np.where(inside_xy.reshape(len(xs), len(ys))[:, :, None] & band[None, None, :], sdf.values, -np.inf)
    i, j, k = np.unravel_index(int(np.argmax(values)), values.shape)
    start = np.array([xs[i], ys[j], zs[k]], np.float64)
    clearance = float(values[i, j, k]) if np.isfinite(values[i, j, k]) else 0.0
    goal = start + np.array([min(1.0, max(0.5 * clearance, 0.0)), 0.0, 0.0])
    length = float(np.linalg.norm(goal - start))
    return Task(task_id=WARMUP_TASK_ID, scene=world.name, setting="pointgoal", start_position=start, start_yaw=0.0,
                goal_position=goal, goal_yaw=0.0, path_m=np.stack([start, goal]), astar_length_m=length,
                euclidean_distance_m=length, time_limit_s=10.0)


def centre_task(world) -> Task:
    """A warm-up task read off scene.yaml alone (no SDF, no mesh): from the middle of the
    navigable region (its polygon's vertex mean, mid height band, facing +x) 1 m along +x. It
    may start inside an obstacle: for warming a camera or a policy that does not plan."""
    nav = world.scene.spec.navigable
    x, y = np.asarray(nav.polygon, np.float64).mean(axis=0)
    start = np.array([x, y, 0.5 * (nav.z_min + nav.z_max)])
    goal = start + np.array([1.0, 0.0, 0.0])
    return Task(task_id=WARMUP_TASK_ID, scene=world.name, setting="pointgoal", start_position=start, start_yaw=0.0,
                goal_position=goal, goal_yaw=0.0, path_m=np.stack([start, goal]), astar_length_m=1.0,
                euclidean_distance_m=1.0, time_limit_s=10.0)


def warm_flight(env, task: Task, steps: int = 2) -> None:
    """Reset ``env`` (an :class:`~airplay.world.env.AirPlayEnv`) on ``task`` and step it with zero
    commands (hover) up to ``steps`` times: the dynamics, collision and observation kernels."""
    _, info = env.reset(options={"task": task})
    for _ in range(steps):
        if info["status"] != EpisodeStatus.RUNNING:
            break
        _, _, _, _, info = env.step(np.zeros(4, np.float32))


def warm_camera(world, backend: str, max_depth_m: float) -> None:
    """Render RGB and depth once from :func:`centre_task`'s start: the rasterizer, the level of
    detail and the depth z-buffer run, and the splat and mesh are loaded (nothing else)."""
    task = centre_task(world)
    world.camera_images(task.start_position, task.start_yaw, backend, depth=True, max_depth_m=max_depth_m)
