"""The entry points of ``airplay/VLN-v0``: the world layer's environments with default episodes.

:func:`airplay.world.vector_env.make_env` and :class:`~airplay.world.vector_env.AirPlayVectorEnv`
fly VLN episodes they are given (:class:`~airplay.vln.episodes.VLNEpisode` s). Where a caller
gives none (``tasks=None``, or None for a scene of a list), these entry points make the
default ones first: the protocol's ``num_tasks`` goal-free tasks sampled with ``task_seed``
(:func:`airplay.world.vector_env.task_pool`, the same pool for the same scene and seed), with
instructions generated from their A* paths and the scene's landmarks
(:func:`airplay.vln.episodes.episodes_from_tasks`, personas round-robin). Instruction
generation lives here, above the world layer, so that the environments do not import VLN.
"""

from __future__ import annotations

from pathlib import Path

from airplay.vln.episodes import VLNEpisode, episodes_from_tasks
from airplay.world.vector_env import AirPlayVectorEnv, load_world
from airplay.world.vector_env import make_env as make_world_env
from airplay.world.vector_env import task_pool


def default_episodes(scene, num_tasks: int = 16, task_seed: int = 0,
                     cache_dir: str | Path | None = None) -> list[VLNEpisode]:
    """The default VLN episodes of ``scene`` (a folder or a World): module docstring."""
    world = load_world(scene, None, cache_dir)
    pool = task_pool(world, "goalfree", num_tasks, task_seed)
    return episodes_from_tasks(pool, world.scene.spec.landmarks, int(task_seed))


def with_default_episodes(scene, tasks, num_tasks: int = 16, task_seed: int = 0,
                          cache_dir: str | Path | None = None):
    """``tasks`` with :func:`default_episodes` where none are given: for one scene, when ``tasks``
    is None; for a list of scenes, for each None entry of a per-scene list (all of them when
    ``tasks`` is None). A ``tasks`` of any other shape is returned as it is, for the world
    layer's environments to name what is wrong with it."""
    if not isinstance(scene, (list, tuple)):
        return default_episodes(scene, num_tasks, task_seed, cache_dir) if tasks is None and scene is not None \
            else tasks
    if tasks is None:
        tasks = [None] * len(scene)
    elif not (isinstance(tasks, (list, tuple)) and len(tasks) == len(scene)):
        return tasks
    return [default_episodes(s, num_tasks, task_seed, cache_dir) if t is None else t for s, t in zip(scene, tasks)]


def make_env(scene, setting: str = "vln", *, tasks: list | None = None, num_tasks: int = 16, task_seed: int = 0,
             cache_dir: str | Path | None = None, **kwargs):
    """``gymnasium.make("airplay/VLN-v0", scene=...)``: :func:`airplay.world.vector_env.make_env`
    with the default episodes where ``tasks`` is None (a list of scenes is refused there)."""
    if not isinstance(scene, (list, tuple)):
        tasks = with_default_episodes(scene, tasks, num_tasks, task_seed, cache_dir)
    return make_world_env(scene, setting, tasks=tasks, num_tasks=num_tasks, task_seed=task_seed,
                          cache_dir=cache_dir, **kwargs)


def make_vector_env(num_envs: int = 1, scene=None, setting: str = "vln", *, tasks: list | None = None,
                    num_tasks: int = 16, task_seed: int = 0, cache_dir: str | Path | None = None,
                    **kwargs) -> AirPlayVectorEnv:
    """``gymnasium.make_vec("airplay/VLN-v0", num_envs=N, scene=...)``: :class:`AirPlayVectorEnv`
    with the default episodes for each scene given none."""
    tasks = with_default_episodes(scene, tasks, num_tasks, task_seed, cache_dir)
    return AirPlayVectorEnv(num_envs, scene, setting, tasks=tasks, num_tasks=num_tasks, task_seed=task_seed,
                            cache_dir=cache_dir, **kwargs)
