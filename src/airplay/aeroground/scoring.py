"""Scores: per item, per task, overall, the random-choice baseline, CAA and breakdowns.

* An item scores 1 when :func:`airplay.aeroground.parsing.parse_answer` extracts an answer
  equal to the truth, else 0.
* Accuracy per task, and the average over all questions (as AeroGround reports it), with
  95 % percentile bootstrap intervals over items (:func:`airplay.eval.aggregate.bootstrap_mean_ci`).
* Random-choice baseline, analytic: per item 1 / (number of options), or 1 / (number of
  one-to-one mappings) for mapping items, averaged like the accuracy; simulated: a seeded
  answerer that picks a uniformly random option (or mapping), scored by the same parser.
* Chance-adjusted accuracy CAA = (accuracy - chance) / (1 - chance): 0 is random choice,
  1 perfect, negative below chance.
* Breakdowns (AeroGround Figures 4, 9, 10): aerial-ground distance in 20 m bins, smallest
  target pixel area (bins :data:`PIXEL_BINS`), aerial view configuration.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from airplay.aeroground.parsing import parse_answer
from airplay.aeroground.tasks import TASKS
from airplay.eval.aggregate import bootstrap_mean_ci

DISTANCE_BIN_M = 20.0
PIXEL_BINS = (0, 100, 300, 1000, 3000)


def chance(item: dict) -> float:
    """Probability that a uniformly random valid answer is correct."""
    if item["answer_type"] == "mapping":
        n, k = len(item["labels"]), len(item["targets"])
        return 1.0 / math.perm(n, k)
    return 1.0 / len(item["options"])


def score(item: dict, response: str) -> dict:
    """``{"parsed": answer or None, "correct": 0 or 1}`` for one reply."""
    parsed = parse_answer(item, response)
    return {"parsed": parsed, "correct": int(parsed is not None and parsed == item["answer"])}


def random_response(item: dict, rng: np.random.Generator) -> str:
    """A uniformly random valid answer, written as a model would."""
    if item["answer_type"] == "mapping":
        picks = rng.permutation(item["labels"])[: len(item["targets"])]
        return ", ".join(f"{t}-{lab}" for t, lab in zip(item["targets"], picks))
    return str(rng.choice(sorted(item["options"])))


def _bins(item: dict) -> dict[str, str]:
    meta = item.get("meta") or {}
    out = {"view_config": meta.get("view_config") or "ground"}
    d = meta.get("aerial_ground_distance_m")
    if d is not None:
        lo = int(d // DISTANCE_BIN_M * DISTANCE_BIN_M)
        out["aerial_ground_distance_m"] = f"{lo}-{lo + int(DISTANCE_BIN_M)}"
    px = meta.get("target_pixel_area")
    if px is not None:
        edges = list(PIXEL_BINS)
        k = max(i for i, e in enumerate(edges) if px >= e)
        out["target_pixel_area"] = f">={edges[k]}" if k == len(edges) - 1 else f"{edges[k]}-{edges[k + 1]}"
    return out


def _entry(correct: list[int], chances: list[float], bootstrap: int, seed: int) -> dict:
    acc = bootstrap_mean_ci(np.asarray(correct, dtype=float), bootstrap, seed)
    p = float(np.mean(chances))
    return {"n": len(correct), "accuracy": acc, "chance": p,
            "caa": (acc["mean"] - p) / (1.0 - p) if p < 1.0 else float("nan")}


def summarize(items: list[dict], responses: dict[str, str], bootstrap: int = 1000, seed: int = 0,
              simulate_random: bool = True) -> dict:
    """Scores of ``responses`` ({item id: reply}) over ``items`` (see the module docstring).
    Items without a reply are scored incorrect (the reply is taken as empty)."""
    rng = np.random.default_rng(seed)
    rows = []
    for it in items:
        s = score(it, responses.get(it["id"], ""))
        r = score(it, random_response(it, rng))["correct"] if simulate_random else None
        rows.append((it, s["correct"], chance(it), r))
    by_task = defaultdict(list)
    for row in rows:
        by_task[row[0]["task"]].append(row)
    out = {"items": len(rows), "answered": sum(1 for it in items if it["id"] in responses), "per_task": {},
           "breakdowns": {}}
    for task in TASKS:
        if by_task.get(task):
            rs = by_task[task]
            out["per_task"][task] = _entry([r[1] for r in rs], [r[2] for r in rs], bootstrap, seed)
            if simulate_random:
                out["per_task"][task]["random_simulated"] = float(np.mean([r[3] for r in rs]))
    out["overall"] = _entry([r[1] for r in rows], [r[2] for r in rows], bootstrap, seed)
    if simulate_random:
        sim = np.asarray([r[3] for r in rows], dtype=float)
        out["overall"]["random_simulated"] = float(sim.mean())
        out["random_simulated_ci95"] = bootstrap_mean_ci(sim, bootstrap, seed)["ci95"]
    groups = defaultdict(lambda: defaultdict(list))
    for row in rows:
        for key, b in _bins(row[0]).items():
            groups[key][b].append(row)
    for key, bins in groups.items():
        out["breakdowns"][key] = {b: _entry([r[1] for r in rs], [r[2] for r in rs], bootstrap, seed)
                                  for b, rs in sorted(bins.items(), key=lambda kv: _bin_order(kv[0]))}
    return out


def _bin_order(label: str):
    num = label.lstrip(">=").split("-")[0]
    return (0, float(num)) if num.replace(".", "").isdigit() else (1, label)
