"""VLN episodes: start pose, goal, reference path, instruction, persona, landmarks.

Made from sampled tasks (:func:`episodes_from_tasks`: the protocol's sampler, the A* path as
reference path, an instruction by :mod:`airplay.vln.instructions` in a persona chosen
round-robin from the seed), written and read as JSON (:func:`write_episodes`,
:func:`read_episodes`), or imported from AirNav / CityNav / AerialVLN-style files
(:func:`import_episodes`). Positions are in the scene's map frame (ENU, metres); yaw in
radians counter-clockwise from east.

airplay's file: ``{"format": "airplay-vln-episodes", "version": 1, "episodes": [ {episode}, ... ]}``
with the fields of :meth:`VLNEpisode.to_dict`.

Imported files (VLN-CE layout used by AerialVLN and followed by AirNav / CityNav releases):
``{"episodes": [...]}`` or a bare list; per episode ``episode_id``; ``scene_id`` / ``map_name``
/ ``scene`` (optional); ``start_position`` [x, y, z]; the start heading as
``start_rotation`` (quaternion, ``rotation_order`` "xyzw" default or "wxyz"), ``start_yaw_deg``
or ``start_heading_deg`` (degrees, CCW from east); ``instruction`` (a string or
``{"instruction_text": ...}``); the goal as ``goals[0].position`` or ``goal_position``;
optional ``reference_path`` ([[x, y, z, ...], ...], extra columns ignored), ``persona``,
``landmarks`` (names). Coordinates must already be in the scene's map frame; ``scale`` and
``offset`` map them (p_map = scale * p + offset) when they are not. Every error names the
file and the field (``episodes[3].goals[0].position``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from airplay.frames import yaw_from_quat
from airplay.vln.instructions import PERSONA_NAMES, generate_instruction, landmarks_from_spec

FORMAT = "airplay-vln-episodes"
VERSION = 1


class EpisodeFileError(ValueError):
    """A bad episode file; the message names the file and the field."""


@dataclass(frozen=True)
class VLNEpisode:
    """One VLN episode (map frame, metres, radians).

    reference_path: (K, 3) the expert path, start to goal; astar_length_m its length (the
    shortest length of SPL's A* variant); landmarks: names of the scene's landmarks the
    instruction mentions.
    """

    episode_id: str
    scene: str
    start_position: np.ndarray
    start_yaw: float
    goal_position: np.ndarray
    reference_path: np.ndarray = field(repr=False)
    instruction: str
    persona: str = "imported"
    landmarks: tuple[str, ...] = ()
    astar_length_m: float = 0.0
    goal_yaw: float = 0.0

    @property
    def task_id(self) -> str:
        return self.episode_id

    @property
    def euclidean_distance_m(self) -> float:
        return float(np.linalg.norm(np.asarray(self.goal_position) - np.asarray(self.start_position)))

    def to_task(self, time_limit_s: float):
        """The :class:`airplay.tasks.sampler.Task` (setting goalfree: the goal is withheld) the
        environment flies, with ``time_limit_s``."""
        from airplay.tasks.sampler import Task

        return Task(task_id=self.episode_id, scene=self.scene, setting="goalfree",
                    start_position=np.asarray(self.start_position, float), start_yaw=float(self.start_yaw),
                    goal_position=np.asarray(self.goal_position, float), goal_yaw=float(self.goal_yaw),
                    path_m=np.asarray(self.reference_path, float), astar_length_m=float(self.astar_length_m),
                    euclidean_distance_m=self.euclidean_distance_m, time_limit_s=float(time_limit_s))

    def to_dict(self) -> dict:
        return {
            "episode_id": self.episode_id, "scene": self.scene,
            "start_position": [round(float(v), 4) for v in self.start_position], "start_yaw": float(self.start_yaw),
            "goal_position": [round(float(v), 4) for v in self.goal_position], "goal_yaw": float(self.goal_yaw),
            "reference_path": [[round(float(v), 4) for v in p] for p in np.asarray(self.reference_path)],
            "astar_length_m": float(self.astar_length_m), "instruction": self.instruction,
            "persona": self.persona, "landmarks": list(self.landmarks),
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "episode") -> "VLNEpisode":
        try:
            path = np.asarray(d.get("reference_path") or [d["start_position"], d["goal_position"]], float)
            return cls(episode_id=str(d["episode_id"]), scene=str(d.get("scene", "")),
                       start_position=_vec3(d["start_position"], f"{where}.start_position"),
                       start_yaw=float(d.get("start_yaw", 0.0)),
                       goal_position=_vec3(d["goal_position"], f"{where}.goal_position"),
                       goal_yaw=float(d.get("goal_yaw", 0.0)), reference_path=path[:, :3],
                       astar_length_m=float(d.get("astar_length_m", _length(path[:, :3]))),
                       instruction=_instruction(d.get("instruction"), f"{where}.instruction"),
                       persona=str(d.get("persona", "imported")), landmarks=tuple(d.get("landmarks", ())))
        except KeyError as err:
            raise EpisodeFileError(f"{where}: missing field {err.args[0]!r}") from None
        except (TypeError, ValueError, IndexError) as err:
            if isinstance(err, EpisodeFileError):
                raise
            raise EpisodeFileError(f"{where}: {err}") from None


def _length(path: np.ndarray) -> float:
    return float(np.linalg.norm(np.diff(path, axis=0), axis=1).sum()) if len(path) > 1 else 0.0


def _vec3(value, where: str) -> np.ndarray:
    try:
        a = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise EpisodeFileError(f"{where}: must be [x, y, z] in metres, got {value!r}") from None
    if a.shape != (3,) or not np.isfinite(a).all():
        raise EpisodeFileError(f"{where}: must be 3 finite numbers [x, y, z] in metres, got {value!r}")
    return a


def _instruction(value, where: str) -> str:
    if isinstance(value, dict):
        value = value.get("instruction_text", value.get("text"))
    if not isinstance(value, str) or not value.strip():
        raise EpisodeFileError(f"{where}: must be a non-empty string (or {{\"instruction_text\": ...}})")
    return value.strip()


def episodes_from_tasks(tasks, landmarks: list | None = None, seed: int = 0, personas: tuple[str, ...] = PERSONA_NAMES,
                        instruction_fn=None) -> list[VLNEpisode]:
    """VLN episodes for sampled tasks (:func:`airplay.tasks.sampler.sample_tasks`): the A* path
    is the reference path; persona ``personas[(seed + i) % len]``; the instruction from
    :func:`generate_instruction` (or ``instruction_fn(task, persona, landmarks) -> str``)."""
    lms = landmarks_from_spec(landmarks or [])
    out = []
    for i, task in enumerate(tasks):
        persona = personas[(seed + i) % len(personas)]
        if instruction_fn is not None:
            text = instruction_fn(task, persona, lms)
        else:
            text = generate_instruction(task.path_m, task.start_yaw, lms, persona, seed=seed * 100003 + i)
        named = tuple(lm.name for lm in lms if lm.name in text)
        out.append(VLNEpisode(
            episode_id=str(task.task_id), scene=task.scene, start_position=np.asarray(task.start_position, float),
            start_yaw=float(task.start_yaw), goal_position=np.asarray(task.goal_position, float),
            goal_yaw=float(task.goal_yaw), reference_path=np.asarray(task.path_m, float),
            astar_length_m=float(task.astar_length_m), instruction=text, persona=persona, landmarks=named))
    return out


def sample_vln_episodes(world, n: int, seed: int, personas: tuple[str, ...] = PERSONA_NAMES,
                        max_dz_m: float | None = None) -> list[VLNEpisode]:
    """``n`` episodes in a :class:`~airplay.world.World`: tasks from the protocol's sampler
    (as for PointGoal), instructions naming the scene's landmarks.

    max_dz_m: keep only tasks whose goal is within this height of the start (for action
    spaces without ASCEND/DESCEND, which cannot change height); tasks are then drawn from a
    larger deterministic sample (4 n, then 16 n) in the sampler's order.
    """
    from airplay.tasks.sampler import TaskSamplingError, sample_tasks

    lms = world.scene.spec.landmarks
    landmarks_from_spec(lms, str(world.scene.spec.root / "scene.yaml"))  # validate with the file named
    if max_dz_m is None:
        tasks = sample_tasks(world.scene, world.grid, n, seed, "goalfree", world.protocol)
    else:
        tasks = []
        for factor in (4, 16):
            try:
                pool = sample_tasks(world.scene, world.grid, factor * n, seed, "goalfree", world.protocol)
            except TaskSamplingError:
                continue
            tasks = [t for t in pool if abs(t.goal_position[2] - t.start_position[2]) <= max_dz_m][:n]
            if len(tasks) == n:
                break
        if len(tasks) < n:
            raise TaskSamplingError(f"{world.name}: only {len(tasks)} of {n} tasks keep the goal within "
                                    f"{max_dz_m:.2f} m of the start height; enable ASCEND/DESCEND "
                                    f"(extra_actions in config/vln.yaml) or ask for fewer episodes")
    return episodes_from_tasks(tasks, lms, seed, personas)


def write_episodes(path: str | Path, episodes: list[VLNEpisode]) -> Path:
    """Write airplay's episode file (JSON)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "version": VERSION, "episodes": [e.to_dict() for e in episodes]}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def read_episodes(path: str | Path) -> list[VLNEpisode]:
    """Read airplay's episode file, or import another layout (:func:`import_episodes`)."""
    path = Path(path)
    doc = _load(path)
    if isinstance(doc, dict) and doc.get("format") == FORMAT:
        if doc.get("version") != VERSION:
            raise EpisodeFileError(f"{path}: version {doc.get('version')!r}; this airplay reads version {VERSION}")
        items = doc.get("episodes")
        if not isinstance(items, list):
            raise EpisodeFileError(f"{path}: field 'episodes' must be a list")
        return [VLNEpisode.from_dict(d, f"{path}: episodes[{i}]") for i, d in enumerate(items)]
    return import_episodes(path)


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise EpisodeFileError(f"{path}: cannot read: {err}") from None
    except json.JSONDecodeError as err:
        raise EpisodeFileError(f"{path}: not JSON: {err}") from None


def _yaw_of(d: dict, where: str) -> float:
    if "start_yaw_deg" in d or "start_heading_deg" in d:
        key = "start_yaw_deg" if "start_yaw_deg" in d else "start_heading_deg"
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise EpisodeFileError(f"{where}.{key}: must be a number (degrees CCW from east), got {v!r}")
        return math.radians(float(v))
    if "start_yaw" in d:
        return float(d["start_yaw"])
    q = d.get("start_rotation")
    if q is None:
        return 0.0
    try:
        q = np.asarray(q, dtype=float)
    except (TypeError, ValueError):
        q = np.zeros(0)
    if q.shape != (4,) or not np.isfinite(q).all() or np.linalg.norm(q) < 1e-9:
        raise EpisodeFileError(f"{where}.start_rotation: must be a non-zero quaternion of 4 numbers, got {d['start_rotation']!r}")
    order = d.get("rotation_order", "xyzw")
    if order not in ("xyzw", "wxyz"):
        raise EpisodeFileError(f"{where}.rotation_order: must be 'xyzw' or 'wxyz', got {order!r}")
    x, y, z, w = q if order == "xyzw" else (q[1], q[2], q[3], q[0])
    return yaw_from_quat(float(x), float(y), float(z), float(w))


def import_episodes(path: str | Path, scene: str | None = None, scale: float = 1.0,
                    offset=(0.0, 0.0, 0.0)) -> list[VLNEpisode]:
    """Import an AirNav / CityNav / AerialVLN-style file (see the module docstring)."""
    path = Path(path)
    doc = _load(path)
    items = doc.get("episodes") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise EpisodeFileError(f"{path}: expected {{\"episodes\": [...]}} or a list of episodes")
    off = np.asarray(offset, float)
    out = []
    for i, d in enumerate(items):
        where = f"{path}: episodes[{i}]"
        if not isinstance(d, dict):
            raise EpisodeFileError(f"{where}: must be an object")
        if "episode_id" not in d:
            raise EpisodeFileError(f"{where}: missing field 'episode_id'")
        if "start_position" not in d:
            raise EpisodeFileError(f"{where}: missing field 'start_position'")
        start = _vec3(d["start_position"], f"{where}.start_position") * scale + off
        if "goals" in d:
            goals = d["goals"]
            if not isinstance(goals, list) or not goals or not isinstance(goals[0], dict) or "position" not in goals[0]:
                raise EpisodeFileError(f"{where}.goals: must be a non-empty list of {{\"position\": [x, y, z]}}")
            goal = _vec3(goals[0]["position"], f"{where}.goals[0].position")
        elif "goal_position" in d:
            goal = _vec3(d["goal_position"], f"{where}.goal_position")
        else:
            raise EpisodeFileError(f"{where}: missing field 'goals' (or 'goal_position')")
        goal = goal * scale + off
        ref = d.get("reference_path")
        if ref is not None:
            try:
                ref_a = np.asarray([p[:3] for p in ref], dtype=float)
            except (TypeError, ValueError, IndexError):
                raise EpisodeFileError(f"{where}.reference_path: must be a list of [x, y, z, ...] points") from None
            if ref_a.ndim != 2 or ref_a.shape[1] != 3 or len(ref_a) < 1 or not np.isfinite(ref_a).all():
                raise EpisodeFileError(f"{where}.reference_path: must be a list of [x, y, z, ...] points")
            ref_a = ref_a * scale + off
        else:
            ref_a = np.stack([start, goal])
        persona = str(d.get("persona", "imported"))
        scene_name = scene or str(d.get("scene_id", d.get("map_name", d.get("scene", ""))))
        lms = d.get("landmarks", ())
        out.append(VLNEpisode(
            episode_id=str(d["episode_id"]), scene=scene_name, start_position=start, start_yaw=_yaw_of(d, where),
            goal_position=goal, reference_path=ref_a, astar_length_m=_length(ref_a),
            instruction=_instruction(d.get("instruction"), f"{where}.instruction"), persona=persona,
            landmarks=tuple(str(x) for x in lms) if isinstance(lms, list) else ()))
    return out


def for_scene(episodes: list[VLNEpisode], scene: str) -> list[VLNEpisode]:
    """The episodes of ``scene`` (those without a scene name are given it)."""
    return [e if e.scene else replace(e, scene=scene) for e in episodes if e.scene in ("", scene)]
