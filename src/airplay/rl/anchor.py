"""PPO fine-tuning that keeps a cloned actor near its demonstrations (needs the ``rl`` extra).

A warm-started PPO actor (:mod:`airplay.rl.warmstart`) can be undone by PPO's first updates
(docs/gym.md: with seed 1 the held-out SR fell from the clone's 55 % to 0 % in 22 minutes). Two
measures against it, both in :class:`AnchoredPPO`, a subclass of SB3's PPO that changes nothing
else of its update:

* **critic warm-up**: for the first ``critic_warmup`` decisions (env steps) the actor is frozen
  (its head, its log std and the features extractor it shares with the critic get no update);
  only the critic's own layers learn, so the advantages are no longer those of an untrained value
  head when the actor starts to move;
* **a behaviour-cloning anchor** (DAPG, Rajeswaran et al. 2018, without its advantage weighting):
  at every PPO minibatch the gradient of ``coef * NLL`` of the demonstrations' actions under the
  actor's Gaussian (its standard deviation held fixed: the anchor moves the mean only) on a
  minibatch of the demonstrations is added to PPO's own before the optimizer step. ``coef`` is
  ``bc_coef`` halved every ``bc_half_life`` decisions after the warm-up, so PPO's objective takes
  over as training goes on.

Decisions are SB3's ``num_timesteps`` (one per sub-environment and step).
"""

from __future__ import annotations

import numpy as np
import torch
from stable_baselines3 import PPO

from airplay.rl.warmstart import Demonstrations


class AnchoredPPO(PPO):
    """SB3 PPO with a critic warm-up and an annealed behaviour-cloning anchor (module docstring).

    demos: the demonstrations to anchor to (actions normalized to [-1, 1], as
    :func:`~airplay.rl.warmstart.expert_rollouts` gives), or None and :meth:`set_demonstrations`
    before the first update after the warm-up (needed where ``bc_coef`` > 0). bc_coef: the anchor's
    weight at the end of the warm-up (>= 0; 0: no anchor). bc_half_life: decisions over which the
    weight halves (> 0). critic_warmup: decisions during which only the critic learns (>= 0).
    bc_batch_size: demonstrations per anchor minibatch. Every other argument is SB3 PPO's."""

    def __init__(self, *args, demos: Demonstrations | None = None, bc_coef: float = 0.0,
                 bc_half_life: float = 500_000.0, critic_warmup: int = 0, bc_batch_size: int = 256,
                 anchor_seed: int = 0, **kwargs) -> None:
        if not np.isfinite(bc_coef) or bc_coef < 0.0:
            raise ValueError(f"bc_coef must be >= 0, got {bc_coef!r}")
        if not np.isfinite(bc_half_life) or bc_half_life <= 0.0:
            raise ValueError(f"bc_half_life must be > 0 decisions, got {bc_half_life!r}")
        if isinstance(critic_warmup, bool) or not isinstance(critic_warmup, (int, np.integer)) or critic_warmup < 0:
            raise ValueError(f"critic_warmup must be an integer >= 0 (decisions), got {critic_warmup!r}")
        if isinstance(bc_batch_size, bool) or not isinstance(bc_batch_size, (int, np.integer)) or bc_batch_size < 1:
            raise ValueError(f"bc_batch_size must be an integer >= 1, got {bc_batch_size!r}")
        super().__init__(*args, **kwargs)
        self.demos: Demonstrations | None = None
        if demos is not None:
            self.set_demonstrations(demos)
        self.bc_coef = float(bc_coef)
        self.bc_half_life = float(bc_half_life)
        self.critic_warmup = int(critic_warmup)
        self.bc_batch_size = int(bc_batch_size)
        self._anchor_rng = np.random.default_rng(anchor_seed)
        self.anchor_log: list[dict] = []
        """One row per PPO update: decisions, whether the actor was frozen, the anchor's weight and
        its mean NLL over the update's minibatches (nan without one)."""

    def set_demonstrations(self, demos: Demonstrations) -> None:
        """Anchor to ``demos`` from the next update on (e.g. the warm start's, once it has flown)."""
        if len(demos) == 0:
            raise ValueError("demos: no demonstrations to anchor to")
        self.demos = demos

    def actor_frozen(self) -> bool:
        """Whether the next update leaves the actor as it is (still in the critic warm-up)."""
        return self.num_timesteps <= self.critic_warmup

    def anchor_weight(self) -> float:
        """The anchor's weight for the next update: 0 during the warm-up, then ``bc_coef`` halved
        every ``bc_half_life`` decisions past it."""
        if self.actor_frozen() or self.bc_coef == 0.0:
            return 0.0
        if self.demos is None:
            raise ValueError("bc_coef > 0 but no demonstrations to anchor to: set_demonstrations first")
        return self.bc_coef * 0.5 ** ((self.num_timesteps - self.critic_warmup) / self.bc_half_life)

    def _actor_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the actor's output depends on (the shared features extractor included)."""
        policy = self.policy
        params = list(policy.mlp_extractor.policy_net.parameters()) + list(policy.action_net.parameters())
        params.append(policy.log_std)
        if policy.share_features_extractor:
            params += list(policy.features_extractor.parameters())
        else:
            params += list(policy.pi_features_extractor.parameters())
        return params

    def _anchor_nll(self) -> torch.Tensor:
        """The demonstrations' mean negative log-likelihood under the actor's Gaussian, on one random
        minibatch, the standard deviation detached (constant terms dropped)."""
        policy = self.policy
        idx = self._anchor_rng.integers(0, len(self.demos), min(self.bc_batch_size, len(self.demos)))
        obs = {k: torch.as_tensor(v[idx], device=policy.device) for k, v in self.demos.obs.items()}
        target = torch.as_tensor(self.demos.actions[idx], device=policy.device)
        mean = policy.get_distribution(obs).distribution.mean  # the actor's encoder only
        var = torch.exp(2.0 * policy.log_std.detach())
        return (((mean - target) ** 2) / (2.0 * var)).sum(dim=-1).mean()

    def train(self) -> None:
        frozen = self.actor_frozen()
        weight = self.anchor_weight()
        nll: list[float] = []
        handle = None
        actor = self._actor_parameters() if frozen else []
        for p in actor:
            p.requires_grad_(False)  # no gradient: Adam skips them
        if weight > 0.0:
            def add_anchor_gradient(optimizer, args, kwargs) -> None:
                # PPO's loss was back-propagated and its gradient clipped; the anchor's adds to it
                loss = self._anchor_nll()
                (weight * loss).backward()
                nll.append(float(loss.detach()))

            handle = self.policy.optimizer.register_step_pre_hook(add_anchor_gradient)
        try:
            super().train()
        finally:
            if handle is not None:
                handle.remove()
            for p in actor:
                p.requires_grad_(True)
        self.anchor_log.append({"decisions": int(self.num_timesteps), "actor_frozen": frozen, "bc_weight": weight,
                                "bc_nll": float(np.mean(nll)) if nll else float("nan")})
        self.logger.record("train/bc_weight", weight)
        if nll:
            self.logger.record("train/bc_nll", float(np.mean(nll)))
