"""``AirPlayVLNEnv``: vision-language navigation as a Gymnasium environment (``airplay/VLN-v0``).

A goal-free :class:`~airplay.world.env.AirPlayEnv` (the goal is withheld) whose observation
also holds the episode's instruction: ``instruction``, a :class:`gymnasium.spaces.Text` of
:data:`INSTRUCTION_CHARSET` (printable ASCII and any other character the episodes'
instructions use), at most :data:`INSTRUCTION_MAX_CHARS` characters (or the longest
instruction, if longer). Episodes are :class:`airplay.vln.episodes.VLNEpisode`: by default the
protocol's goal-free tasks with instructions generated from their A* paths and the scene's
landmarks (:func:`airplay.vln.episodes.episodes_from_tasks`, personas round-robin), or given.

Actions, rewards and ends are the other registered ids': continuous velocity commands, the
reward for progress towards the (withheld) goal, and success on entering the protocol's
success radius. The AirNav rule of ``airplay eval --setting vln`` (success only where the
navigator says STOP within the radius, discrete actions) is not this environment's.
"""

from __future__ import annotations

import string
from collections.abc import Sequence

import gymnasium as gym

from airplay.tasks.sampler import Task
from airplay.world.env import AirPlayEnv
from airplay.world.env_config import INSTRUCTION_KEY, EnvConfig, env_config, split_observations  # noqa: F401

INSTRUCTION_MAX_CHARS = 1024
"""The Text space's length limit, unless an instruction is longer."""
INSTRUCTION_CHARSET = "".join(sorted(set(string.printable) - set("\t\n\r\x0b\x0c") | {"\n"}))
"""Printable ASCII and the newline (an episode's other characters are added to its space)."""


def instruction_space(instructions: Sequence[str]) -> gym.spaces.Text:
    """The Text space for ``instructions``: :data:`INSTRUCTION_CHARSET` plus their other
    characters, up to :data:`INSTRUCTION_MAX_CHARS` (or the longest)."""
    extra = set("".join(instructions)) - set(INSTRUCTION_CHARSET)
    longest = max((len(s) for s in instructions), default=1)
    return gym.spaces.Text(max(INSTRUCTION_MAX_CHARS, longest), min_length=1,
                           charset="".join(sorted(set(INSTRUCTION_CHARSET) | extra)))


def vln_tasks(episodes, protocol) -> tuple[list[Task], list[str]]:
    """The environment's tasks (goal-free, the protocol's time limit for each reference
    path) and instructions for ``episodes`` (:class:`~airplay.vln.episodes.VLNEpisode`)."""
    tasks, texts = [], []
    for i, ep in enumerate(episodes):
        text = getattr(ep, "instruction", None)
        if not isinstance(text, str) or not text:
            raise ValueError(f"tasks[{i}] must be a VLNEpisode with a non-empty instruction, got {ep!r}")
        tasks.append(ep.to_task(protocol.time_limit_s(ep.astar_length_m)))
        texts.append(text)
    return tasks, texts


class AirPlayVLNEnv(AirPlayEnv):
    """A goal-free :class:`AirPlayEnv` whose observations also hold the instruction (module docstring).

    Args:
        world: a :class:`~airplay.world.World` or a scene folder.
        tasks: the episodes' tasks (goal-free); each ``reset`` draws one with the seeded generator.
        instructions: one per task (the same order), or a dict task_id -> text.
        with_instruction: False leaves ``instruction`` out of the observations.
        config, options: :class:`AirPlayEnv`'s (``observations`` without the instruction); the setting
            is "goalfree" and the tasks are drawn at random.
    """

    def __init__(self, world, tasks: list[Task], instructions, with_instruction: bool = True,
                 config: EnvConfig | None = None, **options) -> None:
        config = env_config(config, **options).replace(setting="goalfree", task_order="random")
        super().__init__(world, config, tasks=list(tasks))
        if isinstance(instructions, dict):
            self._texts = dict(instructions)
        else:
            if len(tasks) != len(instructions):
                raise ValueError(f"instructions: {len(instructions)} for {len(tasks)} tasks")
            self._texts = {t.task_id: s for t, s in zip(tasks, instructions)}
        self.with_instruction = bool(with_instruction)
        if self.with_instruction:
            self.observation_space = gym.spaces.Dict(
                {**self.observation_space.spaces, INSTRUCTION_KEY: instruction_space(list(self._texts.values()))})

    @property
    def instruction(self) -> str:
        """The current episode's instruction."""
        if self.task is None:
            raise RuntimeError("call reset() first")
        try:
            return self._texts[self.task.task_id]
        except KeyError:
            raise ValueError(f"options['task']: no instruction for task_id {self.task.task_id!r}") from None

    def _with(self, obs: dict) -> dict:
        if self.with_instruction:
            obs[INSTRUCTION_KEY] = self.instruction
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return self._with(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return self._with(obs), reward, terminated, truncated, info
