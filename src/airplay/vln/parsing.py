"""Robust parsing of the model's answer: a JSON list of up to N action names.

AirVLN-R1 answers with a JSON list such as ``["MOVE_FORWARD", "TURN_LEFT"]``. Models also
wrap it in code fences, add reasoning (``<think>...</think>``), a prefix ("Actions: ..."),
use lower case, spaces or aliases ("move forward", "forward"). :func:`parse_actions`
accepts all that and returns a :class:`ParseResult`; anything else is a *format failure*
(``ok`` False, ``error`` says why): no list, an empty list, a non-string item, an unknown
or disabled action name. A list longer than the limit is truncated (``truncated`` True),
not rejected. Nothing after ``STOP`` is executed (it is dropped).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from airplay.vln.actions import ALIASES, ALL_ACTIONS, BASE_ACTIONS

_FENCE = re.compile(r"```(?:json|JSON|python)?\s*(.*?)```", re.S)
_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)


@dataclass(frozen=True)
class ParseResult:
    """actions: canonical names, in order (empty on failure); ok: False is a format failure;
    error: why; truncated: more than the limit were given."""

    actions: tuple[str, ...]
    ok: bool
    error: str = ""
    truncated: bool = False


def canonical_action(name: str, allowed: tuple[str, ...] = ALL_ACTIONS) -> str | None:
    """The canonical action for ``name`` (case, spaces, hyphens and aliases forgiven), or None."""
    key = re.sub(r"[\s\-]+", "_", name.strip().strip(".").upper())
    key = ALIASES.get(key, key)
    return key if key in allowed else None


def _candidate_lists(text: str) -> list[str]:
    """Bracketed substrings ``[...]`` of ``text`` that could be the action list, best first."""
    found = []
    depth, start = 0, -1
    for i, ch in enumerate(text):
        if ch == "[":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "]" and depth > 0:
            depth -= 1
            if depth == 0:
                found.append(text[start:i + 1])
    return found[::-1]  # the last list is usually the final answer


def _load_list(chunk: str):
    for attempt in (chunk, chunk.replace("'", '"')):
        try:
            value = json.loads(attempt)
        except json.JSONDecodeError:
            continue
        if isinstance(value, list):
            return value
    # unquoted names: [MOVE_FORWARD, TURN_LEFT]
    inner = chunk.strip()[1:-1].strip()
    if inner and re.fullmatch(r"[A-Za-z_\- ]+(\s*,\s*[A-Za-z_\- ]+)*", inner):
        return [p.strip() for p in inner.split(",")]
    return None


def parse_actions(text: str, allowed: tuple[str, ...] = BASE_ACTIONS, max_actions: int = 8) -> ParseResult:
    """Parse a model answer into at most ``max_actions`` actions among ``allowed``."""
    if not isinstance(text, str) or not text.strip():
        return ParseResult((), False, "empty answer")
    body = _THINK.sub(" ", text)
    m = _ANSWER.search(body)
    if m:
        body = m.group(1)
    fenced = _FENCE.findall(body)
    sources = fenced + [body] if fenced else [body]
    value = None
    for source in sources:
        for chunk in _candidate_lists(source):
            value = _load_list(chunk)
            if value is not None:
                break
        if value is not None:
            break
    if value is None:
        # a JSON object with an "actions" key
        for source in sources:
            s = source.strip()
            if s.startswith("{"):
                try:
                    obj = json.loads(s)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("actions"), list):
                    value = obj["actions"]
                    break
    if value is None:
        return ParseResult((), False, "no JSON list of actions found")
    if not value:
        return ParseResult((), False, "empty action list")
    actions = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            item = item.get("action", item.get("name"))
        if not isinstance(item, str):
            return ParseResult((), False, f"item {i} is not an action name: {item!r}")
        name = canonical_action(item, allowed)
        if name is None:
            return ParseResult((), False, f"item {i}: unknown or disabled action {item!r}; allowed: {', '.join(allowed)}")
        actions.append(name)
    truncated = len(actions) > max_actions
    actions = actions[:max_actions]
    if "STOP" in actions:
        actions = actions[: actions.index("STOP") + 1]
    return ParseResult(tuple(actions), True, "", truncated)
