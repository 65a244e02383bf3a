"""What the registered environments are built from: worlds and task pools kept per process, and
:func:`make_env`, the entry point of ``gymnasium.make("airplay/...")``.

A scene folder is loaded once per process (:func:`load_world`) and its protocol tasks sampled once
per setting, count and seed (:func:`task_pool`), so that many environments over one scene share
them; :class:`~airplay.world.vector_env.AirPlayVectorEnv` builds its rows from the same pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from threading import Lock

import numpy as np

from airplay.tasks.sampler import SETTINGS, Task, sample_tasks
from airplay.world.env import AirPlayEnv
from airplay.world.env_config import EnvConfig, env_config, image_size_of, split_observations
from airplay.world.vln_env import AirPlayVLNEnv, vln_tasks
from airplay.world.world import World

DEFAULT_OBSERVATIONS = ("rgb", "depth", "goal")
"""The registered environments' default keys ("goal" left out for goal-free tasks; the state
only where asked for)."""

_WORLDS: dict = {}
_TASKS: dict = {}
_CACHE_LOCK = Lock()


def gym_observations(observations: Sequence[str] | None, setting: str) -> tuple[str, ...]:
    """``observations`` for the registered environments: None gives :data:`DEFAULT_OBSERVATIONS`
    (without "goal" for goal-free tasks; rgb, depth and the instruction for "vln")."""
    if observations is None:
        if setting == "vln":
            return ("rgb", "depth", "instruction")
        return tuple(k for k in DEFAULT_OBSERVATIONS if k != "goal" or setting != "goalfree")
    return observations


def load_world(scene, image_size=None, cache_dir: str | Path | None = None) -> World:
    """A :class:`World` from ``scene`` (a World, or a scene folder: loaded once per process and
    kept, with its caches under ``cache_dir``), its camera at ``image_size`` (pixels: an int or
    (width, height)). ValueError naming ``scene`` when it does not load."""
    size = image_size_of(image_size)
    if isinstance(scene, World):
        world = scene
    elif isinstance(scene, (str, Path)):
        key = (str(Path(scene).resolve()), None if cache_dir is None else str(Path(cache_dir).resolve()))
        with _CACHE_LOCK:
            world = _WORLDS.get(key)
            if world is None:
                try:
                    world = World.load(scene, cache_dir=cache_dir)
                except (OSError, ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"scene {str(scene)!r} does not load: {e}") from e
                _WORLDS[key] = world
    else:
        raise ValueError(f"scene must be a scene folder or a World, got {scene!r}")
    return world if size is None else world.with_camera_size(*size)


def task_pool(world: World, setting: str, num_tasks: int = 16, task_seed: int = 0) -> list[Task]:
    """The protocol's tasks for ``world`` (``num_tasks`` sampled with ``task_seed``), sampled once
    per process for each scene, setting, count and seed (the sampler plans A* paths: ~0.1 s a task)."""
    if setting not in SETTINGS:
        raise ValueError(f"unknown setting {setting!r}; choose one of {', '.join(SETTINGS)}")
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, (int, np.integer)) or num_tasks < 1:
        raise ValueError(f"num_tasks must be an integer >= 1, got {num_tasks!r}")
    key = (id(world.scene.spec), world.scene.name, id(world.protocol), setting, int(num_tasks), int(task_seed))
    with _CACHE_LOCK:
        entry = _TASKS.get(key)
        if entry is None or entry[0] is not world.scene.spec:
            tasks = sample_tasks(world.scene, world.grid, int(num_tasks), int(task_seed), setting, world.protocol)
            entry = _TASKS[key] = (world.scene.spec, tasks)
    return list(entry[1])


def scene_tasks(world: World, config: EnvConfig, tasks=None) -> tuple[list[Task], list[str] | None]:
    """The tasks of one scene and, for "vln", their instructions (else None): ``tasks`` as given
    (for "vln": :class:`~airplay.vln.episodes.VLNEpisode` s, which ``airplay/VLN-v0``'s entry
    points in :mod:`airplay.vln.gym_env` make when none are given), or the protocol's
    ``config.num_tasks`` sampled with ``config.task_seed``."""
    if config.setting != "vln":
        if tasks is not None:
            return list(tasks), None
        return task_pool(world, config.setting, config.num_tasks, config.task_seed), None
    if tasks is None:
        raise ValueError("tasks: the vln setting flies given VLN episodes; gymnasium.make('airplay/VLN-v0') "
                         "(airplay.vln.gym_env) makes the default ones")
    return vln_tasks(list(tasks), world.protocol)


def gym_config(config: EnvConfig) -> EnvConfig:
    """``config`` as the registered environments fly it: their default observations, tasks drawn at
    random per episode. ValueError naming ``task_order`` for "cycle"."""
    if config.task_order == "cycle":
        raise ValueError("task_order: the registered environments draw a task per episode ('random'); "
                         "'cycle' is AirPlayEnv's")
    return config.replace(observations=gym_observations(config.observations, config.setting), task_order="random")


def single_env(world: World, config: EnvConfig, tasks: list[Task], texts: list[str] | None) -> AirPlayEnv:
    """The one-vehicle environment of ``config`` (a :func:`gym_config`) over ``tasks`` (drawn at
    random per episode), with ``texts`` the instructions of "vln"."""
    if config.setting == "vln":
        keys, with_instruction = split_observations(config.observations)
        return AirPlayVLNEnv(world, tasks, texts, with_instruction, config.replace(setting="goalfree",
                                                                                   observations=keys))
    return AirPlayEnv(world, config, tasks=tasks)


def make_env(scene, config: EnvConfig | str | None = None, *, tasks: list | None = None, **options) -> AirPlayEnv:
    """One vehicle: the environment ``gymnasium.make("airplay/PointGoal-v0", scene=...)`` builds.

    Args:
        scene: a scene folder (kept per process: many environments share its World) or a
            :class:`World` (``gymnasium.make`` cannot copy one into the spec: a checker that
            remakes the environment from its spec needs the folder).
        config: an :class:`~airplay.world.env_config.EnvConfig`, or the setting's name ("pointgoal",
            "imagegoal", "goalfree" or "vln": :class:`AirPlayVLNEnv`); ``options`` (its field names, or
            the flat reward keywords ``reward_progress``, ``reward_success``, ``reward_collision``,
            ``progress``) change it. Default observations: rgb, depth and the goal, or the instruction.
        tasks: the episodes' tasks (for "vln": VLNEpisode s; default: ``num_tasks`` sampled by the
            protocol with ``task_seed``); each ``reset`` draws one with the environment's seeded generator.

    Episodes end as the protocol says (success radius, collision, bounds, the task's time limit).
    """
    if isinstance(scene, (list, tuple)):
        raise ValueError("scene: gymnasium.make builds one environment from one scene; a list of scenes is for "
                         "gymnasium.make_vec / AirPlayVectorEnv")
    config = gym_config(env_config(config, **options))
    world = load_world(scene, config.image_size, config.cache_dir)
    tasks, texts = scene_tasks(world, config, tasks)
    return single_env(world, config, tasks, texts)
