"""AirVLN-R1's GRPO rewards, as functions TRL's ``GRPOTrainer`` calls.

Signature (TRL ``reward_funcs``): ``reward(completions, **kwargs) -> list[float]``; ``completions``
are strings or conversational completions (``[[{"role": "assistant", "content": ...}], ...]``);
``kwargs`` carry the dataset columns, here ``gt_actions`` (the expert's actions for the step, a
list of names per sample, as :mod:`airplay.vln.sft_export` writes them) and optionally
``forward_m``, ``turn_deg``, ``vertical_m`` (the scene's magnitudes, per sample or scalar).

* Subgoal state alignment: roll both action lists out from the same pose
  (:func:`airplay.vln.actions.rollout`: translations in the heading frame, turns about z) and
  compare the end states (the *subgoal* the expert reaches):
  ``lambda1 * max(0, 1 - d / d0) + lambda2 * max(0, 1 - |dyaw| / pi)`` with ``d`` the distance
  (m) between the end positions and ``d0 = distance_scale_m`` (default: the length of the
  expert's own motion, at least one forward step).
* Stop consistency: ``alpha`` if both lists contain STOP, ``beta`` if neither does, else 0.
* Format: ``gamma`` if the completion parses as an action list (:mod:`airplay.vln.parsing`), else 0.

A completion that does not parse gets 0 from all three. The paper's weights are not
published; the defaults (lambda1 1.0, lambda2 0.5, alpha 1.0, beta 0.5, gamma 0.5) are ours.
:func:`make_reward_funcs` returns the three with those weights bound, named for TRL's logs.
"""

from __future__ import annotations

import functools
import math

from airplay.frames import wrap_angle
from airplay.vln.actions import ALL_ACTIONS, ActionSpace, rollout
from airplay.vln.parsing import parse_actions


def completion_text(completion) -> str:
    """The text of a completion (a string, or a list of chat messages: the last one's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, (list, tuple)) and completion:
        last = completion[-1]
        return str(last.get("content", "")) if isinstance(last, dict) else str(last)
    return ""


def _per_sample(value, i: int, default):
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        return value[i]
    return value


def _space(kwargs: dict, i: int) -> ActionSpace:
    return ActionSpace(forward_m=float(_per_sample(kwargs.get("forward_m"), i, 1.0)),
                       turn_rad=math.radians(float(_per_sample(kwargs.get("turn_deg"), i, 30.0))),
                       vertical_m=float(_per_sample(kwargs.get("vertical_m"), i, 0.4)), names=ALL_ACTIONS)


def _gt(kwargs: dict, i: int) -> list[str]:
    gt = kwargs.get("gt_actions")
    if gt is None:
        raise KeyError("reward functions need the dataset column 'gt_actions' (the expert's actions per sample)")
    g = gt[i]
    if isinstance(g, str):
        g = list(parse_actions(g, ALL_ACTIONS, 1 << 30).actions)
    return list(g)


def _parsed(completion):
    r = parse_actions(completion_text(completion), ALL_ACTIONS, 1 << 30)
    return list(r.actions) if r.ok else None


def _scored(completions, score) -> list[float]:
    """``score(i, actions)`` for each completion i whose actions parse; 0.0 for one that does not."""
    return [0.0 if (pred := _parsed(c)) is None else score(i, pred) for i, c in enumerate(completions)]


def subgoal_alignment_reward(completions, lambda1: float = 1.0, lambda2: float = 0.5,
                             distance_scale_m: float | None = None, **kwargs) -> list[float]:
    """lambda1 * distance term + lambda2 * heading term (module docstring), per completion."""
    def score(i, pred):
        space, gt = _space(kwargs, i), _gt(kwargs, i)
        p = rollout([a for a in pred if a != "STOP"], space)
        g = rollout([a for a in gt if a != "STOP"], space)
        d = math.dist(p[:3], g[:3])
        d0 = distance_scale_m or max(space.forward_m, math.dist(g[:3], (0.0, 0.0, 0.0)))
        dyaw = abs(wrap_angle(p[3] - g[3]))
        return lambda1 * max(0.0, 1.0 - d / d0) + lambda2 * max(0.0, 1.0 - dyaw / math.pi)

    return _scored(completions, score)


def stop_consistency_reward(completions, alpha: float = 1.0, beta: float = 0.5, **kwargs) -> list[float]:
    """alpha if prediction and expert both STOP, beta if neither does, else 0."""
    def score(i, pred):
        ps, gs = "STOP" in pred, "STOP" in _gt(kwargs, i)
        return alpha if (ps and gs) else (beta if (not ps and not gs) else 0.0)

    return _scored(completions, score)


def format_reward(completions, gamma: float = 0.5, max_actions: int = 8, **kwargs) -> list[float]:
    """gamma if the completion is a valid list of at most ``max_actions`` actions, else 0."""
    out = []
    for c in completions:
        r = parse_actions(completion_text(c), ALL_ACTIONS, max_actions)
        out.append(gamma if (r.ok and not r.truncated) else 0.0)
    return out


def make_reward_funcs(lambda1: float = 1.0, lambda2: float = 0.5, alpha: float = 1.0, beta: float = 0.5,
                      gamma: float = 0.5, distance_scale_m: float | None = None) -> list:
    """The three rewards with their weights bound, for ``GRPOTrainer(reward_funcs=...)``."""
    funcs = [functools.partial(subgoal_alignment_reward, lambda1=lambda1, lambda2=lambda2,
                               distance_scale_m=distance_scale_m),
             functools.partial(stop_consistency_reward, alpha=alpha, beta=beta),
             functools.partial(format_reward, gamma=gamma)]
    for f, name in zip(funcs, ("subgoal_alignment", "stop_consistency", "format")):
        f.__name__ = name
    return funcs
