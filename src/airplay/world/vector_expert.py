"""The field expert's command for every sub-environment of an :class:`AirPlayVectorEnv`.

:class:`~airplay.tasks.field_expert.FieldExpert` answers from a vehicle's position and heading
and its goal alone (no hidden state, no plan in time), so one expert per scene can label all of
that scene's sub-environments in any order: :meth:`VectorFieldExpert.commands` reads the
vehicles' positions and quaternions (:meth:`AirPlayVectorEnv.vehicle_poses`; the heading is the
quaternion's yaw, as the single expert reads it) and goals (:attr:`AirPlayVectorEnv.goals`), and
gives each row the command the single-vehicle field expert gives for that state. For
demonstrations and warm starts on the vector environment (``examples/ppo_pointgoal.py
--expert-decisions``, :mod:`airplay.rl.warmstart`). rclpy-free.

Commands: (N, 4) float32 ``[vx forward, vy left, vz up, yaw_rate]`` in each vehicle's heading
frame (m/s, rad/s CCW), the environment's action convention.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from airplay.frames import yaw_from_quat_xyzw
from airplay.tasks.field_expert import FieldExpert, FieldExpertSettings
from airplay.world.geodesic import FIELDS_PER_SCENE
from airplay.world.vector_env import AirPlayVectorEnv


class VectorFieldExpert:
    """One :class:`FieldExpert` per scene of ``venv``, each keeping the cost-to-go fields of as many
    goals as the environment's geodesic reward keeps (:data:`FIELDS_PER_SCENE`, at least
    ``2 x num_envs``): a field is built once per goal of a task pool, then reused.

    Args:
        venv: the vector environment whose sub-environments to label.
        settings: the experts' tuning (default :class:`FieldExpertSettings`); its ``field_cache``
            is raised to that number where it is smaller.
    """

    def __init__(self, venv: AirPlayVectorEnv, settings: FieldExpertSettings | None = None) -> None:
        if not isinstance(venv, AirPlayVectorEnv):
            raise ValueError(f"venv must be an AirPlayVectorEnv, got {type(venv).__name__}")
        settings = settings if settings is not None else FieldExpertSettings()
        settings = replace(settings, field_cache=max(settings.field_cache, FIELDS_PER_SCENE, 2 * venv.num_envs))
        self.venv = venv
        self.experts = [FieldExpert(w.grid, w.sdf, w.vehicle, settings) for w in venv.worlds]

    def commands(self) -> np.ndarray:
        """(N, 4) float32: the field expert's command for each sub-environment's vehicle now."""
        venv = self.venv
        pos, quat = venv.vehicle_poses()
        goals = venv.goals
        out = np.empty((venv.num_envs, 4), np.float32)
        for i in range(venv.num_envs):
            expert = self.experts[int(venv.scene_of[i])]
            expert.set_goal(goals[i])
            out[i] = expert.command(pos[i], yaw_from_quat_xyzw(quat[i]))[0]  # as FieldExpert.act_on_state
        return out
