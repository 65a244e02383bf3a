"""A minimal reader of LeRobot v3.0 datasets (numpy; pyarrow for parquet, PyAV for video)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from airplay.data.lerobot.schema import CODEBASE_VERSION, INFO_PATH, STATS_PATH, TASKS_PATH, DatasetError
from airplay.data.lerobot.video import decode_frames


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
