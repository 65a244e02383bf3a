"""Training windows over demonstrations: observation history, future action chunk, padding mask.

All frames are decoded once, resized to the policy's image size as uint8
(:func:`airplay.policies.observation.resize_images`), and kept in memory, so a batch is one
vectorized gather: the CPU or GPU is never waiting on video decoding. With ``memory_mb``
(``airplay dagger``'s aggregate of every round) only that many MiB of frames are kept in memory;
the frames of episodes loaded from a frame cache (:func:`load_lerobot_episodes`) beyond it are
read from the cache file for each batch (``os.pread``, no mapping: the page cache holds them,
not this process), so the process's resident memory no longer grows with the data.

A sample at frame t of an episode of T frames holds the observations at t - n + 1 .. t
(repeating frame 0 before the start) and the actions t .. t + K - 1; those past the end
repeat the last action and are flagged in ``action_is_pad``. With ``actions="waypoint"`` the
chunk is the K poses after t relative to t's (:func:`airplay.policies.waypoints.episode_waypoints`),
computed once here from the recorded states.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from airplay.policies.normalize import compute_stats
from airplay.policies.observation import (ACTION, ACTION_DIM, ACTION_IS_PAD, GOAL, GOAL_DIM, GOAL_IMAGE, IMAGE,
                                          STATE, STATE_DIM, resize_images, to_float)
from airplay.policies.waypoints import ACTION_SPACES, episode_waypoints


@dataclass
class EpisodeData:
    """One demonstration. rgb (T, H, W, 3) uint8; state (T, 13); action (T, 4) [vx vy vz
    (heading frame, m/s), yaw rate (rad/s)]; goal (T, 3) heading-frame goal vector (m) or
    None; goal_image (H, W, 3) uint8 or None; rgb_file: where ``rgb`` lies on disk, (an .npy
    file of C-order uint8 frames, the byte offset of this episode's first frame), or None."""

    rgb: np.ndarray
    state: np.ndarray
    action: np.ndarray
    goal: np.ndarray | None = None
    goal_image: np.ndarray | None = None
    rgb_file: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        t = len(self.rgb)
        if t < 1:
            raise ValueError("an episode needs at least one frame")
        for name, value, width in (("state", self.state, STATE_DIM), ("action", self.action, ACTION_DIM),
                                   ("goal", self.goal, GOAL_DIM)):
            if value is not None and np.shape(value) != (t, width):
                raise ValueError(f"episode field {name!r} must be ({t}, {width}), got {np.shape(value)}")


class ChunkDataset:
    """Windows of ``n_obs_steps`` observations and ``chunk_size`` actions over ``episodes``.

    goal: "point" (needs every episode's goal), "image" (goal_image) or "none".
    actions: "velocity" (the recorded commands) or "waypoint" (relative future poses).
    memory_mb: MiB of frames kept in memory (None: all); the frames of later episodes that have an
        ``rgb_file`` at this image size are read from it per batch (module docstring). The batches
        are the same either way.
    """

    def __init__(self, episodes: list[EpisodeData], image_size: int, n_obs_steps: int = 1, chunk_size: int = 1,
                 goal: str = "point", actions: str = "velocity", memory_mb: float | None = None) -> None:
        if not episodes:
            raise ValueError("no episodes to train on")
        if actions not in ACTION_SPACES:
            raise ValueError(f"actions must be one of {', '.join(ACTION_SPACES)}, got {actions!r}")
        self.image_size, self.n_obs_steps, self.chunk_size, self.goal = image_size, n_obs_steps, chunk_size, goal
        lengths = np.array([len(e.rgb) for e in episodes])
        self.num_episodes, self.num_frames = len(episodes), int(lengths.sum())
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self.start = torch.as_tensor(np.repeat(starts, lengths))
        self.end = torch.as_tensor(np.repeat(starts + lengths, lengths))  # exclusive
        self.episode = torch.as_tensor(np.repeat(np.arange(len(episodes)), lengths))
        # Filled episode by episode: one copy of the frames in memory, not three (the episodes', the
        # resized list's and the concatenation's), which ran a 510k-frame DAgger retraining out of 24 GiB.
        frame_bytes = 3 * image_size * image_size
        budget = None if memory_mb is None else max(0, int(float(memory_mb) * 2 ** 20)) // frame_bytes  # frames
        on_disk = [budget is not None and e.rgb_file is not None and np.shape(e.rgb)[1:] == (image_size, image_size, 3)
                   and e.rgb.dtype == np.uint8 for e in episodes]
        kept = 0
        for i, n in enumerate(lengths):  # the first episodes within the budget stay in memory
            if on_disk[i] and kept + n <= budget:
                on_disk[i] = False
            if not on_disk[i]:
                kept += int(n)
        self.ram_row = torch.full((self.num_frames,), -1, dtype=torch.long)  # frame -> row of self.images
        self.images = torch.empty((kept, 3, image_size, image_size), dtype=torch.uint8)
        self._files: list[str] = []
        self._file = torch.full((self.num_frames,), -1, dtype=torch.long)  # frame -> index in _files
        self._offset = torch.zeros(self.num_frames, dtype=torch.long)  # frame -> byte offset in its file
        row = 0
        for e, a, n, disk in zip(episodes, starts, lengths, on_disk):
            if disk:
                path, first = e.rgb_file
                if path not in self._files:
                    self._files.append(path)
                self._file[a:a + n] = self._files.index(path)
                self._offset[a:a + n] = first + frame_bytes * torch.arange(int(n))
                continue
            if e.rgb_file is not None and np.shape(e.rgb)[1:] == (image_size, image_size, 3) \
                    and e.rgb.dtype == np.uint8:
                # read, not through the mapping: its pages would stay resident beside the copy
                rgb = np.fromfile(e.rgb_file[0], np.uint8, int(n) * frame_bytes, offset=e.rgb_file[1])
                rgb = rgb.reshape(int(n), image_size, image_size, 3)
            else:
                rgb = np.array(e.rgb)  # np.array: a read-only view
            self.images[row:row + n] = resize_images(rgb, image_size)
            self.ram_row[a:a + n] = torch.arange(row, row + int(n))
            row += int(n)
        self.frames_on_disk = self.num_frames - kept
        self._fds: dict[int, int] = {}
        self.state = torch.as_tensor(np.concatenate([e.state for e in episodes]), dtype=torch.float32)
        self.action = torch.as_tensor(np.concatenate([e.action for e in episodes]), dtype=torch.float32)
        self.waypoints = self.waypoint_is_pad = None
        if actions == "waypoint":  # (N, K, 4) labels and (N, K) padding, per frame
            labels = [episode_waypoints(e.state, chunk_size) for e in episodes]
            self.waypoints = torch.as_tensor(np.concatenate([w for w, _ in labels]))
            self.waypoint_is_pad = torch.as_tensor(np.concatenate([p for _, p in labels]))
        self.goal_vec = self.goal_images = None
        if goal == "point":
            missing = [i for i, e in enumerate(episodes) if e.goal is None]
            if missing:
                raise ValueError(f"goal 'point' needs observation.goal; episode {missing[0]} has none")
            self.goal_vec = torch.as_tensor(np.concatenate([e.goal for e in episodes]), dtype=torch.float32)
        elif goal == "image":
            missing = [i for i, e in enumerate(episodes) if e.goal_image is None]
            if missing:
                raise ValueError(f"goal 'image' needs observation.images.goal; episode {missing[0]} has none")
            self.goal_images = torch.stack([resize_images(e.goal_image, image_size) for e in episodes])

    def __len__(self) -> int:
        return self.num_frames

    def stats(self) -> dict[str, dict]:
        """Normalization statistics of state, action (and goal) over all frames (waypoint
        actions: over every waypoint that is not padding)."""
        action = self.action.numpy() if self.waypoints is None else self.waypoints[~self.waypoint_is_pad].numpy()
        out = {STATE: compute_stats(self.state.numpy()), ACTION: compute_stats(action)}
        if self.goal_vec is not None:
            out[GOAL] = compute_stats(self.goal_vec.numpy())
        return out

    def batch(self, index: torch.Tensor | np.ndarray, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
        """The samples at flat frame indices ``index`` (B,) as a batch (observation module's keys)."""
        i = torch.as_tensor(index, dtype=torch.long)
        obs = (i[:, None] - torch.arange(self.n_obs_steps - 1, -1, -1)).maximum(self.start[i, None])  # (B, n)
        if self.waypoints is None:
            act = i[:, None] + torch.arange(self.chunk_size)  # (B, K)
            is_pad = act >= self.end[i, None]
            action = self.action[act.minimum(self.end[i, None] - 1)]
        else:
            action, is_pad = self.waypoints[i], self.waypoint_is_pad[i]
        out = {IMAGE: to_float(self._frames(obs)), STATE: self.state[obs], ACTION: action, ACTION_IS_PAD: is_pad}
        if self.goal_vec is not None:
            out[GOAL] = self.goal_vec[obs]
        if self.goal_images is not None:
            out[GOAL_IMAGE] = to_float(self.goal_images[self.episode[i]])
        return {k: v.to(device) for k, v in out.items()}


    def _frames(self, index: torch.Tensor) -> torch.Tensor:
        """uint8 (..., 3, S, S) frames at flat frame indices ``index`` (...)."""
        rows = self.ram_row[index]
        if not self.frames_on_disk or bool((rows >= 0).all()):
            return self.images[rows]
        s = self.image_size
        flat, flat_rows = index.reshape(-1), rows.reshape(-1)
        out = torch.empty((len(flat), 3, s, s), dtype=torch.uint8)
        ram = flat_rows >= 0
        out[ram] = self.images[flat_rows[ram]]
        for j in torch.nonzero(~ram).reshape(-1).tolist():
            f = int(self._file[flat[j]])
            fd = self._fds.get(f)
            if fd is None:
                fd = self._fds[f] = os.open(self._files[f], os.O_RDONLY)
            data = os.pread(fd, 3 * s * s, int(self._offset[flat[j]]))
            out[j] = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(s, s, 3).permute(2, 0, 1)
        return out.reshape(*index.shape, 3, s, s)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_fds"] = {}  # file descriptors stay in their process
        return state

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            try:
                os.close(fd)
            except OSError:
                pass


def load_lerobot_episodes(root: str | Path, image_size: int, goal: str = "auto", progress: bool = False,
                          max_episodes: int | None = None, cache: bool = True) -> tuple[list[EpisodeData], str]:
    """Every episode (or the first ``max_episodes``) of a LeRobot v3 dataset (as
    ``airplay dataset export`` writes it) as :class:`EpisodeData` with frames resized to
    ``image_size`` (views of the frame cache, read-only: ChunkDataset copies them); and the goal kind:
    ``goal``, or with "auto" "point" if the dataset has ``observation.goal``, "image" if it has
    ``observation.images.goal``, else "none".

    With ``cache``, the decoded and resized frames of the whole dataset are kept in
    :func:`frame_cache_dir` (``<cache>/frames/<key>/``, the key a hash of the dataset's files
    and the image size), so training again on the same data (DAgger rounds, the scaling study)
    does not decode its video again."""
    from tqdm import tqdm

    from airplay.data.lerobot import LeRobotDataset

    ds = LeRobotDataset(root, cache_episodes=1)
    if goal == "auto":
        goal = "point" if GOAL in ds.features else "image" if GOAL_IMAGE in ds.features else "none"
    need = {"point": GOAL, "image": GOAL_IMAGE}.get(goal)
    for key in (IMAGE, STATE, ACTION) + ((need,) if need else ()):
        if key not in ds.features:
            raise ValueError(f"{root}: dataset has no feature {key!r} (features: {', '.join(ds.features)})")
    count = ds.num_episodes if max_episodes is None else min(int(max_episodes), ds.num_episodes)
    small = lambda frames: resize_images(frames, image_size).permute(0, 2, 3, 1).numpy()  # noqa: E731
    frames = goal_frames = None
    folder = frame_cache_dir(root, image_size) if cache else None
    if folder is not None and (folder / "rgb.npy").is_file():
        frames = np.load(folder / "rgb.npy", mmap_mode="r")
        goal_frames = np.load(folder / "goal.npy", mmap_mode="r") if (folder / "goal.npy").is_file() else None
    if frames is None or (goal == "image" and goal_frames is None):
        bar = tqdm(total=ds.num_episodes if cache else count, desc="decoding episodes", unit="ep",
                   disable=not progress)
        if folder is not None:  # written frame by frame into the cache file: never the whole dataset in memory
            frames, goal_frames = _write_frame_cache(ds, folder, small, image_size, bar)
        else:
            decoded, goals = [], []
            for e in range(count):
                ep = ds.episode(e)
                decoded.append(small(ep[IMAGE]))
                if GOAL_IMAGE in ds.features:
                    goals.append(small(ep[GOAL_IMAGE][:1])[0])
                bar.update(1)
            frames = np.concatenate(decoded)
            goal_frames = np.stack(goals) if goals else None
        bar.close()
    on_disk = isinstance(frames, np.memmap) and frames.flags.c_contiguous
    columns = {key: ds.column(key) for key in (STATE, ACTION) + ((GOAL,) if goal == "point" else ())}
    episodes = []
    for e in range(count):
        info = ds.episodes[e]
        rows = slice(info.from_index, info.to_index)
        episodes.append(EpisodeData(rgb=frames[rows], state=columns[STATE][rows],  # a view: copied by ChunkDataset
                                    action=columns[ACTION][rows],
                                    goal=columns[GOAL][rows] if goal == "point" else None,
                                    goal_image=np.array(goal_frames[e]) if goal == "image" else None,
                                    rgb_file=(str(frames.filename), int(frames.offset) + info.from_index
                                              * int(np.prod(frames.shape[1:]))) if on_disk else None))
    return episodes, goal


def frame_cache_dir(root: str | Path, image_size: int) -> Path:
    """Where the decoded frames of the dataset at ``root`` at ``image_size`` are kept: under
    ``$AIRPLAY_CACHE_DIR`` (or ``~/.cache/airplay``) ``/frames/``, named by a hash of the
    dataset's path, its meta/info.json and the sizes and times of all its files (any change
    of the dataset gives a new key)."""
    import hashlib

    from airplay import config

    root = Path(root).resolve()
    h = hashlib.sha256(f"{root}\n{image_size}\n".encode())
    h.update((root / "meta" / "info.json").read_bytes())
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(root)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return config.cache_dir() / "frames" / h.hexdigest()[:24]


def _write_frame_cache(ds, folder: Path, small, image_size: int, bar) -> tuple[np.ndarray, np.ndarray | None]:
    """Decode every episode of ``ds`` at ``image_size`` straight into the frame cache ``folder``
    (an .npy written in place, aside, then renamed); the cache's (frames, goal frames), mapped."""
    import shutil

    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    out = np.lib.format.open_memmap(tmp / "rgb.npy", mode="w+", dtype=np.uint8,
                                    shape=(len(ds), image_size, image_size, 3))
    goals = []
    for e in range(ds.num_episodes):
        info, ep = ds.episodes[e], ds.episode(e)
        out[info.from_index:info.to_index] = small(ep[IMAGE])
        if GOAL_IMAGE in ds.features:
            goals.append(small(ep[GOAL_IMAGE][:1])[0])
        bar.update(1)
    out.flush()
    del out
    if goals:
        np.save(tmp / "goal.npy", np.stack(goals))
    try:
        os.replace(tmp, folder)
    except OSError:  # another process wrote it first
        shutil.rmtree(tmp, ignore_errors=True)
    goal_path = folder / "goal.npy"
    return np.load(folder / "rgb.npy", mmap_mode="r"), (np.load(goal_path, mmap_mode="r") if goal_path.is_file()
                                                        else None)
