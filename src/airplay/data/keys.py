"""The dataset feature keys and their element names: the one definition of LeRobot's keys.

Datasets (:mod:`airplay.data.lerobot`), the learned policies' batches
(:mod:`airplay.policies.observation`) and the tools that read datasets use these names.

=========================  ==========================================================================
key                        value
=========================  ==========================================================================
``observation.images.rgb`` the camera image, H x W x 3 uint8 (video in a dataset)
``observation.images.goal``ImageGoal: the view at the goal, H x W x 3 uint8 (video; every frame)
``observation.state``      float32 (13) :data:`STATE_NAMES`: position (m, map ENU), quaternion x y z w
                           (base_link in map), velocity (m/s, map), body rates (rad/s, FLU)
``observation.goal``       float32 (3) :data:`GOAL_NAMES`: goal minus position in the heading frame
                           (x forward, y left, z up; m)
``observation.depth``      float32 (H, W) metres (opt-in)
``action``                 float32 (4) :data:`ACTION_NAMES`: vx vy vz (m/s, heading frame), yaw rate
                           (rad/s)
``action_is_pad``          bool per action of a training chunk: past the episode's end (padding)
=========================  ==========================================================================
"""

from __future__ import annotations

RGB_KEY = "observation.images.rgb"
GOAL_IMAGE_KEY = "observation.images.goal"
STATE_KEY = "observation.state"
GOAL_KEY = "observation.goal"
DEPTH_KEY = "observation.depth"
ACTION_KEY = "action"
ACTION_IS_PAD_KEY = "action_is_pad"

STATE_NAMES = ("x", "y", "z", "qx", "qy", "qz", "qw", "vx", "vy", "vz", "wx", "wy", "wz")
GOAL_NAMES = ("x_forward", "y_left", "z_up")
ACTION_NAMES = ("vx", "vy", "vz", "yaw_rate")
STATE_DIM, GOAL_DIM, ACTION_DIM = len(STATE_NAMES), len(GOAL_NAMES), len(ACTION_NAMES)

INDEX_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")
"""LeRobot's per-frame bookkeeping columns: seconds from the episode start, frame number in the
episode, episode number, frame number in the dataset, task number."""
