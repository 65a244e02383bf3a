"""QA generation: items of every task from the captured groups, with marked images.

For each group (sorted by scene, index) and task (in :data:`airplay.aeroground.tasks.TASKS`
order) one generator call with ``np.random.default_rng([seed, crc32(scene), group, task
index])``: it returns an item or raises :class:`airplay.aeroground.items.Reject`, counted
per task and reason. Output in ``OUT``:

* ``items.jsonl`` - one item a line: id, task, level, scene, category, split, group,
  question, images (``images/<id>_<k>.png``, role, view, marks), answer_type, options
  (letter -> text) or targets/labels (mapping), answer, evidence, meta (breakdown keys);
* ``images/`` - the marked PNGs;
* ``build.json`` - settings, item counts per task and split, rejections per task and reason;
* ``items.parquet`` - the same items (nested fields as JSON text, image paths as a list),
  loadable with ``datasets.load_dataset("parquet", data_files=...)``; written only where
  pyarrow is installed.

Same capture, same seed: same bytes.
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from pathlib import Path

import numpy as np

from airplay.aeroground import gen_alignment, gen_reasoning, gen_spatial
from airplay.aeroground.capture import load_groups, save_png
from airplay.aeroground.draw import draw_marks
from airplay.aeroground.items import Group, Reject
from airplay.aeroground.tasks import TASKS

GENERATORS = {
    "single_target_matching": gen_alignment.single_target_matching,
    "multi_target_matching": gen_alignment.multi_target_matching,
    "relative_distance": gen_spatial.relative_distance,
    "multi_target_relation": gen_spatial.multi_target_relation,
    "region_counting": gen_spatial.region_counting,
    "relative_orientation": gen_spatial.relative_orientation,
    "localization": gen_reasoning.localization,
    "occlusion": gen_reasoning.occlusion,
    "view_transformation": gen_reasoning.view_transformation,
    "reverse_sequence": gen_reasoning.reverse_sequence,
    "trajectory": gen_reasoning.trajectory,
}
PARQUET_COLUMNS = ("id", "task", "level", "scene", "category", "split", "question", "answer_type")


def build(capture_dir: Path, out_dir: Path, seed: int = 0, tasks: list[str] | None = None,
          progress: bool = True) -> dict:
    """Write the items (see the module docstring); returns the ``build.json`` summary."""
    from tqdm import tqdm

    tasks = list(TASKS) if tasks is None else tasks
    unknown = [t for t in tasks if t not in GENERATORS]
    if unknown:
        raise ValueError(f"unknown task(s) {unknown}; choose from {', '.join(GENERATORS)}")
    instances, groups = load_groups(capture_dir)
    out_dir = Path(out_dir)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    counts, rejected = Counter(), Counter()
    split_counts = Counter()
    lines = []
    for rec in tqdm(groups, unit="group", disable=not progress, desc="aeroground build"):
        g = Group(rec, instances[rec["scene"]], capture_dir)
        for t_index, task in enumerate(TASKS):
            if task not in tasks:
                continue
            rng = np.random.default_rng([int(seed), zlib.crc32(rec["scene"].encode()), int(rec["group"]), t_index])
            try:
                draft = GENERATORS[task](g, rng)
            except Reject as r:
                rejected[f"{task}: {r.reason}"] += 1
                continue
            item_id = f"{task}-{rec['scene']}-{int(rec['group']):04d}"
            images = []
            for k, im in enumerate(draft.pop("images")):
                rel = f"images/{item_id}_{k}.png"
                save_png(out_dir / rel, draw_marks(g.image(im["view"]), im.get("marks", [])))
                images.append({"path": rel, "role": im["role"], "view": im["view"], "marks": im.get("marks", [])})
            item = {"id": item_id, "task": task, "level": TASKS[task]["level"], "scene": rec["scene"],
                    "category": rec["category"], "split": rec["split"], "group": rec["dir"], "images": images,
                    **draft}
            lines.append(json.dumps(item, sort_keys=True))
            counts[task] += 1
            split_counts[rec["split"]] += 1
    (out_dir / "items.jsonl").write_text("".join(line + "\n" for line in lines))
    summary = {"seed": int(seed), "capture": str(capture_dir), "items": len(lines),
               "per_task": {t: counts[t] for t in tasks}, "per_split": dict(sorted(split_counts.items())),
               "per_category": dict(sorted(Counter(json.loads(line)["category"] for line in lines).items())),
               "rejected": dict(sorted(rejected.items())), "groups": len(groups)}
    (out_dir / "build.json").write_text(json.dumps(summary, indent=1) + "\n")
    write_parquet(out_dir)
    return summary


def load_items(items_dir: Path) -> list[dict]:
    """The items of ``items_dir/items.jsonl``; ValueError naming the file and line on bad JSON."""
    path = Path(items_dir) / "items.jsonl"
    if not path.is_file():
        raise ValueError(f"{path}: missing; run `airplay aeroground build --out {items_dir}` first")
    items = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{n}: not JSON: {err}") from None
    return items


def write_parquet(items_dir: Path) -> Path | None:
    """``items.parquet`` beside ``items.jsonl`` (None where pyarrow is not installed)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    items = load_items(items_dir)
    cols = {c: [it[c] for it in items] for c in PARQUET_COLUMNS}
    cols["images"] = [[im["path"] for im in it["images"]] for it in items]
    for c in ("options", "answer", "evidence", "meta"):
        cols[c] = [json.dumps(it.get(c), sort_keys=True) for it in items]
    path = Path(items_dir) / "items.parquet"
    pq.write_table(pa.table(cols), path)
    return path
