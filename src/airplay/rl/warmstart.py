"""A behaviour-cloning warm start for Stable-Baselines3 PPO on the vector environment (needs the
``rl`` extra, as :mod:`airplay.rl.sb3`).

PPO from a random actor on PointGoal rarely reaches a goal around obstacles (docs/gym.md): its
exploration finds the reward too seldom. A warm start gives it an actor that already flies:

1. :func:`expert_rollouts` flies the field expert (:class:`~airplay.world.vector_expert.VectorFieldExpert`,
   a function of the state alone) in the same :class:`~airplay.rl.sb3.AirPlaySB3VecEnv` PPO trains
   in, optionally with DART noise on the executed actions (Laskey et al. 2017: the labels stay the
   expert's clean command, the visited states spread around its path), and keeps each decision's
   observation, the expert's action in PPO's normalized [-1, 1] units and the discounted return;
2. :func:`clone_into` fits the PPO model's actor mean to those actions (MSE) and its value head
   to the returns of the episodes that ended in the rollout, through SB3's own policy modules, so
   ``model.learn`` then fine-tunes the cloned actor;
3. optionally DAgger rounds: :func:`expert_rollouts` with the clone as the ``pilot`` (the expert
   labels the states the clone visits), :meth:`Demonstrations.concatenate`, :func:`clone_into` again.

Returns are per decision with ``gamma`` (the PPO model's), reward as the environment gives it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.rl.sb3 import AirPlaySB3VecEnv
from airplay.world.vector_expert import VectorFieldExpert


@dataclass
class Demonstrations:
    """Expert decisions on the vector environment, in the order flown (row-major by step).

    obs: observation key -> (M, ...) array (the SB3 environment's observations);
    actions: (M, 4) float32 expert actions, normalized to [-1, 1] (clipped);
    returns: (M,) float32 discounted returns from each decision to its episode's end;
    ended: (M,) bool, whether that episode ended inside the rollout (its return is exact);
    episodes, successes: episodes that ended during the rollout, and how many reached the goal.
    """

    obs: dict
    actions: np.ndarray
    returns: np.ndarray
    ended: np.ndarray
    episodes: int
    successes: int

    def __len__(self) -> int:
        return len(self.actions)

    @classmethod
    def concatenate(cls, parts: "list[Demonstrations]") -> "Demonstrations":
        """One set of all ``parts``' decisions, in order (DAgger's aggregate)."""
        if not parts:
            raise ValueError("parts: nothing to concatenate")
        return cls(obs={k: np.concatenate([p.obs[k] for p in parts]) for k in parts[0].obs},
                   actions=np.concatenate([p.actions for p in parts]),
                   returns=np.concatenate([p.returns for p in parts]),
                   ended=np.concatenate([p.ended for p in parts]),
                   episodes=sum(p.episodes for p in parts), successes=sum(p.successes for p in parts))


def discounted_returns(rewards: np.ndarray, dones: np.ndarray, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Per step t and sub-environment i (arrays (T, N)): the discounted return
    ``sum_k gamma^k r[t+k, i]`` up to and including the step where that episode ends
    (``dones[t+k, i]``), and whether it ends within the T steps (else the sum stops at T - 1)."""
    rewards = np.asarray(rewards, np.float64)
    dones = np.asarray(dones, bool)
    returns = np.zeros(rewards.shape, np.float64)
    ended = np.zeros(rewards.shape, bool)
    running = np.zeros(rewards.shape[1:])
    closed = np.zeros(rewards.shape[1:], bool)  # an episode end lies at or after this step
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running * ~dones[t]
        closed = closed | dones[t]
        returns[t], ended[t] = running, closed
    return returns, ended


def expert_rollouts(env: AirPlaySB3VecEnv, decisions: int, *, gamma: float = 0.99, noise_std: float = 0.0,
                    seed: int = 0, expert: VectorFieldExpert | None = None,
                    pilot: Callable[[dict], np.ndarray] | None = None,
                    progress: Callable[[int, int], None] | None = None) -> Demonstrations:
    """Fly every sub-environment of ``env`` for ``decisions`` decisions in all (rounded up to
    whole steps of the N sub-environments), labelling each visited state with the field expert's
    action, from a fresh ``env.reset()`` whose task draws are seeded with ``seed`` (as
    ``env.seed(seed)``; the noise too): the same seed and pilot, the same demonstrations.

    pilot: who flies. None: the expert itself; else a function of the batch's observations giving
    normalized actions (N, 4), e.g. a PPO model's greedy actor: the states are then the learner's
    own and the labels the expert's (DAgger, Ross et al. 2011). The recorded returns are the
    pilot's. noise_std: standard deviation of Gaussian noise added to the executed normalized
    action (clipped to [-1, 1]); the recorded action is the expert's own. ``progress(done,
    total)`` is called after each step. The environment's episodes continue afterwards: reset it
    before training on it (``model.learn`` does).
    """
    if isinstance(decisions, bool) or not isinstance(decisions, (int, np.integer)) or decisions < 1:
        raise ValueError(f"decisions must be an integer >= 1, got {decisions!r}")
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma!r}")
    if not np.isfinite(noise_std) or noise_std < 0.0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std!r}")
    expert = expert if expert is not None else VectorFieldExpert(env.venv)
    n = env.num_envs
    steps = -(-int(decisions) // n)
    rng = np.random.default_rng(seed)
    env.seed(seed)
    obs = env.reset()
    keys = list(obs)
    buffers = {k: np.empty((steps, *np.asarray(obs[k]).shape), np.asarray(obs[k]).dtype) for k in keys}
    actions = np.empty((steps, n, 4), np.float32)
    rewards = np.empty((steps, n), np.float64)
    dones = np.empty((steps, n), bool)
    episodes = successes = 0
    for t in range(steps):
        for k in keys:
            buffers[k][t] = obs[k]
        label = env.actions_for(expert.commands())
        actions[t] = label
        executed = label if pilot is None else np.asarray(pilot(obs), np.float32).reshape(n, 4)
        if noise_std > 0.0:
            executed = np.clip(executed + rng.normal(0.0, noise_std, label.shape), -1, 1)
        obs, rewards[t], dones[t], infos = env.step(executed.astype(np.float32))
        for done, info in zip(dones[t], infos):
            if done:
                episodes += 1
                successes += info.get("status") == EpisodeStatus.SUCCESS
        if progress is not None:
            progress((t + 1) * n, steps * n)
    returns, ended = discounted_returns(rewards, dones, gamma)
    return Demonstrations(obs={k: v.reshape(steps * n, *v.shape[2:]) for k, v in buffers.items()},
                          actions=actions.reshape(steps * n, 4), returns=returns.reshape(-1).astype(np.float32),
                          ended=ended.reshape(-1), episodes=episodes, successes=successes)


def clone_into(model, demos: Demonstrations, *, epochs: int = 4, batch_size: int = 256, lr: float = 1e-3,
               value_coef: float = 0.01, seed: int = 0,
               progress: Callable[[int, int, float], None] | None = None) -> list[float]:
    """Fit SB3 PPO ``model``'s actor mean to ``demos.actions`` (MSE, normalized units) and its
    value head to ``demos.returns`` where ``demos.ended`` (MSE x ``value_coef``), ``epochs``
    passes in shuffled minibatches with Adam at ``lr``. The Gaussian's log std is left as it is.
    Returns the mean action MSE of each epoch; ``progress(epoch, epochs, action_mse)`` after each."""
    import torch

    if len(demos) == 0:
        raise ValueError("demos: no decisions to clone")
    for name, value in (("epochs", epochs), ("batch_size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    policy = model.policy
    params = [p for name, p in policy.named_parameters() if name != "log_std"]
    optimizer = torch.optim.Adam(params, lr=lr)
    rng = np.random.default_rng(seed)
    policy.set_training_mode(True)
    history = []
    m = len(demos)
    for epoch in range(epochs):
        order = rng.permutation(m)
        total, count = 0.0, 0
        for start in range(0, m, batch_size):
            idx = order[start:start + batch_size]
            obs = {k: torch.as_tensor(v[idx], device=policy.device) for k, v in demos.obs.items()}
            target = torch.as_tensor(demos.actions[idx], device=policy.device)
            features = policy.extract_features(obs)  # (actor's, critic's) where the critic has its own
            pi_features, vf_features = features if isinstance(features, tuple) else (features, features)
            latent_pi = policy.mlp_extractor.forward_actor(pi_features)
            latent_vf = policy.mlp_extractor.forward_critic(vf_features)
            action_mse = torch.nn.functional.mse_loss(policy.action_net(latent_pi), target)
            loss = action_mse
            mask = torch.as_tensor(demos.ended[idx], device=policy.device)
            if value_coef > 0.0 and bool(mask.any()):
                values = policy.value_net(latent_vf).squeeze(-1)[mask]
                returns = torch.as_tensor(demos.returns[idx], device=policy.device)[mask]
                loss = loss + value_coef * torch.nn.functional.mse_loss(values, returns)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += float(action_mse.detach()) * len(idx)
            count += len(idx)
        history.append(total / count)
        if progress is not None:
            progress(epoch + 1, epochs, history[-1])
    policy.set_training_mode(False)
    return history
