"""Stable-Baselines3 over :class:`~airplay.world.vector_env.AirPlayVectorEnv` (needs the ``rl``
extra: ``pip install -e .[rl]``; nothing else in airplay imports Stable-Baselines3).

    from airplay.rl.sb3 import AirPlaySB3VecEnv
    config = EnvConfig(image_size=64, observations=("depth", "goal"))  # airplay.world.env_config
    venv = AirPlaySB3VecEnv(AirPlayVectorEnv(16, "scenes/indoor_0", config))
    model = stable_baselines3.PPO("MultiInputPolicy", venv)

:class:`AirPlaySB3VecEnv` is SB3's ``VecEnv`` API on the batched environment: SB3 resets a
sub-environment in the step where its episode ends (the last observation goes to
``infos[i]["terminal_observation"]``, a timeout sets ``infos[i]["TimeLimit.truncated"]``),
where Gymnasium's vector API resets it on the next step; the adapter restarts the ended
sub-environments at once (:meth:`AirPlayVectorEnv.restart`), drawing the same tasks in the same
order as the vector environment's autoreset would. With ``normalize_actions`` (the default)
actions are in [-1, 1] and scaled to the vehicle's command limits, as SB3 advises for PPO.

:class:`DepthGoalExtractor` is SB3's features extractor around
:class:`airplay.policies.ppo_depth.DepthGoalEncoder`, so that a trained actor exports into an
airplay ``ppo_depth`` checkpoint (:func:`export_ppo_depth`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import numpy as np
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.vec_env.base_vec_env import VecEnv

from airplay.policies.ppo_depth import DepthGoalEncoder, PPODepthConfig, PPODepthPolicy
from airplay.world.vector_env import AirPlayVectorEnv


def _rows(num_envs: int, indices) -> list[int]:
    if indices is None:
        return list(range(num_envs))
    if isinstance(indices, (int, np.integer)):
        return [int(indices)]
    return [int(i) for i in indices]


class AirPlaySB3VecEnv(VecEnv):
    """SB3's ``VecEnv`` over an :class:`AirPlayVectorEnv` (module docstring).

    Args:
        venv: the vector environment (its observations are SB3's: a dict of batched arrays).
        normalize_actions: actions in [-1, 1], scaled to the environment's action space.
        command_low, command_high: with ``normalize_actions``, the commands [vx, vy, vz, yaw_rate]
            (m/s, rad/s, heading frame) that -1 and +1 map to, inside the environment's action
            space (default: its bounds). A smaller envelope makes PPO's early exploration fly
            slower; a ``ppo_depth`` policy exported from the model needs the same values as its
            ``action_low`` / ``action_high``.
    """

    def __init__(self, venv: AirPlayVectorEnv, normalize_actions: bool = True, command_low=None,
                 command_high=None) -> None:
        if not isinstance(venv, AirPlayVectorEnv):
            raise ValueError(f"venv must be an AirPlayVectorEnv, got {type(venv).__name__}")
        if "instruction" in venv.single_observation_space.spaces:
            raise ValueError("observations: SB3's VecEnv takes arrays, not the VLN instruction (a Text space); "
                             "leave 'instruction' out of observations")
        self.venv = venv
        space = venv.single_action_space
        self.normalize_actions = bool(normalize_actions)
        self._low = space.low.astype(np.float64)
        self._high = space.high.astype(np.float64)
        for name, value in (("command_low", command_low), ("command_high", command_high)):
            if value is None:
                continue
            v = np.asarray(value, dtype=np.float64)
            if v.shape != space.shape or not np.all(np.isfinite(v)):
                raise ValueError(f"{name} must be {space.shape[0]} finite numbers [vx, vy, vz, yaw_rate], "
                                 f"got {value!r}")
            if np.any(v < space.low - 1e-6) or np.any(v > space.high + 1e-6):
                raise ValueError(f"{name} {v.tolist()} is outside the environment's action space "
                                 f"[{space.low.tolist()}, {space.high.tolist()}]")
            setattr(self, "_low" if name == "command_low" else "_high", v)
        if not np.all(self._low < self._high):
            raise ValueError(f"command_low {self._low.tolist()} must be below command_high {self._high.tolist()} "
                             "in every component")
        action_space = gymnasium.spaces.Box(-1.0, 1.0, space.shape, np.float32) if self.normalize_actions else space
        super().__init__(venv.num_envs, venv.single_observation_space, action_space)
        self.render_mode = venv.render_mode
        self._actions: np.ndarray | None = None

    @property
    def command_low(self) -> np.ndarray:
        """The commands (4,) [vx, vy, vz, yaw_rate] that action -1 maps to (m/s, rad/s)."""
        return self._low.copy()

    @property
    def command_high(self) -> np.ndarray:
        """The commands (4,) that action +1 maps to (m/s, rad/s)."""
        return self._high.copy()

    def env_commands(self, actions: np.ndarray) -> np.ndarray:
        """The environment's commands for SB3's ``actions`` (scaled from [-1, 1] when normalizing)."""
        a = np.asarray(actions, dtype=np.float64).reshape(self.num_envs, -1)
        if not self.normalize_actions:
            return a
        return self._low + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self._high - self._low)

    def actions_for(self, commands: np.ndarray) -> np.ndarray:
        """SB3 actions (N, 4) in [-1, 1] for the environment's ``commands`` (N, 4) [vx, vy, vz, yaw_rate]
        (m/s, rad/s, heading frame), clipped to [-1, 1]: the inverse of :meth:`env_commands`, with
        which an expert's commands become labels for the policy's actions."""
        if not self.normalize_actions:
            raise ValueError("normalize_actions: expert labels need normalize_actions=True (PPO's [-1, 1] actions)")
        c = np.asarray(commands, np.float64).reshape(self.num_envs, -1)
        return np.clip(2.0 * (c - self._low) / (self._high - self._low) - 1.0, -1.0, 1.0).astype(np.float32)

    def reset(self):
        seeds = self._seeds
        obs, infos = self.venv.reset(seed=None if all(s is None for s in seeds) else seeds)
        self.reset_infos = self._split(infos)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = self.env_commands(actions)

    def step_wait(self):
        if self._actions is None:
            raise RuntimeError("step_async() must come before step_wait()")
        obs, rewards, terminated, truncated, infos = self.venv.step(self._actions)
        self._actions = None
        dones = terminated | truncated
        info_list = self._split(infos)
        ended = np.flatnonzero(dones)
        if len(ended):
            for i in ended:
                info_list[i]["terminal_observation"] = {k: v[i].copy() for k, v in obs.items()}
                info_list[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
            obs, _ = self.venv.restart(ended)
        return obs, rewards.astype(np.float32), dones, info_list

    def close(self) -> None:
        self.venv.close()

    def get_images(self) -> Sequence[np.ndarray | None]:
        images = self.venv.render()
        return list(images) if images is not None else [None] * self.num_envs

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        value = getattr(self.venv, attr_name)
        return [value for _ in _rows(self.num_envs, indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        if len(_rows(self.num_envs, indices)) != self.num_envs:
            raise ValueError(f"set_attr {attr_name!r}: the sub-environments share one batch; set it on all of them")
        setattr(self.venv, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list[Any]:
        raise AttributeError(f"env_method {method_name!r}: the sub-environments of an AirPlayVectorEnv are rows "
                             "of one batch, not objects with methods")

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False for _ in _rows(self.num_envs, indices)]

    def _split(self, infos: dict) -> list[dict]:
        """Gymnasium's dict of batched infos -> SB3's list of per-environment dicts."""
        keys = [k for k in infos if not k.startswith("_")]
        out = []
        for i in range(self.num_envs):
            d = {}
            for k in keys:
                v = infos[k][i]
                d[k] = v.item() if isinstance(v, np.generic) else v
            out.append(d)
        return out


class DepthGoalExtractor(BaseFeaturesExtractor):
    """SB3's features extractor: :class:`DepthGoalEncoder` on the ``depth`` and ``goal`` keys."""

    def __init__(self, observation_space: gymnasium.spaces.Dict, config: PPODepthConfig | None = None) -> None:
        for key in ("depth", "goal"):
            if key not in observation_space.spaces:
                raise ValueError(f"observations must hold {key!r} (got {', '.join(observation_space.spaces)})")
        encoder = DepthGoalEncoder(config or PPODepthConfig())
        super().__init__(observation_space, encoder.features_dim)
        self.encoder = encoder

    def forward(self, observations: dict):
        return self.encoder(observations["depth"], observations["goal"])


def ppo_policy_kwargs(config: PPODepthConfig, shared_critic: bool = True) -> dict:
    """SB3 PPO's ``policy_kwargs`` whose actor is :class:`PPODepthPolicy` of ``config`` (one Tanh
    hidden layer for the actor and for the critic). shared_critic: the critic reads the actor's
    features extractor (True) or has its own of the same shape (False: the value loss cannot
    change the actor's features; twice the encoder compute)."""
    return {"features_extractor_class": DepthGoalExtractor, "features_extractor_kwargs": {"config": config},
            "net_arch": {"pi": [config.hidden_dim], "vf": [config.hidden_dim]},
            "share_features_extractor": bool(shared_critic)}


def _airplay_vec_env(env) -> "AirPlaySB3VecEnv | None":
    """The :class:`AirPlaySB3VecEnv` under SB3 wrappers (``VecMonitor``, ...), or None."""
    for _ in range(16):
        if env is None or isinstance(env, AirPlaySB3VecEnv):
            return env
        env = getattr(env, "venv", None)
    return None


def export_ppo_depth(model, config: PPODepthConfig) -> PPODepthPolicy:
    """The airplay policy with the actor of SB3 PPO ``model`` (built with :func:`ppo_policy_kwargs`
    of ``config``): the same weights, greedy (the Gaussian's mean). ``config.action_repeat`` must
    be the training environment's ``action_repeat`` (checked where the model's environment has
    one): the policy holds each command that many control periods when flown. Its ``action_low`` /
    ``action_high`` must be the :class:`AirPlaySB3VecEnv`'s ``command_low`` / ``command_high``
    (checked where the model's environment is one, under any SB3 wrappers)."""
    sb3_policy = model.policy
    if not isinstance(sb3_policy.features_extractor, DepthGoalExtractor):
        raise ValueError("model: its policy was not built with ppo_policy_kwargs (no DepthGoalExtractor)")
    env = model.get_env()
    try:
        trained = env.get_attr("action_repeat")[0] if env is not None else None
    except AttributeError:
        trained = None
    if trained is not None and trained != config.action_repeat:
        raise ValueError(f"config.action_repeat is {config.action_repeat}, but the model's environment steps "
                         f"{trained} control periods per action (action_repeat={trained})")
    sb3_env = _airplay_vec_env(env)
    if sb3_env is not None and sb3_env.normalize_actions:
        for name, mine, theirs in (("action_low", config.action_low, sb3_env.command_low),
                                   ("action_high", config.action_high, sb3_env.command_high)):
            if not np.allclose(np.asarray(mine, dtype=np.float64), theirs, rtol=0.0, atol=1e-6):
                raise ValueError(f"config.{name} is {list(mine)}, but the model's environment maps its actions "
                                 f"to {theirs.tolist()} (AirPlaySB3VecEnv command_{name.split('_')[1]}): the "
                                 "exported policy would fly other commands than those it learned")
    policy = PPODepthPolicy(config)
    policy.encoder.load_state_dict(sb3_policy.features_extractor.encoder.state_dict())
    policy.pi.load_state_dict(sb3_policy.mlp_extractor.policy_net.state_dict())
    policy.action.load_state_dict(sb3_policy.action_net.state_dict())
    return policy.eval()
