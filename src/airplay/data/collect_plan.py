"""What a collection run does: its configuration, the ledger, and the plan of flights left to fly.

``OUT/collected.jsonl`` (the ledger) holds one JSON record per finished flight (written or
rejected, with its reason); ``OUT/collection.json`` fixes the fields that make the bags of one
collection comparable (:meth:`CollectConfig.fixed`). :func:`plan` turns a configuration and what
``OUT`` already holds into the :class:`FlightJob` s left to fly.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

LEDGER = "collected.jsonl"
SUMMARY = "summary.json"
COLLECTION = "collection.json"
LOCK = ".collect.lock"
PARTIAL_SUFFIX = ".partial"
START_NS = 0
"""Sim time of every episode's first observation (ns); step k is stamped START_NS + k * 20 ms."""
SOURCE = "airplay collect"


class CollectError(RuntimeError):
    """A collection that cannot start or continue; the message names the file and the field."""


@dataclass(frozen=True)
class CollectConfig:
    """What to collect.

    scenes: scene folders; per_scene: tasks per scene (task k = ``{scene}-{setting}-{seed}-{k}``);
    image_size: (width, height) pixels to render at (the scene camera's field of view),
    None = the scene's camera; depth: also record the mesh depth image (32FC1, metres);
    keep_failures: also write failed flights (their metadata says so); render_backend: the
    renderer ("cpu" is the fast path on CPUs); threads: numba threads per worker (1: flights
    run in parallel as processes, and numba's parallel stages stall badly when another
    process holds a core); protocol: a protocol YAML (default config/protocol.yaml) for the
    task sampling settings, success radius and time limits; expert: the labelling pilot,
    "expert" (the A* expert) or "field_expert" (the state-only expert,
    :mod:`airplay.tasks.field_expert`); noise_std: DART-style noise, the standard deviation
    of Gaussian noise added to each executed command (m/s on vx, vy, vz and rad/s on the
    yaw rate; drawn per task from a generator seeded by the collection seed, the task index
    and the scene name): the vehicle flies label + noise, ``/cmd_vel`` records the clean label;
    vehicle: a vehicle file for the flight model (an autopilot's identified profile, ``airplay
    identify``), None = config/vehicle.yaml.
    """

    scenes: tuple[Path, ...]
    per_scene: int
    out: Path
    setting: str = "pointgoal"
    seed: int = 0
    depth: bool = False
    image_size: tuple[int, int] | None = None
    keep_failures: bool = False
    render_backend: str = "cpu"
    workers: int = 1
    ray_address: str | None = None
    threads: int = 1
    protocol: Path | None = None
    expert: str = "expert"
    noise_std: float = 0.0
    vehicle: Path | None = None

    def fixed(self) -> dict:
        """The fields that must not change between runs into one OUT folder."""
        return {"image_size": list(self.image_size) if self.image_size else None, "depth": self.depth,
                "render_backend": self.render_backend,
                "protocol": str(Path(self.protocol).resolve()) if self.protocol else None,
                "expert": self.expert, "noise_std": float(self.noise_std),
                "vehicle": str(Path(self.vehicle).resolve()) if self.vehicle else None}


EXPERTS = ("expert", "field_expert")
"""The policies ``airplay collect --expert`` flies (and labels with)."""
FIXED_DEFAULTS = {"expert": "expert", "noise_std": 0.0, "vehicle": None}
"""Fixed fields that collections made before they existed hold implicitly."""


@dataclass(frozen=True)
class FlightJob:
    """One task to fly: scene folder, its name, the task index; plus the shared settings."""

    scene_dir: str
    scene: str
    split: str
    index: int
    task_id: str
    per_scene: int
    setting: str
    seed: int
    out: str
    depth: bool
    image_size: tuple[int, int] | None
    keep_failures: bool
    render_backend: str
    threads: int
    protocol: str | None
    expert: str = "expert"
    noise_std: float = 0.0
    vehicle: str | None = None
    make_expert: Callable | None = None
    """``make_expert(expert, world)`` returns the labelling policy (``airplay collect`` passes
    :func:`airplay.policies.make_policy`); collection itself knows no policy."""


@dataclass
class Plan:
    """The tasks of a run: those to fly and those already done (skipped), per scene."""

    jobs: list[FlightJob] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    splits: dict[str, str] = field(default_factory=dict)
    removed_partials: int = 0


def task_id(scene: str, setting: str, seed: int, k: int) -> str:
    """The id of task k (as :class:`airplay.tasks.sampler.Task` names it)."""
    return f"{scene}-{setting}-{seed}-{k}"


def bag_complete(bag_dir: Path) -> bool:
    """A published (renamed, finalized) bag folder: ``metadata.yaml`` and an MCAP file."""
    return (bag_dir / "metadata.yaml").is_file() and any(bag_dir.glob("*.mcap"))


# -- the ledger ---------------------------------------------------------------------------------
def read_ledger(out: Path) -> dict[str, dict]:
    """task_id -> last record of ``OUT/collected.jsonl``; a torn last line (killed run) is ignored."""
    path = Path(out) / LEDGER
    records: dict[str, dict] = {}
    if not path.is_file():
        return records
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "task_id" in rec:
            records[rec["task_id"]] = rec
    return records


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a hidden temporary file and a rename: never half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def append_ledger(out: Path, record: dict) -> None:
    """Append one record as a JSON line to ``OUT/collected.jsonl`` (flushed)."""
    with open(Path(out) / LEDGER, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()


def _episode_metadata(bag_dir: Path) -> dict | None:
    """The episode metadata a bag carries in metadata.yaml custom_data (None when absent)."""
    from airplay.data.bag import CUSTOM_DATA_KEY, BagError, read_metadata_yaml

    try:
        return json.loads(((read_metadata_yaml(bag_dir) or {}).get("custom_data") or {})[CUSTOM_DATA_KEY])
    except (BagError, KeyError, TypeError, ValueError):
        return None


# -- planning -----------------------------------------------------------------------------------
def check_collection(cfg: CollectConfig) -> None:
    """Write ``OUT/collection.json`` on the first run; refuse a rerun with other fixed fields."""
    out = Path(cfg.out)
    path = out / COLLECTION
    fixed = cfg.fixed()
    if path.is_file():
        try:
            before = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise CollectError(f"{path}: not valid JSON ({err}); remove it to start a new collection") from None
        for key, value in fixed.items():
            if before.get(key, FIXED_DEFAULTS.get(key)) != value:
                raise CollectError(f"{path}: field {key!r} was {before.get(key)!r} in the earlier run of this "
                                   f"collection, now {value!r}; use another output folder or the same option")
    else:
        write_atomically(path, json.dumps({**fixed, "created_unix_s": time.time()}, indent=2) + "\n")


def plan(cfg: CollectConfig) -> Plan:
    """The jobs left to do; removes ``.partial`` leftovers and rewrites the ledger without
    duplicates (keeping only records whose bag is complete, or rejections)."""
    from airplay.scene.spec import parse_scene_yaml

    out = Path(cfg.out)
    result = Plan()
    ledger = read_ledger(out)
    kept: dict[str, dict] = {}
    for scene_dir in cfg.scenes:
        spec = parse_scene_yaml(scene_dir)
        name = spec.name
        if name in result.splits:
            raise CollectError(f"{scene_dir}: scene name {name!r} given twice (scene.yaml field 'name')")
        result.splits[name] = spec.split
        scene_out = out / name
        if scene_out.is_dir():
            for partial in scene_out.glob(f".*{PARTIAL_SUFFIX}"):
                shutil.rmtree(partial)
                result.removed_partials += 1
        result.skipped[name] = 0
        for k in range(cfg.per_scene):
            tid = task_id(name, cfg.setting, cfg.seed, k)
            bag_dir = scene_out / tid
            rec = ledger.get(tid)
            if bag_complete(bag_dir):
                if rec is None or not rec.get("written"):  # killed between publishing and the ledger line
                    rec = _record_from_bag(bag_dir, name, spec.split, k, tid)
                kept[tid] = rec
                result.skipped[name] += 1
            elif rec is not None and not rec.get("written") and not cfg.keep_failures:
                kept[tid] = rec  # a rejected flight: deterministic, not flown again (unless now kept)
                result.skipped[name] += 1
            else:
                if bag_dir.exists():  # a folder without metadata.yaml is not ours to publish over
                    raise CollectError(f"{bag_dir}: exists but is not a complete bag (no metadata.yaml); "
                                       "remove it to collect this task again")
                result.jobs.append(FlightJob(
                    scene_dir=str(scene_dir), scene=name, split=spec.split, index=k, task_id=tid,
                    per_scene=cfg.per_scene, setting=cfg.setting, seed=cfg.seed, out=str(out), depth=cfg.depth,
                    image_size=tuple(cfg.image_size) if cfg.image_size else None, keep_failures=cfg.keep_failures,
                    render_backend=cfg.render_backend, threads=cfg.threads,
                    protocol=str(cfg.protocol) if cfg.protocol else None, expert=cfg.expert,
                    noise_std=float(cfg.noise_std), vehicle=str(cfg.vehicle) if cfg.vehicle else None))
    # Records of tasks this run does not cover (other seeds, settings, scenes, a larger
    # per_scene earlier) stay as they were.
    covered = {task_id(n, cfg.setting, cfg.seed, k) for n in result.splits for k in range(cfg.per_scene)}
    for tid, rec in ledger.items():
        if tid not in covered:
            kept[tid] = rec
    write_atomically(out / LEDGER, "".join(json.dumps(r) + "\n" for r in kept.values()))
    return result


def _record_from_bag(bag_dir: Path, scene: str, split: str, k: int, tid: str) -> dict:
    """The ledger record of a published bag whose line was lost (the run was killed in between)."""
    from airplay.data.messages import CONTROL_DT_NS

    meta = _episode_metadata(bag_dir) or {}
    steps = int(meta.get("steps", 0))
    return {"task_id": tid, "scene": scene, "split": split, "index": k, "status": meta.get("status", "unknown"),
            "success": bool(meta.get("success", False)), "written": True, "steps": steps, "frames": steps + 1,
            "duration_s": round(steps * CONTROL_DT_NS * 1e-9, 3), "path": str(bag_dir), "recovered": True}
