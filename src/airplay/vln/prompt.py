"""One AirNav-style prompt for both backends (transformers and OpenAI-compatible servers).

Structure (AirNav / AirVLN-R1): a system message with the role, the action space and the
answer format; a user message with the instruction, the current state (position x, y, z in
metres in the map frame, ENU; heading in degrees counter-clockwise from east), the past
actions, up to four history views and the current view. The model answers with a JSON
list of up to ``max_actions_per_step`` action names.

History views: frames are the camera views at the start of each executed step (frame
``t`` is the current view, ``t - 1`` the view one step ago). Progressive interval
sampling picks frames at ``offsets`` from the current one, dense recently and sparser
further back; the default ``(-7, -4, -2, -1)`` is :func:`progressive_interval_offsets(4)`
(gaps 1, 2, 3 going back). Offsets before the first frame are skipped, so early steps
carry fewer history views.

A :class:`Prompt` holds text and images in order; :meth:`Prompt.chat_messages` gives the
transformers chat format (``{"type": "image"}`` placeholders plus the PIL images) and
:meth:`Prompt.openai_messages` the OpenAI chat-completions format with base64 PNG data URLs.
"""

from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass, field

import numpy as np

from airplay.vln.actions import ActionSpace

DEFAULT_HISTORY_OFFSETS: tuple[int, ...] = (-7, -4, -2, -1)

SYSTEM_PROMPT = (
    "You are the pilot of a small drone that follows a natural-language navigation instruction "
    "through a 3D scene, using the drone's forward-facing camera. At every step you see the "
    "instruction, your current position and heading, the actions you took so far, a few earlier "
    "camera views and the current camera view, and you choose the next actions."
)


def progressive_interval_offsets(count: int = 4) -> tuple[int, ...]:
    """``count`` history offsets with growing gaps, oldest first: 4 -> (-7, -4, -2, -1).

    The k-th most recent view is ``1 + k (k + 1) / 2`` steps back (gaps 1, 2, 3, ...).
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    return tuple(sorted(-(1 + k * (k + 1) // 2) for k in range(count)))


def history_indices(current: int, offsets: tuple[int, ...] = DEFAULT_HISTORY_OFFSETS) -> list[int]:
    """Frame indices of the history views for current frame ``current``: ``current + o`` for
    each (negative) offset, oldest first, without indices before 0 or duplicates."""
    if any(o >= 0 for o in offsets):
        raise ValueError(f"history offsets must be negative, got {offsets}")
    return sorted({current + o for o in offsets if current + o >= 0})


def to_pil(image: np.ndarray, size: tuple[int, int] | None = None):
    """(H, W, 3) uint8 -> PIL image, resized to ``size`` = (width, height) if given."""
    from PIL import Image

    img = Image.fromarray(np.ascontiguousarray(image, dtype=np.uint8))
    if size is not None and img.size != tuple(size):
        img = img.resize(tuple(size), Image.BILINEAR)
    return img


def png_base64(image: np.ndarray, size: tuple[int, int] | None = None) -> str:
    buf = io.BytesIO()
    to_pil(image, size).save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


@dataclass
class Prompt:
    """system text; parts: str (text) or (H, W, 3) uint8 arrays (images), in order;
    image_size: (width, height) the images are resized to (None: as given)."""

    system: str
    parts: list = field(default_factory=list)
    image_size: tuple[int, int] | None = None

    @property
    def images(self) -> list[np.ndarray]:
        return [p for p in self.parts if not isinstance(p, str)]

    @property
    def text(self) -> str:
        """The user text with ``<image>`` where images go (for logs, SFT data and tests)."""
        return "".join(p if isinstance(p, str) else "<image>" for p in self.parts)

    def chat_messages(self) -> tuple[list[dict], list]:
        """(messages, PIL images) in the transformers chat-template format."""
        content, images = [], []
        for p in self.parts:
            if isinstance(p, str):
                content.append({"type": "text", "text": p})
            else:
                content.append({"type": "image"})
                images.append(to_pil(p, self.image_size))
        return [{"role": "system", "content": self.system}, {"role": "user", "content": content}], images

    def openai_messages(self) -> list[dict]:
        """Messages for POST /v1/chat/completions (images as PNG data URLs)."""
        content = []
        for p in self.parts:
            if isinstance(p, str):
                content.append({"type": "text", "text": p})
            else:
                content.append({"type": "image_url",
                                "image_url": {"url": "data:image/png;base64," + png_base64(p, self.image_size)}})
        return [{"role": "system", "content": self.system}, {"role": "user", "content": content}]


@dataclass(frozen=True)
class PromptBuilder:
    """Builds the prompt of one step.

    actions: the scene's :class:`ActionSpace` (names, magnitudes, actions per call);
    history_offsets: progressive interval sampling offsets (negative, in steps);
    image_size: (width, height) of the images sent to the model (None: as rendered);
    max_past_actions: how many of the most recent past actions are listed.
    """

    actions: ActionSpace
    history_offsets: tuple[int, ...] = DEFAULT_HISTORY_OFFSETS
    image_size: tuple[int, int] | None = None
    max_past_actions: int = 40

    def system_text(self) -> str:
        lines = "\n".join(f"- {line}" for line in self.actions.describe())
        return (f"{SYSTEM_PROMPT}\n\nActions:\n{lines}\n\n"
                f"Answer with a JSON list of 1 to {self.actions.max_actions_per_step} actions from "
                f"{', '.join(self.actions.names)}, for example [\"MOVE_FORWARD\", \"TURN_LEFT\"], and nothing "
                f"else. Answer [\"STOP\"] when you have reached the destination.")

    def build(self, instruction: str, pose: tuple[float, float, float, float], past_actions: list[str],
              frames: list[np.ndarray]) -> Prompt:
        """The prompt for the current step.

        pose: (x, y, z, yaw) of base_link in map (m, m, m, rad; yaw CCW from east);
        past_actions: executed action names, oldest first; frames: the views at the start
        of every step so far, the last one being the current view (at least one).
        """
        if not frames:
            raise ValueError("build needs at least the current view")
        x, y, z, yaw = (float(v) for v in pose)
        heading = math.degrees(math.atan2(math.sin(yaw), math.cos(yaw))) % 360.0
        current = len(frames) - 1
        hist = history_indices(current, self.history_offsets)
        shown = past_actions[-self.max_past_actions:] if self.max_past_actions else []
        more = len(past_actions) - len(shown)
        past = ("none" if not past_actions else
                (f"({more} earlier actions omitted) " if more else "") + ", ".join(shown))
        parts: list = [
            f"Instruction: {instruction.strip()}\n",
            f"Current state: x = {x:.1f} m, y = {y:.1f} m, z = {z:.1f} m, heading = {heading:.0f} degrees "
            f"(map frame: x east, y north, z up; heading counter-clockwise from east).\n",
            f"Past actions ({len(past_actions)}): {past}.\n",
        ]
        if hist:
            ago = ", ".join(str(current - i) for i in hist)
            parts.append(f"Earlier views, oldest first ({ago} steps ago):")
            for i in hist:
                parts.append(frames[i])
            parts.append("\n")
        parts += ["Current view:", frames[current],
                  f"\nWhat are the next actions? Answer with a JSON list of at most "
                  f"{self.actions.max_actions_per_step} actions."]
        return Prompt(self.system_text(), parts, self.image_size)
