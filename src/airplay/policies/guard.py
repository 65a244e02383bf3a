"""Calling a policy so that its failure ends one episode, not the run (both runtimes).

A policy that raises in ``reset(task)`` or ``select_action(obs)`` ends its episode with the
status ``policy_error`` and the message ``"<ExceptionType>: <message>"``; the evaluation goes on
with the next episode. With a per-step compute budget (``budget_ms`` > 0; off by default), a
``select_action`` call that used more CPU time than the budget ends the episode as
``over_budget``. The time is the process's CPU time during the call (``time.process_time``,
all its threads, so a multi-threaded torch forward pass counts in full), not wall time: a
loaded machine makes it slower to arrive, not longer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from airplay.episode_status import EpisodeStatus

POLICY_ERROR = EpisodeStatus.POLICY_ERROR.value
OVER_BUDGET = EpisodeStatus.OVER_BUDGET.value


def describe(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"`` (the ``error`` of a ``policy_error`` episode)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class Step:
    """One guarded ``select_action``: ``command`` (4,) or, when the episode must end, ``status``
    (:data:`POLICY_ERROR` / :data:`OVER_BUDGET`) and ``error``; ``cpu_s`` the call's CPU time (s)."""

    command: np.ndarray | None
    status: str | None = None
    error: str | None = None
    cpu_s: float = 0.0


def reset(policy, task) -> str | None:
    """``policy.reset(task)``; the error text where it raised, else None."""
    try:
        policy.reset(task)
    except Exception as exc:  # any failure of user code ends the episode, not the run
        return describe(exc)
    return None


def act(policy, obs: dict, budget_ms: float = 0.0) -> Step:
    """``policy.select_action(obs)`` as a :class:`Step` (module docstring). A command that is
    not 4 finite numbers is a ``policy_error`` too."""
    t0 = time.process_time()
    try:
        command = np.asarray(policy.select_action(obs))  # the policy's dtype, as the environment gets it
        if command.shape != (4,):
            raise ValueError(f"select_action must return 4 values [vx, vy, vz, yaw_rate], got shape {command.shape}")
        if not np.all(np.isfinite(command)):
            raise ValueError(f"select_action returned a non-finite command {command.tolist()}")
    except Exception as exc:
        return Step(None, POLICY_ERROR, describe(exc), time.process_time() - t0)
    cpu_s = time.process_time() - t0
    if budget_ms > 0 and cpu_s * 1e3 > budget_ms:
        return Step(None, OVER_BUDGET, f"the step took {cpu_s * 1e3:.1f} ms of CPU time, over the "
                                       f"{budget_ms:g} ms budget", cpu_s)
    return Step(command, cpu_s=cpu_s)
