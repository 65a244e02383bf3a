"""N episodes of one learned policy acted on together: one forward pass per control step for all.

:class:`BatchedPolicy` keeps, per episode slot, what a :class:`~airplay.policies.learned.LearnedPolicy`
keeps per episode (its observation history, its adapter's queue or ensemble, DP's noise
generator seeded with the config's ``seed`` at each reset) and shares the model. Each step, the
slots whose adapter needs a new chunk (:meth:`needs_chunk` of :mod:`airplay.policies.adapters`)
are predicted in one :meth:`~airplay.policies.learned.LearnedPolicy.predict_batch`; every slot's
adapter then serves its command as the single policy's would. With ``exact`` (the default) a
slot's commands are bit for bit those of the same policy flying that episode alone
(``select_action`` one frame at a time): the batch forward equals the forward of one
(:func:`airplay.policies.learned.rows_apart`), the histories, adapters and noise are per slot.

Observations come as the batch of :class:`~airplay.world.vector_env.AirPlayVectorEnv` (``rgb``
(N, H, W, 3), ``state`` (N, 13), ``goal`` (N, 3) or ``goal_image`` (N, H, W, 3)), row j of them
for slot ``slots[j]``.
"""

from __future__ import annotations

import numpy as np
import torch

from airplay.policies.adapters import make_adapter
from airplay.policies.learned import LearnedPolicy
from airplay.policies.observation import ObservationHistory

OBS_KEYS = ("rgb", "state", "goal", "goal_image")
"""The observation keys a learned policy may read (the others are not passed on)."""


class _Slot:
    def __init__(self, policy: LearnedPolicy) -> None:
        c = policy.config
        self.history = ObservationHistory(c.n_obs_steps, c.image_size, c.goal)
        self.adapter = make_adapter(c.adapter, c.execution_horizon, c.chunk_size)
        self.generator = torch.Generator()
        self.seed = c.seed

    def reset(self) -> None:
        self.history.reset()
        self.adapter.reset()
        self.generator.manual_seed(self.seed)


def _no_chunk(obs: dict) -> np.ndarray:
    raise RuntimeError("the adapter asked for a chunk after needs_chunk() said it did not")


class BatchedPolicy:
    """``n`` episode slots of ``policy`` (a learned policy, in eval mode; its own single-episode
    state is not touched). ``exact``: see the module docstring (False: torch's batched kernels,
    ~1e-6 relative from the single run's commands)."""

    def __init__(self, policy: LearnedPolicy, n: int, exact: bool = True) -> None:
        if not isinstance(policy, LearnedPolicy):
            raise ValueError(f"BatchedPolicy batches learned policies (act, dp, cnn_bc), got {type(policy).__name__}")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        self.policy = policy.eval()
        self.exact = bool(exact)
        self.slots = [_Slot(policy) for _ in range(int(n))]
        self.forward_s = 0.0
        """Seconds spent in the batched forward passes (for benchmarks)."""

    def reset(self, slot: int, task=None) -> None:
        """Start an episode in ``slot`` (as ``policy.reset(task)`` does for the single policy)."""
        self.slots[slot].reset()

    def act(self, slots, obs: dict) -> np.ndarray:
        """(len(slots), 4) float32 commands: row j for slot ``slots[j]`` from row j of ``obs``."""
        import time

        slots = [int(s) for s in slots]
        keys = [k for k in OBS_KEYS if k in obs]
        rows = [{k: obs[k][j] for k in keys} for j in range(len(slots))]
        for s, o in zip(slots, rows):
            self.slots[s].history.append(o)
        need = [j for j, s in enumerate(slots) if self.slots[s].adapter.needs_chunk()]
        chunks: dict[int, np.ndarray] = {}
        if need:
            t0 = time.perf_counter()
            batches = [self.slots[slots[j]].history.batch(self.policy.device) for j in need]
            batch = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
            generators = [self.slots[slots[j]].generator for j in need]
            out = self.policy.predict_batch(batch, generators, exact=self.exact).float().cpu().numpy()
            chunks = dict(zip(need, out))
            self.forward_s += time.perf_counter() - t0
        commands = np.empty((len(slots), 4), np.float32)
        for j, s in enumerate(slots):
            chunk = chunks.get(j)
            commands[j] = self.slots[s].adapter.step(rows[j], _no_chunk if chunk is None else (lambda o, c=chunk: c))
        return commands
