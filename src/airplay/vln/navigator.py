"""AirVLN-R1 behind airplay's policy contract (``make_policy("airvln_r1", ...)``).

``reset(task)`` reads the instruction (``task.instruction``, a :class:`~airplay.vln.episodes.VLNEpisode`;
or later ``obs["instruction"]``, as the policy node gets it on the ``instruction`` topic).
``select_action(obs)`` returns one 50 Hz ``[vx, vy, vz, yaw_rate]`` command (heading frame, m/s
and rad/s). Each *step* starts one discrete action: when no action is queued it asks the
backend (one model call: the AirNav prompt with the pose, past actions, history views and the
current view) for up to 8 actions and queues them; the executor
(:mod:`airplay.vln.action_executor`) flies each through the safety supervisor. A malformed answer is
a format failure: counted, the vehicle hovers for ``hold_s`` and the model is asked again.
STOP, or the step budget (``max_steps``, 160; actions and format failures count), ends the
episode: ``done`` becomes True (``stop_reason`` "stop" or "budget") and the policy hovers.

Between actions the navigator spends one control period hovering and reading a fresh image
(``wants_image``): a runner that renders only when asked (the in-process VLN runner) renders at
action boundaries only, which is all AirVLN-R1 looks at.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from airplay.frames import yaw_of_state
from airplay.policies.base import Policy, PolicyConfig
from airplay.vln.action_executor import HOVER, ActionExecutor
from airplay.vln.actions import ActionSpace, VLNConfig, load_vln_config
from airplay.vln.parsing import parse_actions
from airplay.vln.prompt import DEFAULT_HISTORY_OFFSETS, PromptBuilder


class AirVLNNavigator(Policy):
    """The AirVLN-R1 policy (see the module docstring).

    backend: a :mod:`airplay.vln.backends` backend; actions: the scene's action space (default
    from ``config/vln.yaml`` at scale ``s``); history_offsets: progressive interval sampling;
    image_size: (width, height) of the views sent to the model (None: as rendered).
    """

    name = "airvln_r1"
    privileged = False

    def __init__(self, backend, actions: ActionSpace | None = None, vln_config: VLNConfig | None = None,
                 vehicle=None, history_offsets: tuple[int, ...] = DEFAULT_HISTORY_OFFSETS,
                 image_size: tuple[int, int] | None = None) -> None:
        super().__init__(PolicyConfig())
        self.vln_config = vln_config or load_vln_config()
        self.actions = actions or self.vln_config.action_space()
        self.backend = backend
        self.prompts = PromptBuilder(self.actions, tuple(history_offsets), image_size)
        self.executor = ActionExecutor(self.actions, vehicle, self.vln_config.executor)
        self.instruction = ""
        self.reset()

    def set_actions(self, actions: ActionSpace) -> None:
        """Use another scene's action space (the runner calls this per scene)."""
        self.actions = actions
        self.prompts = PromptBuilder(actions, self.prompts.history_offsets, self.prompts.image_size)
        self.executor = ActionExecutor(actions, self.executor.vehicle, self.vln_config.executor)

    def reset(self, task=None) -> None:
        super().reset(task)
        self.instruction = str(getattr(task, "instruction", "") or "")
        self.executor.reset()
        self.queue: deque[str] = deque()
        self.frames: list[np.ndarray] = []
        self.past_actions: list[str] = []
        self.steps = 0
        self.queries = 0
        self.format_failures = 0
        self.last_answer = ""
        self.last_error = ""
        self.model_time_s = 0.0
        self.done = False
        self.stop_reason = ""

    @property
    def wants_image(self) -> bool:
        """True when the next ``select_action`` starts a step (and so reads ``obs["rgb"]``)."""
        return not self.executor.busy and not self.done

    def episode_info(self) -> dict:
        """What the episode cost and how the model behaved (for results and logs)."""
        return {"vln_steps": self.steps, "queries": self.queries, "format_failures": self.format_failures,
                "actions": list(self.past_actions), "stop_reason": self.stop_reason,
                "model_time_s": round(self.model_time_s, 4), "interventions": self.executor.interventions}

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        raise NotImplementedError("AirVLN-R1 is closed-loop per action; use select_action")

    def select_action(self, obs: dict) -> np.ndarray:
        state = np.asarray(obs["state"], dtype=np.float64)
        if self.done:
            return HOVER.copy()
        if self.executor.busy:
            cmd = self.executor.step(state)
            if cmd is not None:
                return cmd
            return HOVER.copy()  # action over: hover one period while a fresh view is taken
        if not self.instruction and "instruction" in obs:
            self.instruction = str(obs["instruction"])
        frame = np.asarray(obs["rgb"])
        if self.steps >= self.actions.max_steps:
            self.done, self.stop_reason = True, "budget"
            return HOVER.copy()
        if not self.queue:
            pose = (state[0], state[1], state[2], yaw_of_state(state))
            prompt = self.prompts.build(self.instruction, pose, self.past_actions, self.frames + [frame])
            t0 = time.perf_counter()
            self.last_answer = self.backend.generate(prompt)
            self.model_time_s += time.perf_counter() - t0
            self.queries += 1
            result = parse_actions(self.last_answer, self.actions.names, self.actions.max_actions_per_step)
            if not result.ok:
                self.format_failures += 1
                self.last_error = result.error
                self.steps += 1
                self.frames.append(frame)
                self.executor.hold(self.vln_config.executor.hold_s, state)
                return self.executor.step(state)
            self.queue.extend(result.actions)
        action = self.queue.popleft()
        self.frames.append(frame)
        self.past_actions.append(action)
        self.steps += 1
        if action == "STOP":
            self.done, self.stop_reason = True, "stop"
            self.queue.clear()
            return HOVER.copy()
        self.executor.start(action, state)
        return self.executor.step(state)


def make_airvln_policy(backend: str = "transformers", model: str | None = None, endpoint: str | None = None,
                       device: str = "cpu", served_model: str | None = None, max_new_tokens: int = 64,
                       image_size: tuple[int, int] | None = None, history_offsets=DEFAULT_HISTORY_OFFSETS,
                       vln_config: VLNConfig | None = None, world=None) -> AirVLNNavigator:
    """The navigator with a backend from :func:`airplay.vln.backends.make_backend`; with a
    ``world`` the action space is that scene's (scaled by name/category)."""
    from airplay.vln.backends import make_backend

    be = make_backend(backend, model=model, endpoint=endpoint, device=device, max_new_tokens=max_new_tokens,
                      served_model=served_model)
    return navigator_with_backend(be, world, vln_config, history_offsets, image_size)


def navigator_with_backend(backend, world=None, vln_config: VLNConfig | None = None,
                           history_offsets=DEFAULT_HISTORY_OFFSETS,
                           image_size: tuple[int, int] | None = None) -> AirVLNNavigator:
    """The navigator for ``world`` (its action space and vehicle) around an existing backend
    (the policy node loads the model once, at start-up)."""
    cfg = vln_config or load_vln_config()
    actions = cfg.action_space(world.name, world.scene.spec.category) if world is not None else None
    vehicle = world.vehicle if world is not None else None
    return AirVLNNavigator(backend, actions, cfg, vehicle=vehicle, history_offsets=tuple(history_offsets),
                           image_size=image_size)
