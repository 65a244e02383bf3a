"""``airplay aeroground eval``: ask a model every item, score it, write the results.

RESULTS/responses.jsonl holds one line per answered item (id, task, reply, parsed,
correct, seconds); a rerun with the same RESULTS continues after the items already there.
RESULTS/summary.json is :func:`airplay.aeroground.scoring.summarize` plus the run's
settings; RESULTS/results.html renders it (:mod:`airplay.aeroground.pages`).

The answerer is a VLM backend (:func:`backend_answerer`) or, for reference rows,
:func:`random_answerer` (a seeded uniform choice) or :func:`oracle_answerer` (reads the
evidence through :mod:`airplay.aeroground.checker`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from airplay.aeroground.build import load_items
from airplay.aeroground.pages import results_html
from airplay.aeroground.prompts import build_prompt
from airplay.aeroground.scoring import score, summarize


def _load_image(path: Path) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))


def select_items(items: list[dict], tasks: list[str] | None = None, limit: int | None = None) -> list[dict]:
    """Items of ``tasks`` (all when None), the first ``limit`` of each task (all when None)."""
    out, seen = [], {}
    for it in items:
        if tasks and it["task"] not in tasks:
            continue
        seen[it["task"]] = seen.get(it["task"], 0) + 1
        if limit is None or seen[it["task"]] <= limit:
            out.append(it)
    return out


def backend_answerer(backend, image_size=None):
    """``answer(item, items_dir) -> reply`` asking ``backend`` (``generate(Prompt) -> str``)."""
    def answer(item: dict, items_dir: Path) -> str:
        images = [_load_image(items_dir / im["path"]) for im in item["images"]]
        return backend.generate(build_prompt(item, images, image_size))

    return answer


def random_answerer(seed: int = 0):
    """A uniformly random valid answer per item (seeded), as the random-choice baseline."""
    from airplay.aeroground.scoring import random_response

    rng = np.random.default_rng(seed)
    return lambda item, items_dir: random_response(item, rng)


def oracle_answerer():
    """The answer the item's evidence implies."""
    from airplay.aeroground.checker import oracle_response

    return lambda item, items_dir: oracle_response(item)


def evaluate(answerer, items_dir: Path, out_dir: Path, tasks: list[str] | None = None, limit: int | None = None,
             bootstrap: int = 1000, seed: int = 0, progress: bool = True,
             settings: dict | None = None) -> dict:
    """Ask ``answerer`` (``answer(item, items_dir) -> reply``) every item; returns the summary."""
    from tqdm import tqdm

    items_dir, out_dir = Path(items_dir), Path(out_dir)
    items = select_items(load_items(items_dir), tasks, limit)
    out_dir.mkdir(parents=True, exist_ok=True)
    resp_path = out_dir / "responses.jsonl"
    done = {}
    if resp_path.is_file():
        for line in resp_path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["id"]] = row["reply"]
    with resp_path.open("a") as f:
        for it in tqdm(items, unit="item", disable=not progress, desc="aeroground eval"):
            if it["id"] in done:
                continue
            t0 = time.perf_counter()
            reply = answerer(it, items_dir)
            s = score(it, reply)
            f.write(json.dumps({"id": it["id"], "task": it["task"], "reply": reply, "parsed": s["parsed"],
                                "correct": s["correct"], "seconds": round(time.perf_counter() - t0, 3)}) + "\n")
            f.flush()
            done[it["id"]] = reply
    summary = summarize(items, done, bootstrap=bootstrap, seed=seed)
    summary["settings"] = {**(settings or {}), "items_dir": str(items_dir), "tasks": tasks, "limit": limit,
                           "bootstrap": bootstrap, "seed": seed}
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    (out_dir / "results.html").write_text(results_html(summary))
    return summary
