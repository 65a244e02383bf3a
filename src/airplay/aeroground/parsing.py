"""Answer extraction, scored by AeroGround's rules (their Table 4).

Choice items: the answer is correct only if exactly one valid option letter is extracted
and equals the truth. A letter counts where it is written as an answer, in ASCII:

* the whole reply: ``B``, ``b``, ``B.``, ``(B)``, ``[B]``, ``**B**``, ``\\boxed{B}``,
  ``<answer>B</answer>``;
* at the start, followed by ``.``, ``)`` or ``:`` (``B. candidate B``, ``B) path B``);
* after an answer word: ``Answer: B``, ``The answer is (B)``, ``Option B``, ``choice: B``;
* the reply is exactly one option's text (``B, A, C`` for an ordering option).

Other capitals in prose ("A red car ...") are not answers. Several distinct letters
("A or B", "B, not A"), a letter outside the options, a refusal, an explanation with no
letter, non-ASCII lookalikes (Cyrillic ``А``, full-width ``Ｂ``) and an empty reply all give
no answer (``None``).

Mapping items: pairs ``1-B``, ``1: B``, ``1 -> B``, ``1→B``, ``1 = B``, ``1 to B`` or JSON
``{"1": "B"}``; correct only if every target appears exactly once, every letter is a
candidate, the mapping is one-to-one, and nothing but the pairs (and an optional
``Answer:`` / ``Mapping:`` lead) is written.
"""

from __future__ import annotations

import json
import re

_MARKUP = re.compile(r"\*\*|__|`|</?answer>|\\boxed\{([^}]*)\}", re.IGNORECASE)
_WHOLE = re.compile(r"^[(\[]?([A-Za-z])[)\].:]?$")
_LEAD = re.compile(r"^[(\[]?([A-Z])[)\].:](?:\s|$)")
_AFTER_WORD = re.compile(r"\b(?:answer|option|choice)\b(?:\s+is)?\s*[:=\-]?\s*[(\[]?([A-Z])(?![A-Za-z0-9])",
                         re.IGNORECASE)
_PAIR = re.compile(r"(?<![0-9])([1-9])\s*(?:->|→|=>|-|–|:|=|\bto\b|\bis\b)\s*[(\[]?([A-Za-z])(?![A-Za-z])[)\]]?")
_LEAD_WORDS = re.compile(r"^\s*(?:the\s+)?(?:final\s+)?(?:answer|mapping)\s*(?:is)?\s*[:\-]?", re.IGNORECASE)


def _clean(text: str) -> str:
    return _MARKUP.sub(lambda m: m.group(1) or "", text or "").strip()


def parse_choice(text: str, options: dict[str, str]) -> str | None:
    """The one option letter ``text`` answers, or None (see the module docstring)."""
    if not text or not text.isascii() and not _clean(text).isascii():
        return None
    body = _clean(text)
    if not body or not body.isascii():
        return None
    stripped = body.rstrip(".").strip()
    by_text = [k for k, v in options.items() if v.lower() == stripped.lower()]
    if len(by_text) == 1:
        return by_text[0]
    found: set[str] = set()
    m = _WHOLE.match(body)
    if m:
        found.add(m.group(1).upper())
    else:
        m = _LEAD.match(body)
        if m:
            found.add(m.group(1))
        found.update(x.upper() for x in _AFTER_WORD.findall(body))
    if len(found) != 1:
        return None
    letter = found.pop()
    return letter if letter in options else None


def parse_mapping(text: str, targets: list[str], labels: list[str]) -> dict[str, str] | None:
    """The full one-to-one mapping ``text`` gives (target -> letter), or None."""
    body = _clean(text).replace("→", "->").replace("–", "-")
    if not body or not body.isascii():
        return None
    pairs: list[tuple[str, str]] = []
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, ValueError):
        data = None
    if isinstance(data, dict):
        if not all(isinstance(v, str) for v in data.values()):
            return None
        pairs = [(str(k).strip(), v.strip()) for k, v in data.items()]
    else:
        pairs = [(a, b) for a, b in _PAIR.findall(body)]
        rest = _LEAD_WORDS.sub("", _PAIR.sub("", body))
        if re.sub(r"[\s,;.\-]|\band\b", "", rest):
            return None  # free text beside the pairs
    if len(pairs) != len(targets):
        return None
    mapping = {}
    for t, lab in pairs:
        if t not in targets or t in mapping or lab not in labels:
            return None
        mapping[t] = lab
    if len(set(mapping.values())) != len(mapping):
        return None
    return mapping


def parse_answer(item: dict, text: str):
    """A letter (choice items) or a mapping (mapping items) from ``text``, or None."""
    if item["answer_type"] == "mapping":
        return parse_mapping(text, list(item["targets"]), list(item["labels"]))
    return parse_choice(text, item["options"])
