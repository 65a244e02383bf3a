"""One configuration for airplay's environments: :class:`EnvConfig` (with its :class:`RewardConfig`).

:class:`~airplay.world.env.AirPlayEnv`, :func:`~airplay.world.env_factory.make_env` (``gymnasium.make``) and
:class:`~airplay.world.vector_env.AirPlayVectorEnv` (``gymnasium.make_vec``) all take one
``EnvConfig``, built and checked once here; what they are flown in (a scene or World, the tasks,
the number of vehicles) is passed beside it. Three ways to build one::

    EnvConfig(setting="pointgoal", observations=("depth", "goal"), image_size=64,
              reward=RewardConfig(success=5.0))
    EnvConfig.from_dict(yaml.safe_load(text))                 # YAML or CLI: nested or flat reward keys
    env_config(None, setting="pointgoal", reward_success=5.0)  # keywords, as gymnasium.make passes them

Every constructor also takes the keywords themselves (``AirPlayEnv(world, "pointgoal",
render_images=False)``, ``gymnasium.make("airplay/PointGoal-v0", scene=..., image_size=64)``): they go
through :func:`env_config`, the one place where keywords become a configuration. The flat reward
keywords (``reward_progress``, ``reward_success``, ``reward_collision``, ``progress``) fill
:attr:`EnvConfig.reward`.

A bad value raises ValueError naming the field and the value. Two fields leave the default to the
constructor: ``observations`` None (every key for ``AirPlayEnv``; rgb, depth and the goal, or the
instruction, for the registered ids) and ``task_order`` None ("cycle" for ``AirPlayEnv``; the
registered ids draw at random, the only order they fly).

Units and frames: images are pixels (width, height); times are 50 Hz control periods
(``action_repeat``); rewards are per metre of progress (``reward.progress_weight``) and per
episode end (``reward.success``, ``reward.collision``); a disturbance's vectors are map ENU m/s
(:mod:`airplay.sim.disturbance`).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from airplay.render.api import Backend
from airplay.sim.disturbance import Disturbance
from airplay.tasks.sampler import SETTINGS
from airplay.world.geodesic import check_progress

SUCCESS_REWARD = 10.0
FAILURE_REWARD = -10.0
OBSERVATION_KEYS = ("rgb", "depth", "state", "goal")
"""What ``observations`` may name ("goal": the goal vector or goal image of the setting)."""
INSTRUCTION_KEY = "instruction"
"""The VLN setting's observation key: the episode's instruction (a Text space)."""
TASK_ORDERS = ("cycle", "random")
GYM_SETTINGS = SETTINGS + ("vln",)
"""The settings of the registered ids: the protocol's three and VLN."""
RENDER_BACKENDS = typing.get_args(Backend)
RENDER_MODES = (None, "rgb_array")
FLAT_REWARD_KEYS = {"reward_progress": "progress_weight", "reward_success": "success",
                    "reward_collision": "collision", "progress": "progress"}
"""The keyword names of :class:`RewardConfig`'s fields (``gymnasium.make``'s options, the CLI's)."""


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def observation_keys(observations: Sequence[str] | None, setting: str) -> tuple[str, ...]:
    """The observation dict's keys for ``observations`` (None: all of them) in ``setting``;
    ValueError naming ``observations`` for an unknown key, a repeated one, an empty list or a
    goal asked of a goal-free setting."""
    goal_key = {"pointgoal": "goal", "imagegoal": "goal_image"}.get(setting)
    if observations is None:
        return ("rgb", "depth", "state") + ((goal_key,) if goal_key else ())
    if isinstance(observations, str) or not isinstance(observations, Sequence):
        raise ValueError(f"observations must be a list of keys from {', '.join(OBSERVATION_KEYS)}, "
                         f"got {observations!r}")
    names = list(observations)
    for name in names:
        if name not in OBSERVATION_KEYS:
            raise ValueError(f"observations: unknown key {name!r}; choose from {', '.join(OBSERVATION_KEYS)}")
    if len(set(names)) != len(names) or not names:
        raise ValueError(f"observations must name each key once and at least one, got {names!r}")
    if "goal" in names and goal_key is None:
        raise ValueError(f"observations: {setting!r} tasks withhold the goal; leave 'goal' out")
    return tuple(goal_key if name == "goal" else name for name in names)


def split_observations(observations: Sequence[str] | None) -> tuple[tuple[str, ...], bool]:
    """(the image/state keys, whether the instruction is asked for) from a VLN ``observations``
    list (None: rgb, depth and the instruction). ValueError naming ``observations``."""
    if observations is None:
        return ("rgb", "depth"), True
    if isinstance(observations, str) or not isinstance(observations, Sequence):
        raise ValueError(f"observations must be a list of keys from rgb, depth, state, {INSTRUCTION_KEY}, "
                         f"got {observations!r}")
    names = list(observations)
    if "goal" in names:
        raise ValueError("observations: VLN withholds the goal (the instruction describes the route); "
                         "leave 'goal' out")
    rest = tuple(n for n in names if n != INSTRUCTION_KEY)
    if not rest:
        raise ValueError(f"observations must name at least one of rgb, depth, state besides "
                         f"{INSTRUCTION_KEY!r}, got {names!r}")
    return rest, INSTRUCTION_KEY in names


def check_reward_weights(reward_progress: float, reward_success: float, reward_collision: float) -> None:
    """ValueError naming the weight that is not a finite number."""
    for name, value in (("reward_progress", reward_progress), ("reward_success", reward_success),
                        ("reward_collision", reward_collision)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
                or not np.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")


def check_action_repeat(action_repeat) -> int:
    """``action_repeat`` as an int; ValueError naming it unless it is an integer >= 1."""
    if not _is_int(action_repeat) or action_repeat < 1:
        raise ValueError(f"action_repeat must be an integer >= 1 (control periods per step), got {action_repeat!r}")
    return int(action_repeat)


def image_size_of(image_size) -> tuple[int, int] | None:
    """(width, height) from an int (square) or a (width, height) pair; None stays None.
    ValueError naming ``image_size`` otherwise."""
    if image_size is None:
        return None
    size = (image_size, image_size) if isinstance(image_size, (int, np.integer)) else image_size
    try:
        w, h = size
    except (TypeError, ValueError):
        raise ValueError(f"image_size must be an int or a (width, height) pair, got {image_size!r}") from None
    for v in (w, h):
        if not _is_int(v) or v < 1:
            raise ValueError(f"image_size must be >= 1 pixel (an int or a (width, height) pair), got {image_size!r}")
    return int(w), int(h)


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """The reward (for RL users; evaluation uses the metrics, not the reward), per step:
    ``progress_weight`` x the progress towards the goal in metres, plus ``success`` on success and
    ``collision`` on a collision or on leaving the navigable region.

    Fields:
        progress_weight: weight of the progress term, per metre (keyword ``reward_progress``).
        success: added at the step an episode succeeds (keyword ``reward_success``; default +10).
        collision: added at the step an episode collides or leaves the region (keyword
            ``reward_collision``; default -10).
        progress: how progress is measured: "euclidean", the drop in straight-line distance each
            control period, or "geodesic", the drop over the step of the goal's cost-to-go around
            obstacles (:mod:`airplay.world.geodesic`).
    """

    progress_weight: float = 1.0
    success: float = SUCCESS_REWARD
    collision: float = FAILURE_REWARD
    progress: str = "euclidean"

    def __post_init__(self) -> None:
        check_reward_weights(self.progress_weight, self.success, self.collision)
        check_progress(self.progress)
        for name in ("progress_weight", "success", "collision"):
            object.__setattr__(self, name, float(getattr(self, name)))

    @classmethod
    def from_dict(cls, values: Mapping) -> RewardConfig:
        """From the field names or the flat keywords (:data:`FLAT_REWARD_KEYS`); ValueError naming an
        unknown key."""
        fields = {f.name for f in dataclasses.fields(cls)}
        out = {}
        for key, value in dict(values).items():
            name = FLAT_REWARD_KEYS.get(key, key)
            if name not in fields:
                raise ValueError(f"reward: unknown key {key!r}; choose from {', '.join(sorted(fields))}")
            out[name] = value
        return cls(**out)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """How an airplay environment behaves (module docstring); checked when built.

    Fields:
        setting: "pointgoal", "imagegoal", "goalfree" or "vln" (the last only for ``make_env`` and the
            vector environment: goal-free tasks with an instruction).
        observations: the observation keys, from "rgb", "depth", "state" (13 floats: position m map
            ENU, quaternion x y z w of base_link in map, velocity m/s map, body rates rad/s FLU) and
            "goal" (PointGoal: the goal in the heading frame, m; ImageGoal: the goal image), plus
            "instruction" for "vln"; None: the constructor's default (module docstring).
        image_size: the camera's (width, height) in pixels, an int for a square (same field of view);
            None: the scene camera's size.
        num_tasks: tasks sampled by the protocol per scene where none are given (>= 1).
        task_seed: the seed of that sampling.
        task_order: "cycle" (``AirPlayEnv.reset`` takes the tasks in order; a reset seed re-samples them)
            or "random" (each reset draws one with the environment's seeded generator); None: the
            constructor's default.
        render_backend: "auto", "cpu" or "gsplat".
        render_images: False skips RGB and depth (zero images) for state-only uses (``AirPlayEnv``).
        render_mode: None or "rgb_array" (``render()`` gives the last camera image).
        action_repeat: 50 Hz control periods each step applies its action for (>= 1).
        reward: the reward's weights and progress measure (:class:`RewardConfig`).
        disturbance: wind, gusts or a velocity impulse on the vehicle (map ENU m/s,
            :mod:`airplay.sim.disturbance`; None: none; ``AirPlayEnv`` only). A text is parsed.
        disturbance_seed: seeds the gusts and the vehicle's position-estimate error, with the task's id.
        cache_dir: where a scene folder's caches (SDF, level-of-detail tree) go (None: airplay's).
        threads: render threads of the vector environment (None: the CPUs this process may use); the
            images do not depend on it, and the single environment does not use it.
    """

    setting: str = "pointgoal"
    observations: tuple[str, ...] | None = None
    image_size: tuple[int, int] | None = None
    num_tasks: int = 16
    task_seed: int = 0
    task_order: str | None = None
    render_backend: str = "auto"
    render_images: bool = True
    render_mode: str | None = None
    action_repeat: int = 1
    reward: RewardConfig = RewardConfig()
    disturbance: Disturbance | None = None
    disturbance_seed: int = 0
    cache_dir: str | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        def put(name, value):
            object.__setattr__(self, name, value)

        if self.setting not in GYM_SETTINGS:
            raise ValueError(f"unknown setting {self.setting!r}; choose one of {', '.join(GYM_SETTINGS)}")
        if self.observations is not None:
            if self.setting == "vln":
                split_observations(self.observations)
            else:
                observation_keys(self.observations, self.setting)
            put("observations", tuple(self.observations))
        put("image_size", image_size_of(self.image_size))
        if not _is_int(self.num_tasks) or self.num_tasks < 1:
            raise ValueError(f"num_tasks must be an integer >= 1, got {self.num_tasks!r}")
        put("num_tasks", int(self.num_tasks))
        if not _is_int(self.task_seed):
            raise ValueError(f"task_seed must be an integer, got {self.task_seed!r}")
        put("task_seed", int(self.task_seed))
        if self.task_order is not None and self.task_order not in TASK_ORDERS:
            raise ValueError(f"task_order must be one of {', '.join(TASK_ORDERS)}, got {self.task_order!r}")
        if self.render_backend not in RENDER_BACKENDS:
            raise ValueError(f"render_backend must be one of {', '.join(RENDER_BACKENDS)}, "
                             f"got {self.render_backend!r}")
        if not isinstance(self.render_images, (bool, np.bool_)):
            raise ValueError(f"render_images must be True or False, got {self.render_images!r}")
        put("render_images", bool(self.render_images))
        if self.render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {self.render_mode!r}")
        put("action_repeat", check_action_repeat(self.action_repeat))
        if isinstance(self.reward, Mapping):
            put("reward", RewardConfig.from_dict(self.reward))
        elif not isinstance(self.reward, RewardConfig):
            raise ValueError(f"reward must be a RewardConfig or a dict of its fields, got {self.reward!r}")
        if isinstance(self.disturbance, str):
            put("disturbance", Disturbance.parse(self.disturbance))
        elif self.disturbance is not None and not isinstance(self.disturbance, Disturbance):
            raise ValueError(f"disturbance must be a Disturbance, its text or None, got {self.disturbance!r}")
        if not _is_int(self.disturbance_seed):
            raise ValueError(f"disturbance_seed must be an integer, got {self.disturbance_seed!r}")
        put("disturbance_seed", int(self.disturbance_seed))
        if self.cache_dir is not None:
            if not isinstance(self.cache_dir, (str, Path)):
                raise ValueError(f"cache_dir must be a folder or None, got {self.cache_dir!r}")
            put("cache_dir", str(self.cache_dir))
        if self.threads is not None:
            if not _is_int(self.threads) or self.threads < 1:
                raise ValueError(f"threads must be an integer >= 1, got {self.threads!r}")
            put("threads", int(self.threads))

    @classmethod
    def from_dict(cls, values: Mapping) -> EnvConfig:
        """From a dict (YAML, CLI, keywords): the field names, with the reward as a nested dict under
        ``reward`` and/or as the flat keywords of :data:`FLAT_REWARD_KEYS`. ValueError naming an
        unknown key."""
        if not isinstance(values, Mapping):
            raise ValueError(f"an environment configuration must be a mapping of its fields, got {values!r}")
        fields = {f.name for f in dataclasses.fields(cls)}
        out, reward = {}, {}
        for key, value in values.items():
            if key in FLAT_REWARD_KEYS:
                reward[FLAT_REWARD_KEYS[key]] = value
            elif key in fields:
                out[key] = value
            else:
                raise ValueError(f"unknown environment option {key!r}; choose from "
                                 f"{', '.join(sorted(fields | set(FLAT_REWARD_KEYS)))}")
        if reward:
            base = out.get("reward", RewardConfig())
            base = dataclasses.asdict(base) if isinstance(base, RewardConfig) else dict(base)
            out["reward"] = RewardConfig.from_dict({**base, **reward})
        return cls(**out)

    def to_dict(self) -> dict:
        """Plain values (the reward nested, a disturbance as its text): ``from_dict`` gives this back."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["reward"] = dataclasses.asdict(self.reward)
        out["observations"] = None if self.observations is None else list(self.observations)
        out["image_size"] = None if self.image_size is None else list(self.image_size)
        out["disturbance"] = None if self.disturbance is None else self.disturbance.to_text()
        return out

    def replace(self, **options) -> EnvConfig:
        """A copy with ``options`` (field names or the flat reward keywords) changed, checked again."""
        if not options:
            return self
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return EnvConfig.from_dict({**values, **options})


def env_config(config: EnvConfig | Mapping | str | None = None, **options) -> EnvConfig:
    """The one place keywords become an :class:`EnvConfig`: ``config`` (an EnvConfig, a dict for
    :meth:`EnvConfig.from_dict`, a setting's name, or None for the defaults) with ``options``
    (field names or flat reward keywords) on top."""
    if isinstance(config, EnvConfig):
        return config.replace(**options)
    if config is None:
        return EnvConfig.from_dict(options)
    if isinstance(config, str):
        if "setting" in options:
            raise ValueError(f"setting given twice: {config!r} and {options['setting']!r}")
        return EnvConfig.from_dict({"setting": config, **options})
    if isinstance(config, Mapping):
        return EnvConfig.from_dict({**config, **options})
    raise ValueError(f"config must be an EnvConfig, a dict of its fields or a setting's name, got {config!r}")
