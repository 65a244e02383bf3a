"""Training windows over demonstrations: observation history, future action chunk, padding mask.

All frames are decoded once and cached in memory, resized to the policy's image size as
uint8 (:func:`airplay.policies.observation.resize_images`), so a batch is one vectorized
gather: the CPU or GPU is never waiting on video decoding.

A sample at frame t of an episode of T frames holds the observations at t - n + 1 .. t
(repeating frame 0 before the start) and the actions t .. t + K - 1; those past the end
repeat the last action and are flagged in ``action_is_pad``. With ``actions="waypoint"`` the
chunk is the K poses after t relative to t's (:func:`airplay.policies.waypoints.episode_waypoints`),
computed once here from the recorded states.
"""

from __future__ import annotations

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
    None; goal_image (H, W, 3) uint8 or None."""

    rgb: np.ndarray
    state: np.ndarray
    action: np.ndarray
    goal: np.ndarray | None = None
    goal_image: np.ndarray | None = None

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
    """

    def __init__(self, episodes: list[EpisodeData], image_size: int, n_obs_steps: int = 1, chunk_size: int = 1,
                 goal: str = "point", actions: str = "velocity") -> None:
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
        self.images = torch.empty((self.num_frames, 3, image_size, image_size), dtype=torch.uint8)
        for e, a, n in zip(episodes, starts, lengths):
            self.images[a:a + n] = resize_images(np.array(e.rgb), image_size)  # np.array: a read-only view
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
        out = {IMAGE: to_float(self.images[obs]), STATE: self.state[obs], ACTION: action, ACTION_IS_PAD: is_pad}
        if self.goal_vec is not None:
            out[GOAL] = self.goal_vec[obs]
        if self.goal_images is not None:
            out[GOAL_IMAGE] = to_float(self.goal_images[self.episode[i]])
        return {k: v.to(device) for k, v in out.items()}


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
        decoded, goals = [], []
        total = ds.num_episodes if cache else count
        for e in tqdm(range(total), desc="decoding episodes", unit="ep", disable=not progress):
            ep = ds.episode(e)
            decoded.append(small(ep[IMAGE]))
            if GOAL_IMAGE in ds.features:
                goals.append(small(ep[GOAL_IMAGE][:1])[0])
        frames = np.concatenate(decoded)
        goal_frames = np.stack(goals) if goals else None
        if folder is not None:
            _write_frame_cache(folder, frames, goal_frames)
    columns = {key: ds.column(key) for key in (STATE, ACTION) + ((GOAL,) if goal == "point" else ())}
    episodes = []
    for e in range(count):
        info = ds.episodes[e]
        rows = slice(info.from_index, info.to_index)
        episodes.append(EpisodeData(rgb=frames[rows], state=columns[STATE][rows],  # a view: copied by ChunkDataset
                                    action=columns[ACTION][rows],
                                    goal=columns[GOAL][rows] if goal == "point" else None,
                                    goal_image=np.array(goal_frames[e]) if goal == "image" else None))
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


def _write_frame_cache(folder: Path, frames: np.ndarray, goal_frames: np.ndarray | None) -> None:
    """Write the cache folder aside and rename it into place (never half-written)."""
    import os
    import shutil

    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    np.save(tmp / "rgb.npy", frames)
    if goal_frames is not None:
        np.save(tmp / "goal.npy", goal_frames)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process wrote it first
        shutil.rmtree(tmp, ignore_errors=True)
