"""The LeRobot v3.0 dataset writer: episodes in, parquet + mp4 + meta/ out (pyarrow, PyAV)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from airplay.data.keys import (ACTION_DIM, ACTION_KEY, DEPTH_KEY, GOAL_DIM, GOAL_IMAGE_KEY, GOAL_KEY, RGB_KEY,
                               STATE_DIM, STATE_KEY)
from airplay.data.lerobot.schema import (CODEBASE_VERSION, DATA_PATH, DEFAULT_FPS, EPISODES_PATH, INFO_PATH,
                                         STATS_PATH, TASK_TEXT, TASKS_PATH, VIDEO_PATH, DatasetError, make_features)
from airplay.data.lerobot.stats import ImageStats, aggregate_numeric_stats, jsonable_stats, numeric_stats
from airplay.data.lerobot.video import VideoFileWriter, probe_video


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
        self._videos: dict[str, VideoFileWriter] = {}
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
            STATE_KEY: self._check("state", state, (t, STATE_DIM), finite=True).astype(np.float32),
            ACTION_KEY: self._check("action", action, (t, ACTION_DIM), finite=True).astype(np.float32),
        }
        if GOAL_KEY in self.features:
            columns[GOAL_KEY] = self._check("goal", goal, (t, GOAL_DIM), finite=True).astype(np.float32)
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
            writer = self._videos[key] = VideoFileWriter(path, self.fps, self.image_shape[1],
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
        (self.root / STATS_PATH).write_text(json.dumps(jsonable_stats(self._dataset_stats()), indent=2))
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
