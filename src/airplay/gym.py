"""airplay's Gymnasium environments, registered on import.

    import gymnasium as gym
    import airplay.gym  # noqa: F401  (or gym.make("airplay.gym:airplay/PointGoal-v0", ...))

    env = gym.make("airplay/PointGoal-v0", scene="path/to/scene", image_size=64)
    envs = gym.make_vec("airplay/PointGoal-v0", num_envs=16, scene="path/to/scene", image_size=64)

Ids: ``airplay/PointGoal-v0``, ``airplay/ImageGoal-v0``, ``airplay/GoalFree-v0`` and
``airplay/VLN-v0`` (goal-free tasks with an instruction, a Text observation:
:mod:`airplay.world.vln_env`, entry points :mod:`airplay.vln.gym_env`). ``make`` builds
:func:`airplay.world.env_factory.make_env` (one vehicle, :class:`AirPlayEnv`); ``make_vec`` builds
:class:`airplay.world.vector_env.AirPlayVectorEnv` (its ``vector_entry_point``: N vehicles
stepped and rendered as one batch, ``scene`` one scene or a list of scenes) unless another
``vectorization_mode`` ("sync", "async") is asked for. Keyword options, besides ``scene`` and
``tasks``, are the fields of :class:`airplay.world.env_config.EnvConfig` (image_size, observations,
num_tasks, task_seed, render_backend, action_repeat: control periods per step, threads: the vector
environment's render threads, ...) and the flat reward keywords (reward_progress, reward_success,
reward_collision, progress), made into one ``EnvConfig`` in one place
(:func:`airplay.world.env_config.env_config`); ``config=EnvConfig(...)`` passes a whole one. Episode
limits are the protocol's (config/protocol.yaml), so no ``max_episode_steps`` is set.
"""

from __future__ import annotations

import gymnasium

from airplay.world.env_config import EnvConfig, RewardConfig
from airplay.world.env_factory import make_env
from airplay.world.vector_env import AirPlayVectorEnv, make_vector_env

ENV_IDS = {"airplay/PointGoal-v0": "pointgoal", "airplay/ImageGoal-v0": "imagegoal",
           "airplay/GoalFree-v0": "goalfree", "airplay/VLN-v0": "vln"}
"""The registered ids and their task settings."""


def register() -> None:
    """Register :data:`ENV_IDS` with Gymnasium (again: the latest registration wins)."""
    for env_id, setting in ENV_IDS.items():
        if env_id in gymnasium.registry:
            continue
        # VLN-v0's entry points add the default episodes (instructions are made above the world layer)
        if setting == "vln":
            entry, vector_entry = "airplay.vln.gym_env:make_env", "airplay.vln.gym_env:make_vector_env"
        else:
            entry, vector_entry = "airplay.world.env_factory:make_env", "airplay.world.vector_env:make_vector_env"
        gymnasium.register(env_id, entry_point=entry, vector_entry_point=vector_entry,
                           kwargs={"setting": setting}, disable_env_checker=False)


register()

__all__ = ["ENV_IDS", "AirPlayVectorEnv", "EnvConfig", "RewardConfig", "make_env", "make_vector_env", "register"]
