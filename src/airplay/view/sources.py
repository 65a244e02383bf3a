"""What ``airplay view`` shows, read without rerun: an episode bag, a LeRobot dataset or eval results.

:func:`read_source` tells the three apart (a folder with ``.mcap`` files or ``metadata.yaml``, a
folder with ``meta/info.json``, a folder with ``episodes.jsonl``) and reads them into
:class:`Flight` records; every problem is a :class:`ViewError` naming the file.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

KINDS = ("bag", "dataset", "results")
CONTROL_DT_NS = 20_000_000
"""Nanoseconds per step of an eval trajectory (the 50 Hz control rate)."""


class ViewError(ValueError):
    """An input ``airplay view`` cannot show; the message names the file and the problem."""


@dataclass
class Flight:
    """One episode as ``airplay view`` logs it.

    ``times_ns (T,)`` int64: sim time of each sample (ns); ``position (T, 3)`` map ENU m; ``yaw (T,)`` rad
    or None; ``rgb (T, H, W, 3)``, ``depth (T, H, W)`` m, ``action (T, 4)`` [vx vy vz yaw_rate]
    heading frame, each or None; ``goal (3,)`` map m or None; ``camera_k (3, 3)`` or None;
    ``statuses``: ``(time_ns, text)`` in order; ``status``: how the episode ended.
    """

    name: str
    scene: str | None
    times_ns: np.ndarray
    position: np.ndarray
    yaw: np.ndarray | None = None
    rgb: np.ndarray | None = None
    depth: np.ndarray | None = None
    action: np.ndarray | None = None
    goal: np.ndarray | None = None
    goal_image: np.ndarray | None = None
    camera_k: np.ndarray | None = None
    statuses: list[tuple[int, str]] = field(default_factory=list)
    status: str = ""
    metadata: dict = field(default_factory=dict)


@dataclass
class Source:
    """What was read: its kind (:data:`KINDS`), path, flights and the scene folders it names."""

    kind: str
    path: Path
    flights: list[Flight]
    scene_folders: list[Path] = field(default_factory=list)


def kind_of(path: Path) -> str:
    """"bag", "dataset" or "results"; ViewError naming ``path`` when it is none of them."""
    if path.is_file() and path.name == "episodes.jsonl":
        return "results"
    if path.is_file() and path.suffix == ".mcap":
        return "bag"
    if not path.exists():
        raise ViewError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / "meta" / "info.json").is_file():
            return "dataset"
        if (path / "episodes.jsonl").is_file():
            return "results"
        if (path / "metadata.yaml").is_file() or any(path.glob("*.mcap")):
            return "bag"
    raise ViewError(f"{path}: not an episode bag (no .mcap file, no metadata.yaml), a LeRobot dataset "
                    "(no meta/info.json) nor an eval results folder (no episodes.jsonl)")


def read_source(path, episode: int = 0) -> Source:
    """Read ``path`` (a bag folder or one of its .mcap files, a dataset, a results folder or its
    episodes.jsonl). ``episode``: which episode of a dataset (its episode_index)."""
    path = Path(path)
    kind = kind_of(path)
    if kind == "bag":
        return Source("bag", path, [read_bag_flight(path.parent if path.is_file() else path)])
    if kind == "dataset":
        return Source("dataset", path, [read_dataset_flight(path, episode)])
    return read_results(path.parent if path.is_file() else path)


def _yaw_of(quat_xyzw: np.ndarray) -> np.ndarray:
    x, y, z, w = (quat_xyzw[:, i] for i in range(4))
    return np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def read_bag_flight(bag_dir: Path) -> Flight:
    """The episode of an airplay bag (:func:`airplay.data.bag_reader.read_episode`) with its
    /episode/status messages."""
    from airplay.data import messages as m
    from airplay.data.bag_reader import BagError, iter_bag_messages, read_episode

    try:
        ep = read_episode(bag_dir)
        statuses = []
        for _, _, log_ns, cdr in iter_bag_messages(bag_dir, topics=["/episode/status"]):
            text = m.decode("std_msgs/msg/String", cdr).data
            try:  # the trajectory inside a terminal status is drawn in 3D, not printed
                text = json.dumps({k: v for k, v in json.loads(text).items() if k != "trajectory"})
            except (json.JSONDecodeError, AttributeError):
                pass
            statuses.append((int(log_ns), text))
    except BagError as err:
        raise ViewError(str(err)) from None
    except (OSError, ValueError, KeyError) as err:  # a file that is not MCAP, a message that does not decode
        raise ViewError(f"{bag_dir}: not a readable episode bag ({type(err).__name__}: {err})") from None
    meta = dict(ep.metadata)
    return Flight(name=str(meta.get("task_id") or bag_dir.name), scene=meta.get("scene"),
                  times_ns=np.asarray(ep.stamps_ns, np.int64), position=ep.state[:, :3], yaw=_yaw_of(ep.state[:, 3:7]),
                  rgb=ep.rgb, depth=ep.depth, action=ep.action, goal=ep.goal_position, goal_image=ep.goal_image,
                  camera_k=ep.camera_k, statuses=statuses, status=str(meta.get("status", "")), metadata=meta)


def read_dataset_flight(root: Path, episode: int) -> Flight:
    """Episode ``episode`` of a LeRobot dataset written by ``airplay dataset export`` (the goal,
    stored relative to the vehicle, is put back into map)."""
    from airplay.data import keys
    from airplay.data.lerobot import DatasetError, LeRobotDataset

    try:
        ds = LeRobotDataset(root)
        if not 0 <= episode < ds.num_episodes:
            raise ViewError(f"{root}: no episode {episode} (the dataset has {ds.num_episodes})")
        ep = ds.episode(episode)
    except DatasetError as err:
        raise ViewError(str(err)) from None
    except (OSError, KeyError, ValueError) as err:
        if isinstance(err, ViewError):
            raise
        raise ViewError(f"{root}: not a readable LeRobot dataset ({type(err).__name__}: {err})") from None
    if keys.STATE_KEY not in ep:
        raise ViewError(f"{root}: no {keys.STATE_KEY!r} feature (not an airplay dataset)")
    state = np.asarray(ep[keys.STATE_KEY], np.float64)
    yaw = _yaw_of(state[:, 3:7])
    goal = None
    if keys.GOAL_KEY in ep and len(state):
        rel = np.asarray(ep[keys.GOAL_KEY][0], np.float64)  # heading frame of the first frame
        c, s = math.cos(yaw[0]), math.sin(yaw[0])
        goal = state[0, :3] + np.array([c * rel[0] - s * rel[1], s * rel[0] + c * rel[1], rel[2]])
    meta = {str(k): v for k, v in ep["meta"].items()}
    goal_images = ep.get(keys.GOAL_IMAGE_KEY)
    return Flight(name=str(meta.get("task_id") or f"episode_{episode}"), scene=meta.get("scene"),
                  times_ns=np.round(np.asarray(ep["timestamp"], np.float64) * 1e9).astype(np.int64),
                  position=state[:, :3], yaw=yaw,
                  rgb=ep.get(keys.RGB_KEY), depth=ep.get(keys.DEPTH_KEY), action=ep.get(keys.ACTION_KEY),
                  goal=goal, goal_image=None if goal_images is None else goal_images[0],
                  status=str(meta.get("status", "")), metadata={**meta, "task": ep.get("task", "")})


def read_results(folder: Path) -> Source:
    """Every episode of an eval results folder with its trajectory (``trajectories/<scene>/<task_id>.npy``;
    episodes without one are listed in the status log only); the scene folders named in summary.json."""
    from airplay.eval.journal import trajectory_path
    from airplay.eval.results import read_episodes

    try:
        episodes = read_episodes(folder)
    except (OSError, ValueError) as err:
        raise ViewError(f"{folder / 'episodes.jsonl'}: {err}") from None
    flights = []
    for e in episodes:
        npy = trajectory_path(folder, e.scene, str(e.task_id))
        if npy.is_file():
            try:
                traj = np.load(npy)
            except (OSError, ValueError) as err:
                raise ViewError(f"{npy}: not a trajectory ({err})") from None
            if traj.ndim != 2 or traj.shape[1] != 3:
                raise ViewError(f"{npy}: shape {traj.shape}, a trajectory is (T, 3)")
        else:
            traj = np.zeros((0, 3))
        end = e.steps * CONTROL_DT_NS
        record = e.to_dict()
        flights.append(Flight(name=str(e.task_id), scene=e.scene,
                              times_ns=np.arange(len(traj), dtype=np.int64) * CONTROL_DT_NS,
                              position=np.asarray(traj, np.float64), status=e.status,
                              statuses=[(end, json.dumps(record))], metadata=record))
    scenes = []
    summary = folder / "summary.json"
    if summary.is_file():
        try:
            scenes = [Path(s) for s in json.loads(summary.read_text()).get("meta", {}).get("scenes") or []]
        except (json.JSONDecodeError, AttributeError, TypeError) as err:
            raise ViewError(f"{summary}: not a results summary ({err})") from None
    return Source("results", folder, flights, scene_folders=scenes)


def scene_folders_by_name(folders) -> dict[str, Path]:
    """``{scene name: folder}`` of scene folders or folders of scenes (those that exist; a folder
    named explicitly that is not a scene is a ViewError)."""
    from airplay.scene.errors import SceneError
    from airplay.scene.scene import scene_dirs
    from airplay.scene.spec import parse_scene_yaml

    out: dict[str, Path] = {}
    for folder in folders:
        try:
            for d in scene_dirs([str(folder)]):
                out[parse_scene_yaml(d).name] = Path(d)
        except SceneError as err:
            raise ViewError(str(err)) from None
    return out
