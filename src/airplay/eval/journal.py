"""The running record of an in-process evaluation, and ``airplay eval --resume``.

While ``airplay eval`` runs, ``OUT/episodes.jsonl`` grows by one line per finished episode, in
the order episodes finish (with ``--workers`` not the task order), each line written after the
episode's trajectory ``OUT/trajectories/<scene>/<task_id>.npy`` (float32 (T, 3) map metres, the
start included). At the end the file is rewritten, atomically, in task order (scenes as given,
then task index) and ``summary.json`` is written; so a finished run's files do not depend on how
many workers ran it.

``OUT/eval_config.json`` (written when a run starts) holds what decides an episode's outcome:
scene folders, policy, checkpoint, setting, seed, execution horizon, compute budget, wind,
renderer, whether images are rendered, and the protocol. ``--resume`` refuses a folder whose
``eval_config.json`` (or, for results written without one, ``summary.json``'s ``meta``, and
every line's own ``policy``, ``setting``, ``seed``, ``scene`` and ``task_id``) differs from the
run's, naming the file and the field. ``--episodes`` may grow: tasks are sampled as a prefix
(:func:`airplay.tasks.sampler.sample_tasks`), so the first k tasks of a larger run are the k of
the smaller one.

A line counts as finished when it is complete (ends with a newline), parses, and its trajectory
file exists; a torn last line (the process was killed while writing it) is dropped and its
episode flown again; a line repeated is kept once. A complete line that does not parse, before
the last, is an error naming the file and line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from airplay.eval.metrics import EpisodeResult
from airplay.eval.results import EPISODES_FILE, SUMMARY_FILE, _jsonable, _write_atomic

CONFIG_FILE = "eval_config.json"
TRAJECTORIES = "trajectories"
LOCK_FILE = ".eval.lock"
CONFIG_FORMAT = 1
IDENTITY = ("scenes", "policy", "checkpoint", "setting", "seed", "execution_horizon", "policy_budget_ms", "wind",
            "render_backend", "render_images", "protocol")
"""The fields of ``eval_config.json`` a resumed run must share (``episodes`` may differ)."""


class ResumeError(ValueError):
    """A results folder that ``--resume`` cannot continue; the message names the file and field."""


def trajectory_path(out_dir: Path, scene: str, task_id: str) -> Path:
    return Path(out_dir) / TRAJECTORIES / scene / f"{task_id}.npy"


def save_trajectory(out_dir: Path, scene: str, task_id: str, trajectory: np.ndarray) -> None:
    """Write ``trajectories/<scene>/<task_id>.npy`` (float32) atomically."""
    path = trajectory_path(out_dir, scene, task_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        np.save(f, np.asarray(trajectory, dtype=np.float32))
    os.replace(tmp, path)


def load_trajectory(out_dir: Path, scene: str, task_id: str) -> np.ndarray:
    return np.load(trajectory_path(out_dir, scene, task_id))


class Lock:
    """An exclusive advisory lock on ``OUT/.eval.lock``: one evaluation writes a folder at a time."""

    def __init__(self, out_dir: Path) -> None:
        self.path = Path(out_dir) / LOCK_FILE
        self.file = None

    def __enter__(self):
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "a")
        try:
            fcntl.flock(self.file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.file.close()
            raise ResumeError(f"{self.path}: another `airplay eval` is writing into {self.path.parent}") from None
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def run_identity(cfg, protocol: dict) -> dict:
    """The ``eval_config.json`` document of an :class:`airplay.eval.runner.EvalConfig`."""
    from airplay.sim.disturbance import Disturbance

    return _jsonable({
        "eval_config_format": CONFIG_FORMAT,
        "scenes": [str(Path(s).resolve()) for s in cfg.scenes],
        "policy": cfg.policy,
        "checkpoint": str(Path(cfg.checkpoint).resolve()) if cfg.checkpoint else "",
        "setting": cfg.setting,
        "seed": int(cfg.seed),
        "execution_horizon": int(cfg.execution_horizon),
        "policy_budget_ms": float(cfg.policy_budget_ms),
        "wind": Disturbance.parse(cfg.wind).to_text() if cfg.wind else "",
        "render_backend": cfg.render_backend,
        "render_images": bool(cfg.render_images),
        "protocol": protocol,
        "episodes": int(cfg.episodes),
    })


def _refuse(path: Path, name: str, theirs, ours) -> ResumeError:
    return ResumeError(f"{path}: field '{name}' is {theirs!r} there but {ours!r} in this run; --resume continues "
                       f"a run with the same settings (give the same options, or another --out)")


def _check_identity(out_dir: Path, identity: dict) -> None:
    """Compare this run with the folder's ``eval_config.json``, else ``summary.json``'s meta."""
    config = out_dir / CONFIG_FILE
    if config.is_file():
        try:
            theirs = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ResumeError(f"{config}: not readable as JSON ({e}); remove it or use another --out") from None
        for name in IDENTITY:
            if theirs.get(name) != identity[name]:
                raise _refuse(config, name, theirs.get(name), identity[name])
        return
    summary = out_dir / SUMMARY_FILE
    if summary.is_file():
        try:
            meta = json.loads(summary.read_text(encoding="utf-8")).get("meta", {})
        except (OSError, ValueError, AttributeError) as e:
            raise ResumeError(f"{summary}: not readable as JSON ({e}); remove it or use another --out") from None
        ours = {"policy": identity["policy"], "setting": identity["setting"], "seed": identity["seed"],
                "scenes": identity["scenes"], "checkpoint": identity["checkpoint"],
                "execution_horizon": identity["execution_horizon"], "wind": identity["wind"]}
        theirs = {"policy": meta.get("policy"), "setting": meta.get("setting"), "seed": meta.get("seed"),
                  "scenes": [str(Path(s).resolve()) for s in meta.get("scenes", [])],
                  "checkpoint": str(Path(meta["checkpoint"]).resolve()) if meta.get("checkpoint") else "",
                  "execution_horizon": meta.get("execution_horizon", 0), "wind": meta.get("wind", "")}
        for name, value in ours.items():
            if theirs[name] != value:
                raise _refuse(summary, f"meta.{name}", theirs[name], value)


@dataclass
class Journal:
    """The finished episodes found in a results folder, keyed by (scene, task_id), in file order."""

    done: dict[tuple[str, str], EpisodeResult] = field(default_factory=dict)
    lines: dict[tuple[str, str], str] = field(default_factory=dict)
    dropped_torn: int = 0
    dropped_no_trajectory: int = 0


def read_journal(out_dir: Path, identity: dict, task_ids: dict[str, list[str]]) -> Journal:
    """The finished episodes of ``OUT/episodes.jsonl`` for ``--resume`` (module docstring);
    ``task_ids``: this run's scene name -> task ids. Raises :class:`ResumeError`."""
    out_dir = Path(out_dir)
    _check_identity(out_dir, identity)
    path = out_dir / EPISODES_FILE
    journal = Journal()
    if not path.is_file():
        return journal
    data = path.read_bytes()
    pieces = data.split(b"\n")
    if pieces[-1]:  # no newline at the end: the last line was torn
        journal.dropped_torn = 1
    pieces = pieces[:-1]
    wanted = {(scene, tid) for scene, ids in task_ids.items() for tid in ids}
    checks = (("policy", identity["policy"]), ("setting", identity["setting"]), ("seed", identity["seed"]))
    for lineno, raw in enumerate(pieces, 1):
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
            result = EpisodeResult.from_json(line)
        except (ValueError, TypeError) as e:
            if lineno == len(pieces) and journal.dropped_torn == 0:
                journal.dropped_torn = 1  # a last line cut short (e.g. a full disk): fly it again
                continue
            raise ResumeError(f"{path}:{lineno}: not an episode line ({e}); remove the line or use another --out") \
                from None
        for name, ours in checks:
            theirs = getattr(result, name)
            if theirs != ours:
                raise _refuse(Path(f"{path}:{lineno}"), name, theirs, ours)
        key = (result.scene, str(result.task_id))
        if key not in wanted:
            if result.scene not in task_ids:
                raise ResumeError(f"{path}:{lineno}: field 'scene' is {result.scene!r}, not one of this run's scenes "
                                  f"{sorted(task_ids)} (--scenes)")
            raise ResumeError(f"{path}:{lineno}: task {result.task_id!r} is not among this run's "
                              f"{len(task_ids[result.scene])} tasks of {result.scene} (--episodes is smaller than "
                              "the run's it continues)")
        if key in journal.done:
            continue
        if not trajectory_path(out_dir, *key).is_file():
            journal.dropped_no_trajectory += 1
            continue
        journal.done[key] = result
        journal.lines[key] = line
    return journal


def start(out_dir: Path, identity: dict, journal: Journal | None) -> None:
    """Prepare ``out_dir`` for appending: for a fresh run remove the results a previous run left
    (``episodes.jsonl``, ``summary.json``, ``trajectories/*/*.npy``); for a resumed one rewrite
    ``episodes.jsonl`` with the finished lines only; write ``eval_config.json``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = out_dir / SUMMARY_FILE
    if summary.exists():
        summary.unlink()  # rewritten at the end; a stale one would describe other episodes
    if journal is None:
        traj = out_dir / TRAJECTORIES
        if traj.is_dir():
            for f in traj.glob("*/*.npy"):
                f.unlink()
            for d in traj.iterdir():
                if d.is_dir() and not any(d.iterdir()):
                    d.rmdir()
        _write_atomic(out_dir / EPISODES_FILE, "")
    else:
        _write_atomic(out_dir / EPISODES_FILE, "".join(line + "\n" for line in journal.lines.values()))
    _write_atomic(out_dir / CONFIG_FILE, json.dumps(identity, indent=2, allow_nan=False) + "\n")


class Appender:
    """Appends one episode (trajectory file, then its line, flushed to disk) at a time."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = Path(out_dir)
        self.file = open(self.out_dir / EPISODES_FILE, "ab")

    def add(self, result: EpisodeResult, trajectory: np.ndarray) -> None:
        save_trajectory(self.out_dir, result.scene, str(result.task_id), trajectory)
        line = json.dumps(_jsonable(result.to_dict()), allow_nan=False) + "\n"
        self.file.write(line.encode("utf-8"))
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()

