"""Observations -> batch tensors, in one place for training and acting.

Keys are the LeRobot dataset's (:mod:`airplay.data.keys`):

* ``observation.images.rgb``  (B, T, 3, S, S) float32 in [0, 1]: the camera, resized to S x S.
* ``observation.state``       (B, T, 13) float32: [x y z (map, m), qx qy qz qw (base_link in
  map), vx vy vz (map, m/s), wx wy wz (body, rad/s)].
* ``observation.goal``        (B, T, 3) float32, PointGoal: goal minus position in the heading
  frame (x forward, y left, z up; m).
* ``observation.images.goal`` (B, 3, S, S) float32 in [0, 1], ImageGoal: the view at the goal.
* ``action``                  (B, K, 4) float32 [vx vy vz (heading frame, m/s), yaw rate (rad/s)]
  and ``action_is_pad`` (B, K) bool, in training batches only.

T is the policy's number of observation steps (the current one last; DP uses 2), K its
chunk size. :class:`ObservationHistory` turns AirPlayEnv's obs dicts (``rgb`` HxWx3 uint8,
``state``, ``goal`` / ``goal_image``) into such a batch with B = 1.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import torch
import torch.nn.functional as F

from airplay.data import keys

IMAGE, STATE, GOAL, GOAL_IMAGE = keys.RGB_KEY, keys.STATE_KEY, keys.GOAL_KEY, keys.GOAL_IMAGE_KEY
ACTION, ACTION_IS_PAD = keys.ACTION_KEY, keys.ACTION_IS_PAD_KEY
STATE_DIM, GOAL_DIM, ACTION_DIM = keys.STATE_DIM, keys.GOAL_DIM, keys.ACTION_DIM
GOAL_KINDS = ("point", "image", "none")
"""What the policy is told of the goal: PointGoal vector, ImageGoal image, or nothing."""
STATE_FEATURES = {"none": 0, "velocity": 4, "full": STATE_DIM}
"""What a learned policy reads of ``observation.state`` (config field ``state_features``) and
its width:

* ``none``: nothing (the default): the camera and the goal only. With the full state at
  50 Hz the expert's next command is nearly the vehicle's current motion (correlation 0.86-0.97
  per component over 40 flights), so a model learns to copy its own lagging motion and never
  finishes a turn in the closed loop (the "copycat" failure).
* ``velocity``: [vx vy vz] in the heading frame (m/s) and the yaw rate (rad/s, map z),
  meant to be trained with ``state_noise_std`` so it cannot be copied exactly.
* ``full``: the 13 values as recorded (map position, quaternion, map velocity, body rates);
  checkpoints written before the field existed read this way.
"""


def state_features(state: torch.Tensor, kind: str) -> torch.Tensor:
    """(..., 13) recorded states -> (..., STATE_FEATURES[kind]) model inputs (see :data:`STATE_FEATURES`).

    ``velocity``: the map velocity in the heading frame and the yaw rate, exactly what the
    offline copycat baseline commands (:func:`airplay.policies.motion.copycat_commands`)."""
    if kind == "full":
        return state
    if kind == "none":
        return state[..., :0]
    if kind != "velocity":
        raise ValueError(f"state_features must be one of {', '.join(STATE_FEATURES)}, got {kind!r}")
    from airplay.policies.motion import copycat_commands

    motion = copycat_commands(state.detach().cpu().numpy())
    return torch.as_tensor(motion, dtype=state.dtype, device=state.device)


def resize_images(images: np.ndarray | torch.Tensor, size: int) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> uint8 (..., 3, size, size) (bilinear, antialiased, rounded).

    Training caches its frames this way and acting goes through the same function, so both
    see the same pixels."""
    t = torch.as_tensor(np.ascontiguousarray(images) if isinstance(images, np.ndarray) else images)
    if t.dtype != torch.uint8 or t.ndim < 3 or t.shape[-1] != 3:
        raise ValueError(f"images must be uint8 (..., H, W, 3), got {tuple(t.shape)} {t.dtype}")
    lead = t.shape[:-3]
    t = t.reshape(-1, *t.shape[-3:]).permute(0, 3, 1, 2)
    if t.shape[-2:] != (size, size):
        t = F.interpolate(t.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        t = t.round_().clamp_(0, 255).to(torch.uint8)
    return t.reshape(*lead, 3, size, size).contiguous()


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 images -> float32 in [0, 1]."""
    return images.float().div_(255.0)


def image_tensor(images: np.ndarray | torch.Tensor, size: int) -> torch.Tensor:
    """uint8 (..., H, W, 3) -> float32 (..., 3, size, size) in [0, 1]."""
    return to_float(resize_images(images, size))


class ObservationHistory:
    """The last ``n_steps`` observations of an episode as a B = 1 batch (see the module docstring).

    The first observation of an episode fills the whole history (as the training windows
    repeat the first frame of an episode).
    """

    def __init__(self, n_steps: int, image_size: int, goal: str) -> None:
        if goal not in GOAL_KINDS:
            raise ValueError(f"goal must be one of {', '.join(GOAL_KINDS)}, got {goal!r}")
        self.n_steps, self.image_size, self.goal = int(n_steps), int(image_size), goal
        self.steps: deque[dict] = deque(maxlen=self.n_steps)
        self.goal_image: torch.Tensor | None = None

    def reset(self) -> None:
        self.steps.clear()
        self.goal_image = None

    def __len__(self) -> int:
        return len(self.steps)

    def append(self, obs: dict) -> None:
        step = {IMAGE: image_tensor(_field(obs, "rgb"), self.image_size),
                STATE: torch.as_tensor(np.asarray(_field(obs, "state"), np.float32).reshape(STATE_DIM))}
        if self.goal == "point":
            step[GOAL] = torch.as_tensor(np.asarray(_field(obs, "goal"), np.float32).reshape(GOAL_DIM))
        elif self.goal == "image" and self.goal_image is None:
            self.goal_image = image_tensor(_field(obs, "goal_image"), self.image_size)
        if not self.steps:
            self.steps.extend([step] * self.n_steps)
        else:
            self.steps.append(step)

    def batch(self, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
        if not self.steps:
            raise RuntimeError("no observation yet in this episode")
        out = {k: torch.stack([s[k] for s in self.steps])[None].to(device) for k in self.steps[0]}
        if self.goal == "image":
            out[GOAL_IMAGE] = self.goal_image[None].to(device)
        return out


def _field(obs: dict, key: str):
    if key not in obs:
        raise KeyError(f"observation has no {key!r} (keys: {', '.join(sorted(obs))}); "
                       f"is the policy's goal setting the episode's?")
    return obs[key]
