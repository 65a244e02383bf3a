"""What a path given to ``airplay report`` holds: result kinds recognised by their files.

A :class:`Kind` has a ``detect(path)`` (does this path look like one of mine?) and a
``load(path)`` that returns :class:`Run` objects. :func:`load_inputs` tries the kinds of
:data:`KINDS` in order; the first that detects a path loads it. Kinds:

- ``eval``: an ``airplay eval`` folder (``summary.json`` and/or ``episodes.jsonl``, plots
  ``<scene>_trajectories.png``; :mod:`airplay.eval.results`), or one of those two files.
- ``offline``: an ``airplay eval-offline --out`` JSON file (``overall.ade_cm``).
- ``relate``: the ``relate.json`` of ``airplay offline-vs-closed --out`` (``rows`` and ``correlations``).
- ``sweep``: an ``airplay sweep`` folder (``sweep.json``, its figures, and one eval folder per H).
- ``disturb``: an ``airplay disturb`` folder (``disturb.json``, the local disturbance table).
- ``group``: a folder of result folders (any depth up to 3, e.g. per-H subfolders of a sweep):
  each recognised subfolder becomes its runs; PNG and JSON files of the group folder itself that
  no kind reads are shown as figures and raw files.

Loading never raises for a damaged but recognisable input: what is wrong is recorded in
``Run.problems`` (each message starts with the file it is about) and the rest is kept. A path that
no kind recognises raises :class:`ReportInputError`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airplay.policies.checkpoint import checkpoint_label

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_BAD_LINES = 5
"""Unreadable lines of ``episodes.jsonl`` reported one by one; the rest are counted."""


class ReportInputError(ValueError):
    """A path given to ``airplay report`` that holds no results it recognises."""


@dataclass
class Run:
    """One loaded result: ``kind`` (a :class:`Kind` name), where it came from, the column label
    the page uses, the kind's ``data``, and what went wrong reading it."""

    kind: str
    path: Path
    label: str
    data: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    """Other PNG files found beside the results (shown as they are)."""
    raw: list[Path] = field(default_factory=list)
    """JSON files no kind reads (shown as text, so that a newer kind's results are not lost)."""

    def problem(self, file: Path | str, message: str) -> None:
        self.problems.append(f"{file}: {message}")


@dataclass(frozen=True)
class Kind:
    name: str
    detect: Callable[[Path], bool]
    load: Callable[[Path], list[Run]]


def read_json(path: Path) -> Any:
    """Parsed JSON of ``path``; ``ValueError`` naming the file when it is not readable JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not readable JSON ({err})") from None


def _json_object(path: Path) -> dict | None:
    """The JSON object in ``path``, or None where it is not a readable JSON object."""
    if not (path.is_file() and path.suffix == ".json"):
        return None
    try:
        doc = read_json(path)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def check_png(path: Path) -> str | None:
    """None if ``path`` is a readable PNG file, else what is wrong with it."""
    try:
        with path.open("rb") as f:
            head = f.read(len(PNG_SIGNATURE))
    except FileNotFoundError:
        return "missing"
    except OSError as err:
        return f"not readable ({err.strerror})"
    return None if head == PNG_SIGNATURE else "not a PNG image"


# ---------------------------------------------------------------- eval folders

def _is_eval(path: Path) -> bool:
    from airplay.eval.results import EPISODES_FILE, SUMMARY_FILE

    if path.is_file():
        return path.name in (EPISODES_FILE, SUMMARY_FILE)
    return path.is_dir() and ((path / SUMMARY_FILE).is_file() or (path / EPISODES_FILE).is_file())


def _read_episodes(run: Run, path: Path) -> tuple[list, list[dict]]:
    """The readable episodes of ``path`` (``EpisodeResult`` and the raw line), problems for the rest."""
    from airplay.eval.metrics import EpisodeResult

    episodes, records, bad = [], [], 0
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        run.problem(path, f"not readable ({err}); no per-episode rows")
        return [], []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            episodes.append(EpisodeResult.from_json(record))
            records.append(record)
        except (ValueError, TypeError) as err:
            bad += 1
            if bad <= MAX_BAD_LINES:
                run.problem(f"{path}:{lineno}", f"{err}; line left out")
    if bad > MAX_BAD_LINES:
        run.problem(path, f"{bad - MAX_BAD_LINES} more unreadable lines left out")
    return episodes, records


def _scenes_here(meta: dict) -> tuple[dict[str, dict], dict[str, Path]]:
    """``({scene: {"category", "split"}}, {scene: folder})``: the categories and splits from
    ``meta.scene_info``, else from the scene folders named in ``meta.scenes`` where they exist on this
    machine (else nothing: shown as unknown); the folders that exist here (for the top-down render)."""
    from airplay.scene.spec import parse_scene_yaml

    info, folders = {}, {}
    for folder in meta.get("scenes") or []:
        try:
            spec = parse_scene_yaml(folder)
        except Exception:  # noqa: BLE001 - a scene folder not here (or not readable) leaves it unknown
            continue
        info[spec.name] = {"category": spec.category, "split": spec.split}
        folders[spec.name] = Path(spec.root)
    recorded = meta.get("scene_info")
    if isinstance(recorded, dict):
        info = {str(k): v for k, v in recorded.items() if isinstance(v, dict)}
    return info, folders


def _load_eval(path: Path) -> list[Run]:
    from airplay.eval.aggregate import aggregate
    from airplay.eval.results import EPISODES_FILE, RESULTS_FORMAT, SUMMARY_FILE

    folder = path.parent if path.is_file() else path
    run = Run("eval", folder, label=folder.name)
    summary_path, episodes_path = folder / SUMMARY_FILE, folder / EPISODES_FILE

    summary = None
    if summary_path.is_file():
        try:
            summary = read_json(summary_path)
            if not isinstance(summary, dict):
                raise ValueError(f"{summary_path}: not a JSON object")
        except ValueError as err:
            run.problems.append(f"{err}; its metrics are not shown")
            summary = None
    meta = summary.get("meta") if summary else None
    meta = meta if isinstance(meta, dict) else {}
    if summary is not None:
        version = meta.get("results_format")
        if version is None:
            run.problem(summary_path, f"no meta.results_format (this airplay writes {RESULTS_FORMAT}): written by "
                                      "another program or version; shown as far as it can be read")
        elif version != RESULTS_FORMAT:
            run.problem(summary_path, f"results_format {version!r}, this airplay reads {RESULTS_FORMAT}: shown as far "
                                      "as it can be read")
        for key in ("overall", "per_scene"):
            if not isinstance(summary.get(key), dict):
                run.problem(summary_path, f"no {key!r} metrics")
                summary[key] = {}

    if episodes_path.is_file():
        episodes, records = _read_episodes(run, episodes_path)
    else:
        episodes, records = [], []
        run.problem(episodes_path, "missing: no per-episode rows, no split or category rows")

    if summary is None and episodes:
        try:
            summary = aggregate(episodes)
            run.problem(summary_path, "missing or unreadable: metrics recomputed from episodes.jsonl "
                                      "(success radius 1 m, 1000 bootstrap replicates, seed 0)")
        except ValueError as err:
            run.problem(episodes_path, f"metrics not computed: {err}")
    elif summary is None:
        run.problem(summary_path, "missing")
    if not episodes and not (summary or {}).get("per_scene"):
        run.problem(folder, "empty run: no episodes")

    first = episodes[0] if episodes else None
    meta_policy = meta.get("policy") or (first.policy if first else "")
    setting = meta.get("setting") or (first.setting if first else "") or "unknown setting"
    label = meta_policy or folder.name
    details = []
    if meta.get("checkpoint"):
        details.append(checkpoint_label(meta["checkpoint"]))
    if meta.get("execution_horizon"):
        details.append(f"H={meta['execution_horizon']}")
    if details:
        label += f" ({', '.join(details)})"
    run.label = label

    scenes = list(dict.fromkeys([*(summary or {}).get("per_scene", {}), *(e.scene for e in episodes)]))
    plots: dict[str, Path | None] = {}
    for scene in scenes:
        png = folder / f"{scene}_trajectories.png"
        error = check_png(png)
        if error:
            run.problem(png, f"{error}: the trajectory plot of scene {scene!r} is not shown")
        plots[scene] = None if error else png
    known = set(plots.values())
    run.figures = [p for p in sorted(folder.glob("*.png")) if p not in known and check_png(p) is None]
    run.raw = [p for p in sorted(folder.glob("*.json")) if p != summary_path]
    run.data = {"summary": summary, "meta": meta, "episodes": episodes, "records": records, "setting": setting,
                "scenes": scenes, "plots": plots}
    run.data["scene_info"], run.data["scene_dirs"] = _scenes_here(meta)
    return [run]


# ---------------------------------------------------------------- offline JSON files

def _is_offline(path: Path) -> bool:
    doc = _json_object(path)
    return bool(doc) and isinstance(doc.get("overall"), dict) and "ade_cm" in doc["overall"]


def _load_offline(path: Path) -> list[Run]:
    doc = read_json(path)
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    label = meta.get("policy") or path.stem
    if meta.get("checkpoint"):
        label += f" ({checkpoint_label(meta['checkpoint'])})"
    run = Run("offline", path, label, data={"result": doc, "meta": meta})
    if not meta:
        run.problem(path, "no 'meta': the checkpoint, dataset and horizon are not shown")
    if not isinstance(doc.get("per_scene"), dict):
        run.problem(path, "no 'per_scene' results")
    return [run]


def _is_relate(path: Path) -> bool:
    doc = _json_object(path)
    return bool(doc) and isinstance(doc.get("rows"), list) and isinstance(doc.get("correlations"), dict)


def _load_relate(path: Path) -> list[Run]:
    doc = read_json(path)
    meta = doc.get("meta") if isinstance(doc.get("meta"), dict) else {}
    return [Run("relate", path, path.stem, data={"result": doc, "meta": meta})]


# ---------------------------------------------------------------- airplay sweep / airplay disturb folders

SWEEP_FORMAT = 1
DISTURB_FORMAT = 1


def _protocol_file(path: Path, name: str, key: str) -> dict | None:
    """The JSON object of ``path/name`` (or ``path`` itself when named so) if it carries ``key``."""
    file = path / name if path.is_dir() else path
    doc = _json_object(file) if file.name == name else None
    return doc if doc is not None and key in doc else None


def _is_sweep(path: Path) -> bool:
    return _protocol_file(path, "sweep.json", "sweep_format") is not None


def _load_sweep(path: Path) -> list[Run]:
    """An ``airplay sweep`` folder: ``sweep.json`` (SR and CR per H), ``sweep.png``, ``pairs_*.png`` and
    one eval folder per H (each a column of the closed-loop tables)."""
    folder = path if path.is_dir() else path.parent
    doc = _protocol_file(path, "sweep.json", "sweep_format") or {}
    label = str(doc.get("policy") or folder.name)
    if doc.get("checkpoint"):
        label += f" ({checkpoint_label(doc['checkpoint'])})"
    run = Run("sweep", folder, label, data={"result": doc, "meta": {k: v for k, v in doc.items() if k != "metrics"}})
    if doc.get("sweep_format") != SWEEP_FORMAT:
        run.problem(folder / "sweep.json", f"sweep_format {doc.get('sweep_format')!r}, this airplay reads "
                                           f"{SWEEP_FORMAT}: shown as far as it can be read")
    run.figures = [p for p in sorted(folder.glob("*.png")) if check_png(p) is None]
    runs = [run]
    folders = doc.get("results_folders") if isinstance(doc.get("results_folders"), dict) else {}
    for h, name in folders.items():
        sub = folder / str(name)
        if _is_eval(sub):
            runs += _load_eval(sub)
        else:
            run.problem(sub, f"missing: the eval results of H = {h}")
    return runs


def _is_disturb(path: Path) -> bool:
    return _protocol_file(path, "disturb.json", "disturb_format") is not None


def _load_disturb(path: Path) -> list[Run]:
    """An ``airplay disturb`` folder: ``disturb.json`` (CR_ref and d_min_ref per clearance group and condition)."""
    folder = path if path.is_dir() else path.parent
    doc = _protocol_file(path, "disturb.json", "disturb_format") or {}
    label = str(doc.get("policy") or folder.name)
    if doc.get("checkpoint"):
        label += f" ({checkpoint_label(doc['checkpoint'])})"
    run = Run("disturb", folder, label, data={"result": doc, "meta": {k: v for k, v in doc.items() if k != "table"}})
    if doc.get("disturb_format") != DISTURB_FORMAT:
        run.problem(folder / "disturb.json", f"disturb_format {doc.get('disturb_format')!r}, this airplay reads "
                                             f"{DISTURB_FORMAT}: shown as far as it can be read")
    if not isinstance(doc.get("table"), dict) or not doc["table"]:
        run.problem(folder / "disturb.json", "no 'table': no anchors were flown")
    run.figures = [p for p in sorted(folder.glob("*.png")) if check_png(p) is None]
    return [run]


# ---------------------------------------------------------------- folders of result folders

MAX_GROUP_DEPTH = 3


def _group_children(path: Path, depth: int = 1) -> list[tuple[Kind, Path]]:
    """The recognised results under ``path`` (sub-folders to :data:`MAX_GROUP_DEPTH`, and JSON files)."""
    found = []
    for child in sorted(path.iterdir()):
        if child.name.startswith("."):
            continue
        kind = next((k for k in KINDS if k.name != "group" and k.detect(child)), None)
        if kind is not None and not (child.is_file() and kind.name == "eval"):
            found.append((kind, child))
        elif child.is_dir() and depth < MAX_GROUP_DEPTH:
            found += _group_children(child, depth + 1)
    return found


def _is_group(path: Path) -> bool:
    return path.is_dir() and bool(_group_children(path))


def _load_group(path: Path) -> list[Run]:
    runs = []
    for kind, child in _group_children(path):
        runs += kind.load(child)
    read = {r.path for r in runs}
    figures = [p for p in sorted(path.glob("*.png")) if check_png(p) is None]
    raw = [p for p in sorted(path.glob("*.json")) if p not in read]
    if figures or raw:
        runs.append(Run("files", path, path.name, figures=figures, raw=raw))
    return runs


KINDS: list[Kind] = [
    Kind("eval", _is_eval, _load_eval),
    Kind("offline", _is_offline, _load_offline),
    Kind("relate", _is_relate, _load_relate),
    Kind("sweep", _is_sweep, _load_sweep),
    Kind("disturb", _is_disturb, _load_disturb),
    Kind("group", _is_group, _load_group),
]
"""Tried in order; ``group`` last, so that a folder that is itself a result is read as one."""


def register_kind(kind: Kind) -> None:
    """Add a result kind, tried before the ``group`` kind (replaces one of the same name)."""
    KINDS[:] = [k for k in KINDS if k.name != kind.name]
    at = next((i for i, k in enumerate(KINDS) if k.name == "group"), len(KINDS))
    KINDS.insert(at, kind)


def load_inputs(paths: list[str | Path]) -> list[Run]:
    """Load every path with the first kind that recognises it; labels made unique.

    Raises:
        ReportInputError: a path does not exist or holds nothing a kind recognises.
    """
    runs: list[Run] = []
    for p in map(Path, paths):
        if not p.exists():
            raise ReportInputError(f"{p}: no such file or folder")
        kind = next((k for k in KINDS if k.detect(p)), None)
        if kind is None:
            what = "folder" if p.is_dir() else "file"
            raise ReportInputError(
                f"{p}: not a results {what} airplay report reads (an `airplay eval` folder with summary.json or "
                f"episodes.jsonl, an `airplay eval-offline --out` JSON file or `offline-vs-closed --out` "
                f"relate.json, or a "
                f"folder holding such results)")
        runs += kind.load(p)
    _unique_labels(runs)
    return runs


def _unique_labels(runs: list[Run]) -> None:
    """Where runs of one kind share a label, add their folder (then its parent) to it."""
    for level in (1, 2):
        seen: dict[tuple[str, str], int] = {}
        for r in runs:
            seen[(r.kind, r.label)] = seen.get((r.kind, r.label), 0) + 1
        for r in runs:
            if seen[(r.kind, r.label)] > 1:
                tail = "/".join(r.path.parts[-level:])
                base = r.label.rsplit(" [", 1)[0] if level > 1 else r.label
                r.label = f"{base} [{tail}]"
