"""LeRobot v3.0 datasets without lerobot: a writer (pyarrow + PyAV) and a minimal reader.

lerobot pins torch<2.11 and so cannot be a dependency; this module writes the same on-disk
layout ("codebase_version": "v3.0") that ``lerobot`` / ``lerobot-dataset`` read::

    meta/info.json                       features, fps, totals, chunk/file sizes, paths
    meta/stats.json                      min/max/mean/std/count/q01..q99 per feature
    meta/tasks.parquet                   task_index + task (pandas index "task")
    meta/episodes/chunk-000/file-000.parquet
                                         one row per episode: tasks, length, data and video
                                         file indices, from/to indices and timestamps,
                                         stats/<feature>/<stat>, airplay/<field>
    data/chunk-000/file-000.parquet      one row per frame (all episodes, concatenated)
    videos/<key>/chunk-000/file-000.mp4  H.264 yuv420p, episodes concatenated; episode e is
                                         [from_timestamp, to_timestamp) of the file

Frame k of an episode has ``timestamp = k / fps`` (s, from the episode start); its video
frame is at ``from_timestamp + timestamp`` in the file given by the episode row.

Keys (see :func:`make_features`): ``observation.images.rgb`` (video, H x W x 3),
``observation.state`` float32 (13) [x y z qx qy qz qw vx vy vz wx wy wz] (position m in map
ENU, quaternion x y z w of base_link in map, velocity m/s in map, body rates rad/s FLU),
``observation.goal`` float32 (3) goal relative to the vehicle in the heading frame (x fwd,
y left, z up; m), ``observation.images.goal`` (video; imagegoal only: the goal image repeated
on every frame), ``observation.depth`` float32 (H, W) metres (opt-in), ``action`` float32 (4)
[vx vy vz yaw_rate] heading-frame m/s and rad/s, plus LeRobot's timestamp, frame_index,
episode_index, index and task_index.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

CODEBASE_VERSION = "v3.0"
DEFAULT_FPS = 50
RGB_KEY = "observation.images.rgb"
GOAL_IMAGE_KEY = "observation.images.goal"
STATE_KEY = "observation.state"
GOAL_KEY = "observation.goal"
DEPTH_KEY = "observation.depth"
ACTION_KEY = "action"
STATE_NAMES = ["x", "y", "z", "qx", "qy", "qz", "qw", "vx", "vy", "vz", "wx", "wy", "wz"]
ACTION_NAMES = ["vx", "vy", "vz", "yaw_rate"]
GOAL_NAMES = ["x_forward", "y_left", "z_up"]
TASK_TEXT = {
    "pointgoal": "PointGoal: fly to the goal",
    "imagegoal": "ImageGoal: fly to where the goal image was taken",
    "goalfree": "Goal-free: explore without colliding",
}
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{int(round(q * 100)):02d}" for q in QUANTILES)

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"

_INDEX_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}


class DatasetError(ValueError):
    """A dataset (or data given to the writer) is malformed; the message names file and field."""


def make_features(image_shape: tuple[int, int], *, goal: bool = True, goal_image: bool = False,
                  depth: bool = False) -> dict[str, dict]:
    """The LeRobot feature dictionary of an airplay dataset (image_shape = (H, W) pixels)."""
    h, w = (int(v) for v in image_shape)
    video = {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channels"]}
    features: dict[str, dict] = {RGB_KEY: dict(video)}
    if goal_image:
        features[GOAL_IMAGE_KEY] = dict(video)
    if depth:
        features[DEPTH_KEY] = {"dtype": "float32", "shape": [h, w], "names": ["height", "width"]}
    features[STATE_KEY] = {"dtype": "float32", "shape": [len(STATE_NAMES)], "names": list(STATE_NAMES)}
    if goal:
        features[GOAL_KEY] = {"dtype": "float32", "shape": [len(GOAL_NAMES)], "names": list(GOAL_NAMES)}
    features[ACTION_KEY] = {"dtype": "float32", "shape": [len(ACTION_NAMES)], "names": list(ACTION_NAMES)}
    features.update({k: dict(v) for k, v in _INDEX_FEATURES.items()})
    return features


# -- statistics --------------------------------------------------------------------------------
def numeric_stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """min/max/mean/std/count/q01..q99 over axis 0 (LeRobot's stats of a numeric feature)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    out = {"min": v.min(axis=0), "max": v.max(axis=0), "mean": v.mean(axis=0), "std": v.std(axis=0),
           "count": np.array([v.shape[0]], dtype=np.int64)}
    qs = np.quantile(v, QUANTILES, axis=0)
    out.update({k: qs[i] for i, k in enumerate(QUANTILE_KEYS)})
    return out


def aggregate_numeric_stats(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Combine per-episode stats: exact min/max/mean/std, count-weighted quantiles (as LeRobot)."""
    counts = np.array([float(p["count"][0]) for p in parts])
    shape = (-1,) + (1,) * np.ndim(parts[0]["mean"])
    w = counts.reshape(shape)
    means = np.stack([p["mean"] for p in parts])
    mean = (means * w).sum(axis=0) / counts.sum()
    var = ((np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2) * w).sum(axis=0) / counts.sum()
    out = {"min": np.min(np.stack([p["min"] for p in parts]), axis=0),
           "max": np.max(np.stack([p["max"] for p in parts]), axis=0),
           "mean": mean, "std": np.sqrt(var), "count": np.array([int(counts.sum())], dtype=np.int64)}
    for key in QUANTILE_KEYS:
        out[key] = (np.stack([p[key] for p in parts]) * w).sum(axis=0) / counts.sum()
    return out


class ImageStats:
    """Per-channel statistics of uint8 RGB frames, exact (256-bin histograms), in [0, 1].

    Shapes follow LeRobot: (3, 1, 1) per statistic, count (1,) = number of frames.
    """

    def __init__(self) -> None:
        self.hist = np.zeros((3, 256), dtype=np.int64)
        self.frames = 0

    def update(self, frames: np.ndarray) -> None:
        for c in range(3):
            self.hist[c] += np.bincount(frames[..., c].reshape(-1), minlength=256)
        self.frames += int(frames.shape[0])

    def merge(self, other: ImageStats) -> None:
        self.hist += other.hist
        self.frames += other.frames

    def result(self) -> dict[str, np.ndarray]:
        levels = np.arange(256, dtype=np.float64) / 255.0
        n = self.hist.sum(axis=1).astype(np.float64)
        mean = (self.hist * levels).sum(axis=1) / n
        var = (self.hist * levels ** 2).sum(axis=1) / n - mean ** 2
        nonzero = self.hist > 0
        cdf = np.cumsum(self.hist, axis=1) / n[:, None]
        out = {"min": np.array([levels[np.argmax(nz)] for nz in nonzero]),
               "max": np.array([levels[255 - np.argmax(nz[::-1])] for nz in nonzero]),
               "mean": mean, "std": np.sqrt(np.maximum(var, 0.0))}
        for q, key in zip(QUANTILES, QUANTILE_KEYS):
            out[key] = np.array([levels[np.searchsorted(cdf[c], q)] for c in range(3)])
        out = {k: v.reshape(3, 1, 1) for k, v in out.items()}
        out["count"] = np.array([self.frames], dtype=np.int64)
        return out


def _jsonable(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


# -- video ---------------------------------------------------------------------------------------
class _VideoFileWriter:
    """One growing mp4 of one video key: H.264, yuv420p, constant fps, pts = frame number."""

    def __init__(self, path: Path, fps: int, width: int, height: int, crf: int, gop: int) -> None:
        import av

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.container = av.open(str(path), mode="w")
        self.stream = self.container.add_stream("libx264", rate=fps)
        self.stream.width, self.stream.height = width, height
        self.stream.pix_fmt = "yuv420p"
        self.stream.codec_context.time_base = Fraction(1, fps)
        self.stream.options = {"crf": str(crf), "g": str(gop), "preset": "fast"}
        self.frames = 0
        self.bytes = 0  # encoded bytes muxed so far (the file on disk lags behind: buffered)

    def add(self, rgb: np.ndarray, keyframe: bool) -> None:
        from av.video.frame import PictureType, VideoFrame

        frame = VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        frame.pts = self.frames
        if keyframe:  # episodes start on a key frame, so that seeking to one decodes only it
            frame.pict_type = PictureType.I
        for packet in self.stream.encode(frame):
            self.bytes += packet.size
            self.container.mux(packet)
        self.frames += 1

    def size_mb(self) -> float:
        return self.bytes / 2 ** 20

    def close(self) -> None:
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()


def probe_video(path: Path) -> dict[str, Any]:
    """The ``info`` block LeRobot keeps per video feature in info.json."""
    import av

    with av.open(str(path)) as c:
        s = c.streams.video[0]
        return {"video.height": s.height, "video.width": s.width, "video.codec": s.codec_context.name,
                "video.pix_fmt": s.pix_fmt, "video.is_depth_map": False, "video.fps": int(s.base_rate),
                "video.channels": 3, "has_audio": False}


# -- writer ----------------------------------------------------------------------------------------
def _next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


class LeRobotWriter:
    """Writes a LeRobot v3.0 dataset, episode by episode, into a new folder ``root``.

    Args:
        root: the dataset folder; it must not exist or be empty (nothing is overwritten).
        image_shape: (H, W) of the camera images (even numbers: H.264 yuv420p).
        fps: frames per second (airplay: 50 Hz control).
        goal / goal_image / depth: which optional features the dataset has (every episode
            must then give them).
        crf, gop: H.264 quality (lower = better, 0 lossless) and key-frame interval (frames).
        chunks_size, data_files_size_in_mb, video_files_size_in_mb: LeRobot's file rolling:
            a new data/video file starts when the current one reaches the size; a new chunk
            folder after ``chunks_size`` files.
        splits: info.json "splits" (name -> "start:end" episode range); default
            {"train": "0:N"}.
        extra_info: JSON-ready dict stored in info.json under "airplay".

    Call :meth:`add_episode` per episode, then :meth:`finalize` (or use as a context manager,
    which finalizes on success and removes ``root`` on error).
    """

    def __init__(self, root: str | Path, *, image_shape: tuple[int, int], fps: int = DEFAULT_FPS,
                 goal: bool = True, goal_image: bool = False, depth: bool = False,
                 robot_type: str = "airplay_quadrotor", crf: int = 18, gop: int = 10,
                 chunks_size: int = 1000, data_files_size_in_mb: float = 100,
                 video_files_size_in_mb: float = 200, splits: dict[str, str] | None = None,
                 extra_info: dict | None = None) -> None:
        self.root = Path(root)
        if self.root.exists() and any(self.root.iterdir()):
            raise FileExistsError(f"{self.root}: dataset folder exists and is not empty; refusing to overwrite")
        h, w = (int(v) for v in image_shape)
        if h <= 0 or w <= 0 or h % 2 or w % 2:
            raise DatasetError(f"image_shape {image_shape}: H and W must be positive and even (H.264 yuv420p)")
        self.image_shape = (h, w)
        self.fps = int(fps)
        self.features = make_features((h, w), goal=goal, goal_image=goal_image, depth=depth)
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        self.robot_type = robot_type
        self.crf, self.gop = int(crf), int(gop)
        self.chunks_size = int(chunks_size)
        self.data_mb, self.video_mb = data_files_size_in_mb, video_files_size_in_mb
        self._data_bytes = 0  # uncompressed bytes in the current data file (LeRobot measures the same)
        self.splits = splits
        self.extra_info = extra_info or {}
        self.root.mkdir(parents=True, exist_ok=True)
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict[str, Any]] = []
        self.total_frames = 0
        self._data_file = (0, 0)
        self._data_writer = None
        self._videos: dict[str, _VideoFileWriter] = {}
        self._video_file = {k: (0, 0) for k in self.video_keys}
        self._numeric: dict[str, list[np.ndarray]] = {}
        self._image_stats = {k: ImageStats() for k in self.video_keys}
        self._depth_stats: list[dict[str, np.ndarray]] = []
        self._finalized = False

    # -- input checks ---------------------------------------------------------------------------
    def _check(self, name: str, value: np.ndarray | None, shape: tuple, dtype=None, finite=False) -> np.ndarray:
        ep = len(self.episodes)
        if value is None:
            raise DatasetError(f"episode {ep}: '{name}' is required by this dataset's features")
        arr = np.asarray(value)
        if arr.shape != shape:
            raise DatasetError(f"episode {ep}: '{name}' has shape {arr.shape}, expected {shape}")
        if dtype is not None and arr.dtype != dtype:
            raise DatasetError(f"episode {ep}: '{name}' has dtype {arr.dtype}, expected {np.dtype(dtype)}")
        if finite and not np.all(np.isfinite(arr)):
            raise DatasetError(f"episode {ep}: '{name}' has non-finite values")
        return arr

    def add_episode(self, rgb: np.ndarray, state: np.ndarray, action: np.ndarray, goal: np.ndarray | None = None,
                    goal_image: np.ndarray | None = None, depth: np.ndarray | None = None,
                    task: str = TASK_TEXT["pointgoal"], meta: dict | None = None) -> int:
        """Append one episode of T frames; returns its episode_index.

        rgb (T, H, W, 3) uint8; state (T, 13); action (T, 4) (the command chosen for each
        frame); goal (T, 3) heading-frame goal vectors; goal_image (H, W, 3) uint8; depth
        (T, H, W) metres; task: the task text (tasks.parquet); meta: JSON-ready episode
        metadata, stored as ``airplay/<key>`` columns of the episodes parquet.
        """
        if self._finalized:
            raise RuntimeError(f"{self.root}: add_episode after finalize")
        h, w = self.image_shape
        rgb = np.asarray(rgb)
        if rgb.ndim != 4 or rgb.shape[0] == 0:
            raise DatasetError(f"episode {len(self.episodes)}: 'rgb' must be (T>0, H, W, 3), got {rgb.shape}")
        t = rgb.shape[0]
        rgb = self._check("rgb", rgb, (t, h, w, 3), np.uint8)
        columns: dict[str, np.ndarray] = {
            STATE_KEY: self._check("state", state, (t, 13), finite=True).astype(np.float32),
            ACTION_KEY: self._check("action", action, (t, 4), finite=True).astype(np.float32),
        }
        if GOAL_KEY in self.features:
            columns[GOAL_KEY] = self._check("goal", goal, (t, 3), finite=True).astype(np.float32)
        if DEPTH_KEY in self.features:
            columns[DEPTH_KEY] = self._check("depth", depth, (t, h, w)).astype(np.float32)
        videos = {RGB_KEY: rgb}
        if GOAL_IMAGE_KEY in self.features:
            gi = self._check("goal_image", goal_image, (h, w, 3), np.uint8)
            videos[GOAL_IMAGE_KEY] = np.broadcast_to(gi, (t, h, w, 3))

        ep_index = len(self.episodes)
        task_index = self.tasks.setdefault(str(task), len(self.tasks))
        frame_index = np.arange(t, dtype=np.int64)
        columns["timestamp"] = (frame_index / self.fps).astype(np.float32)
        columns["frame_index"] = frame_index
        columns["episode_index"] = np.full(t, ep_index, dtype=np.int64)
        columns["index"] = np.arange(self.total_frames, self.total_frames + t, dtype=np.int64)
        columns["task_index"] = np.full(t, task_index, dtype=np.int64)

        row: dict[str, Any] = {"episode_index": ep_index, "tasks": [str(task)], "length": t}
        row.update(self._write_data(columns))
        for key, frames in videos.items():
            row.update(self._write_video(key, frames))
        row["dataset_from_index"] = self.total_frames
        row["dataset_to_index"] = self.total_frames + t
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0

        ep_stats: dict[str, dict[str, np.ndarray]] = {}
        for key, frames in videos.items():
            s = ImageStats()
            s.update(frames[:1] if key == GOAL_IMAGE_KEY else frames)
            if key == GOAL_IMAGE_KEY:  # the same image on every frame
                s.hist *= t
                s.frames = t
            self._image_stats[key].merge(s)
            ep_stats[key] = s.result()
        for key, values in columns.items():
            if key == DEPTH_KEY:  # per pixel, as LeRobot computes an (H, W) feature; aggregated at the end
                flat = numeric_stats(values.reshape(t, -1))
                ep_stats[key] = {k: (v if k == "count" else v.reshape(h, w)) for k, v in flat.items()}
                self._depth_stats.append(ep_stats[key])
            else:  # small vectors: kept, for exact dataset-wide quantiles
                self._numeric.setdefault(key, []).append(values)
                ep_stats[key] = numeric_stats(values)
        for key, d in ep_stats.items():
            for stat, v in d.items():
                row[f"stats/{key}/{stat}"] = np.asarray(v).tolist()
        for key, value in (meta or {}).items():
            row[f"airplay/{key}"] = value if isinstance(value, (str, int, float, bool)) else json.dumps(value)
        self.episodes.append(row)
        self.total_frames += t
        return ep_index

    # -- files ----------------------------------------------------------------------------------
    def _write_data(self, columns: dict[str, np.ndarray]) -> dict[str, int]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrays, names = [], []
        for key, feat in self.features.items():
            if key not in columns:
                continue
            v = columns[key]
            if feat["shape"] == [1]:
                arrays.append(pa.array(v))
            elif len(feat["shape"]) == 1:
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), feat["shape"][0]))
            else:  # (H, W): list of rows, as datasets.Array2D stores it
                h, w = feat["shape"]
                rows = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), w)
                arrays.append(pa.ListArray.from_arrays(pa.array(np.arange(0, len(v) * h + 1, h, dtype=np.int32)), rows))
            names.append(key)
        table = pa.Table.from_arrays(arrays, names=names)
        if self._data_writer is not None and self._data_bytes / 2 ** 20 >= self.data_mb:
            self._data_writer.close()
            self._data_writer = None
            self._data_bytes = 0
            self._data_file = _next_file(*self._data_file, self.chunks_size)
        if self._data_writer is None:
            chunk, file = self._data_file
            self._data_writer_path = self.root / DATA_PATH.format(chunk_index=chunk, file_index=file)
            self._data_writer_path.parent.mkdir(parents=True, exist_ok=True)
            self._data_writer = pq.ParquetWriter(self._data_writer_path, table.schema, compression="snappy")
        self._data_writer.write_table(table)
        self._data_bytes += table.nbytes
        return {"data/chunk_index": self._data_file[0], "data/file_index": self._data_file[1]}

    def _write_video(self, key: str, frames: np.ndarray) -> dict[str, Any]:
        writer = self._videos.get(key)
        if writer is not None and writer.size_mb() >= self.video_mb:
            writer.close()
            writer = None
            self._video_file[key] = _next_file(*self._video_file[key], self.chunks_size)
        if writer is None:
            chunk, file = self._video_file[key]
            path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            writer = self._videos[key] = _VideoFileWriter(path, self.fps, self.image_shape[1],
                                                          self.image_shape[0], self.crf, self.gop)
        start = writer.frames
        for i, frame in enumerate(frames):
            writer.add(frame, keyframe=i == 0)
        chunk, file = self._video_file[key]
        return {f"videos/{key}/chunk_index": chunk, f"videos/{key}/file_index": file,
                f"videos/{key}/from_timestamp": start / self.fps,
                f"videos/{key}/to_timestamp": writer.frames / self.fps}

    def _write_tasks(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = sorted(self.tasks, key=self.tasks.get)
        table = pa.table({"task_index": pa.array([self.tasks[n] for n in names], pa.int64()),
                          "task": pa.array(names, pa.string())})
        pandas_meta = {  # so that pandas.read_parquet gives LeRobot's frame: index = task text
            "index_columns": ["task"], "column_indexes": [],
            "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                         "numpy_type": "int64", "metadata": None},
                        {"name": "task", "field_name": "task", "pandas_type": "unicode",
                         "numpy_type": "object", "metadata": None}],
            "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.3"}
        table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
        pq.write_table(table, self.root / TASKS_PATH)

    def _write_episodes(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        keys: list[str] = []
        for row in self.episodes:
            keys.extend(k for k in row if k not in keys)
        table = pa.table({k: [row.get(k) for row in self.episodes] for k in keys})
        path = self.root / EPISODES_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)

    def _dataset_stats(self) -> dict[str, dict[str, np.ndarray]]:
        stats: dict[str, dict[str, np.ndarray]] = {k: s.result() for k, s in self._image_stats.items()}
        for key, parts in self._numeric.items():
            stats[key] = numeric_stats(np.concatenate(parts))
        if self._depth_stats:
            stats[DEPTH_KEY] = aggregate_numeric_stats(self._depth_stats)
        return stats

    def finalize(self) -> dict:
        """Close the files and write meta/ (info, stats, tasks, episodes); returns info."""
        if self._finalized:
            raise RuntimeError(f"{self.root}: finalize called twice")
        if not self.episodes:
            raise DatasetError(f"{self.root}: no episodes were added")
        self._finalized = True
        if self._data_writer is not None:
            self._data_writer.close()
        for writer in self._videos.values():
            writer.close()
        (self.root / "meta").mkdir(exist_ok=True)
        self._write_tasks()
        self._write_episodes()
        (self.root / STATS_PATH).write_text(json.dumps(_jsonable(self._dataset_stats()), indent=2))
        features = json.loads(json.dumps(self.features))
        for key in self.video_keys:
            features[key]["info"] = probe_video(self.root / VIDEO_PATH.format(video_key=key, chunk_index=0,
                                                                               file_index=0))
        n = len(self.episodes)
        info = {
            "codebase_version": CODEBASE_VERSION, "robot_type": self.robot_type,
            "total_episodes": n, "total_frames": self.total_frames, "total_tasks": len(self.tasks),
            "chunks_size": self.chunks_size, "data_files_size_in_mb": self.data_mb,
            "video_files_size_in_mb": self.video_mb, "fps": self.fps,
            "splits": self.splits or {"train": f"0:{n}"},
            "data_path": DATA_PATH, "video_path": VIDEO_PATH if self.video_keys else None,
            "features": features,
        }
        if self.extra_info:
            info["airplay"] = self.extra_info
        (self.root / INFO_PATH).write_text(json.dumps(info, indent=4))
        return info

    def abort(self) -> None:
        """Close what is open and delete ``root`` (used when writing fails half-way)."""
        self._finalized = True
        try:
            if self._data_writer is not None:
                self._data_writer.close()
            for writer in self._videos.values():
                writer.container.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LeRobotWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


# -- reader --------------------------------------------------------------------------------------
@dataclass
class EpisodeInfo:
    """One row of meta/episodes: where an episode's frames lie (indices, files, seconds)."""

    index: int
    length: int
    tasks: list[str]
    from_index: int
    to_index: int
    videos: dict[str, tuple[Path, float, float]]  # key -> (mp4, from_timestamp, to_timestamp)
    meta: dict[str, Any]


class LeRobotDataset:
    """A minimal reader of LeRobot v3.0 datasets (numpy; pyarrow for parquet, PyAV for video).

    ``ds[i]`` is frame ``i`` (global index) as a dict of numpy arrays: video keys give
    (H, W, 3) uint8 frames; vectors their float32 arrays; index keys ints; plus "task".
    ``ds.episode(e)`` gives whole-episode arrays (T, ...). Decoded video is cached per
    episode (``cache_episodes`` most recent), so iterating an episode decodes it once.
    """

    def __init__(self, root: str | Path, *, cache_episodes: int = 4) -> None:
        import pyarrow.parquet as pq

        self.root = Path(root)
        info_path = self.root / INFO_PATH
        if not info_path.is_file():
            raise DatasetError(f"{info_path}: missing (not a LeRobot dataset)")
        try:
            self.info = json.loads(info_path.read_text())
        except json.JSONDecodeError as err:
            raise DatasetError(f"{info_path}: not JSON: {err}") from err
        version = self.info.get("codebase_version")
        if version != CODEBASE_VERSION:
            raise DatasetError(f"{info_path}: codebase_version {version!r}, this reader reads {CODEBASE_VERSION}")
        for field in ("fps", "features", "data_path", "total_frames", "total_episodes"):
            if field not in self.info:
                raise DatasetError(f"{info_path}: field '{field}' missing")
        self.fps = int(self.info["fps"])
        self.features: dict[str, dict] = self.info["features"]
        self.video_keys = [k for k, f in self.features.items() if f["dtype"] == "video"]
        self.stats = json.loads((self.root / STATS_PATH).read_text()) if (self.root / STATS_PATH).is_file() else {}
        tasks = pq.read_table(self.root / TASKS_PATH).to_pydict()
        task_col = tasks.get("task") or tasks.get("__index_level_0__")
        if task_col is None:
            raise DatasetError(f"{self.root / TASKS_PATH}: no 'task' column")
        self.tasks = dict(zip(tasks["task_index"], task_col))
        self.episodes = self._load_episodes()
        self._data = self._load_data()
        self._cache: dict[int, dict[str, np.ndarray]] = {}
        self._cache_size = max(1, int(cache_episodes))

    def _load_episodes(self) -> list[EpisodeInfo]:
        import pyarrow.parquet as pq

        files = sorted((self.root / "meta/episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise DatasetError(f"{self.root / 'meta/episodes'}: no episodes parquet")
        rows: list[dict] = []
        for f in files:
            cols = [c for c in pq.read_schema(f).names if not c.startswith("stats/")]
            rows.extend(pq.read_table(f, columns=cols).to_pylist())
        rows.sort(key=lambda r: r["episode_index"])
        episodes = []
        for r in rows:
            videos = {}
            for key in self.video_keys:
                try:
                    rel = self.info["video_path"].format(video_key=key, chunk_index=r[f"videos/{key}/chunk_index"],
                                                         file_index=r[f"videos/{key}/file_index"])
                    videos[key] = (self.root / rel, float(r[f"videos/{key}/from_timestamp"]),
                                   float(r[f"videos/{key}/to_timestamp"]))
                except KeyError as err:
                    raise DatasetError(f"{files[0]}: episode {r['episode_index']} lacks column {err}") from err
            meta = {k.split("/", 1)[1]: v for k, v in r.items() if k.startswith("airplay/")}
            episodes.append(EpisodeInfo(int(r["episode_index"]), int(r["length"]), list(r["tasks"]),
                                        int(r["dataset_from_index"]), int(r["dataset_to_index"]), videos, meta))
        return episodes

    def _load_data(self) -> dict[str, np.ndarray]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        files = sorted((self.root / "data").glob("chunk-*/file-*.parquet"))
        if not files:
            raise DatasetError(f"{self.root / 'data'}: no data parquet")
        table = pa.concat_tables([pq.read_table(f) for f in files])
        out: dict[str, np.ndarray] = {}
        for key, feat in self.features.items():
            if feat["dtype"] == "video":
                continue
            if key not in table.column_names:
                raise DatasetError(f"{files[0]}: column '{key}' of info.json features missing")
            col = table.column(key).combine_chunks()
            shape = tuple(feat["shape"])
            if shape == (1,):
                out[key] = col.to_numpy(zero_copy_only=False)
            else:
                flat = col
                while pa.types.is_list(flat.type) or pa.types.is_fixed_size_list(flat.type):
                    flat = flat.flatten()
                out[key] = flat.to_numpy(zero_copy_only=False).astype(feat["dtype"]).reshape((len(col),) + shape)
        order = np.argsort(out["index"], kind="stable")
        if not np.array_equal(out["index"][order], np.arange(len(order))):
            raise DatasetError(f"{self.root / 'data'}: frame 'index' column is not 0..N-1")
        return {k: v[order] for k, v in out.items()}

    def __len__(self) -> int:
        return len(self._data["index"])

    @property
    def num_episodes(self) -> int:
        return len(self.episodes)

    def column(self, key: str) -> np.ndarray:
        """All frames' values of a non-video feature, (N, ...) in index order (no decoding)."""
        if key not in self._data:
            raise KeyError(f"{self.root}: no non-video feature {key!r} (have {sorted(self._data)})")
        return self._data[key]

    def _decode(self, ep: int) -> dict[str, np.ndarray]:
        if ep in self._cache:
            self._cache[ep] = self._cache.pop(ep)  # most recently used last
            return self._cache[ep]
        info = self.episodes[ep]
        frames = {key: decode_frames(path, t0, info.length, self.fps) for key, (path, t0, _) in info.videos.items()}
        self._cache[ep] = frames
        while len(self._cache) > self._cache_size:
            self._cache.pop(next(iter(self._cache)))
        return frames

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not -len(self) <= i < len(self):
            raise IndexError(f"frame {i} out of range (dataset has {len(self)} frames)")
        i %= len(self)
        item: dict[str, Any] = {k: (v[i].item() if v.ndim == 1 else v[i]) for k, v in self._data.items()}
        ep = item["episode_index"]
        frames = self._decode(ep)
        for key, video in frames.items():
            item[key] = video[item["frame_index"]]
        item["task"] = self.tasks[item["task_index"]]
        return item

    def episode(self, ep: int) -> dict[str, Any]:
        """Whole-episode arrays: each feature (T, ...) in frame order, plus "task" and "meta"."""
        info = self.episodes[ep]
        sl = slice(info.from_index, info.to_index)
        out: dict[str, Any] = {k: v[sl] for k, v in self._data.items()}
        out.update(self._decode(ep))
        out["task"] = info.tasks[0] if info.tasks else ""
        out["meta"] = info.meta
        return out


def decode_frames(path: Path, from_s: float, count: int, fps: int) -> np.ndarray:
    """``count`` RGB frames (count, H, W, 3) uint8 of ``path`` from ``from_s`` seconds on.

    Frames are matched by presentation time (tolerance a quarter frame); a missing frame is
    an error naming the file and the time.
    """
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        out: np.ndarray | None = None
        got = np.zeros(count, dtype=bool)
        container.seek(max(0, int(math.floor(from_s / stream.time_base))), stream=stream, backward=True,
                       any_frame=False)
        for frame in container.decode(stream):
            k = int(round((float(frame.pts * stream.time_base) - from_s) * fps))
            if abs(float(frame.pts * stream.time_base) - from_s - k / fps) > 0.25 / fps:
                raise DatasetError(f"{path}: frame at {float(frame.pts * stream.time_base):.4f} s is off the "
                                   f"{fps} fps grid")
            if k < 0:
                continue
            if k >= count:
                break
            img = frame.to_ndarray(format="rgb24")
            if out is None:
                out = np.empty((count,) + img.shape, dtype=np.uint8)
            out[k] = img
            got[k] = True
    if out is None or not got.all():
        missing = int(np.argmin(got)) if out is not None else 0
        raise DatasetError(f"{path}: no video frame at {from_s + missing / fps:.4f} s "
                           f"(frame {missing} of an episode of {count})")
    return out
