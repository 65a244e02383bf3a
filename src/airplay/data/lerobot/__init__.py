"""LeRobot v3.0 datasets without lerobot: a writer (pyarrow + PyAV) and a minimal reader.

Modules: :mod:`~airplay.data.lerobot.schema` (features, file paths, versions),
:mod:`~airplay.data.lerobot.stats` (per-feature statistics), :mod:`~airplay.data.lerobot.video`
(H.264 files: encode, probe, decode), :mod:`~airplay.data.lerobot.writer`
(:class:`LeRobotWriter`) and :mod:`~airplay.data.lerobot.reader` (:class:`LeRobotDataset`).

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

Keys (:mod:`airplay.data.keys`; :func:`~airplay.data.lerobot.schema.make_features`):
``observation.images.rgb`` (video, H x W x 3), ``observation.state`` float32 (13)
[x y z qx qy qz qw vx vy vz wx wy wz] (position m in map ENU, quaternion x y z w of base_link
in map, velocity m/s in map, body rates rad/s FLU), ``observation.goal`` float32 (3) goal
relative to the vehicle in the heading frame (x fwd, y left, z up; m),
``observation.images.goal`` (video; imagegoal only: the goal image repeated on every frame),
``observation.depth`` float32 (H, W) metres (opt-in), ``action`` float32 (4)
[vx vy vz yaw_rate] heading-frame m/s and rad/s, plus LeRobot's timestamp, frame_index,
episode_index, index and task_index.
"""

from airplay.data.lerobot.reader import EpisodeInfo, LeRobotDataset
from airplay.data.lerobot.schema import CODEBASE_VERSION, DEFAULT_FPS, TASK_TEXT, DatasetError, make_features
from airplay.data.lerobot.writer import LeRobotWriter

__all__ = ["CODEBASE_VERSION", "DEFAULT_FPS", "TASK_TEXT", "DatasetError", "EpisodeInfo", "LeRobotDataset",
           "LeRobotWriter", "make_features"]
