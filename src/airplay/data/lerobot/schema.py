"""The on-disk schema of a LeRobot v3.0 dataset: version, features, file paths, task texts.

Paths are relative to the dataset folder and formatted with LeRobot's fields (chunk_index,
file_index, video_key); the feature keys are :mod:`airplay.data.keys`'.
"""

from __future__ import annotations

from airplay.data.keys import (ACTION_KEY, ACTION_NAMES, DEPTH_KEY, GOAL_IMAGE_KEY, GOAL_KEY, GOAL_NAMES, INDEX_KEYS,
                               RGB_KEY, STATE_KEY, STATE_NAMES)

CODEBASE_VERSION = "v3.0"
DEFAULT_FPS = 50
TASK_TEXT = {
    "pointgoal": "PointGoal: fly to the goal",
    "imagegoal": "ImageGoal: fly to where the goal image was taken",
    "goalfree": "Goal-free: explore without colliding",
}

DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
TASKS_PATH = "meta/tasks.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"

_INDEX_FEATURES = {key: {"dtype": "float32" if key == "timestamp" else "int64", "shape": [1], "names": None}
                   for key in INDEX_KEYS}


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

