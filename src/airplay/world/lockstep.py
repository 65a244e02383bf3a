"""Sim time in the ROS graph, and which episode an observation belongs to. No rclpy.

Sim time is integer nanoseconds. The sim stamps the run's first observation 0, each step's
observation one control period ``dt`` after the one before, and an episode's first
observation :data:`RESET_GAP_PERIODS` periods after the previous episode's last one
(:func:`next_start_ns`). The period in between never carries an observation, and that is what
lets a node tell episodes apart whatever order DDS delivers its topics in:

In lockstep the sim publishes the observation ``t + dt`` only after it has received the command
for ``t``, in the same episode. So a node that has handled ``t`` (the renderer rendered it, the
policy acted on it) knows that ``t + dt`` is the same episode's next observation, and that any
later stamp belongs to a later episode, whose start it must wait for: its ``episode/status``
"started" message travels on another topic and may come after the episode's first frames.
Without lockstep (the sim on a wall-clock timer) a stamp belongs to the live episode when it
lies between the episode's start and its end (once the end is known).

:class:`EpisodeGate` applies these rules for one consumer: every frame is ``current`` (handle
it now), ``held`` (it belongs to an episode that has not started here yet; kept, bounded, and
handed back by :meth:`EpisodeGate.start`), a ``duplicate`` of the last handled stamp (the sim
re-publishes its latest observation while it waits), ``ended`` (of an episode that has ended)
or ``stale`` (older than what was handled, or than the live episode). Nothing is fatal; the
gate counts each kind.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from airplay.tasks.sampler import Task

RESET_GAP_PERIODS = 2
"""Control periods from an episode's last observation to the next episode's first."""

CURRENT, HELD, DUPLICATE, ENDED, STALE = "current", "held", "duplicate", "ended", "stale"
VERDICTS = (CURRENT, HELD, DUPLICATE, ENDED, STALE)

MAX_HELD_STAMPS = 16
"""Stamps held for episodes that have not started; beyond this the oldest are dropped (counted
as ``stale``). In lockstep at most one stamp (the next episode's first) is ever held."""

VERDICT_REASONS = {
    HELD: "frames of an episode that has not started yet are held until its start",
    DUPLICATE: "repeated frames of the latest observation (the sim re-publishes while it waits) are answered again",
    ENDED: "frames of an episode that has ended are dropped",
    STALE: "frames older than the live episode's latest observation are dropped",
}
"""What a node logs the first time it meets each kind of out-of-order frame."""


def next_start_ns(last_ns: int | None, dt_ns: int) -> int:
    """Stamp (ns) of an episode's first observation: 0 for the run's first, else
    :data:`RESET_GAP_PERIODS` periods after ``last_ns``, the latest stamp published."""
    return 0 if last_ns is None else int(last_ns) + RESET_GAP_PERIODS * int(dt_ns)


class EpisodeGate:
    """Sorts one consumer's frames by episode (module docstring).

    dt_ns: the control period (ns). lockstep: whether the sim waits for a command per
    observation. Call :meth:`start` on each "started" status, :meth:`end` on each terminal
    status, :meth:`classify` for each frame's stamp, and :meth:`handled` once the frame (or
    the complete observation) of a ``current`` stamp has been used. ``counts`` holds how many
    frames got each verdict; ``held`` the frames waiting for their episode, by stamp.
    """

    def __init__(self, dt_ns: int, lockstep: bool = True) -> None:
        if int(dt_ns) <= 0:
            raise ValueError(f"dt_ns must be > 0, got {dt_ns!r}")
        self.dt_ns = int(dt_ns)
        self.lockstep = bool(lockstep)
        self.episode = None       # id of the live (or last) episode
        self.start_ns: int | None = None
        self.end_ns: int | None = None     # its last observation's stamp, once its end is known
        self.last_ns: int | None = None    # the latest stamp handled in it
        self.held: dict[int, list] = {}
        self.counts: Counter = Counter()

    @property
    def live(self) -> bool:
        """An episode has started here and has not ended."""
        return self.start_ns is not None and self.end_ns is None

    def start(self, episode, start_ns: int) -> list[tuple[int, object]] | None:
        """Episode ``episode`` starts at ``start_ns``. Returns the held frames that are now
        ``current`` (stamp, item) in arrival order, or None when this start is not newer than
        the live one (a repeated or late status: ignore it). Held frames older than the
        start are dropped as ``stale``."""
        start_ns = int(start_ns)
        if self.start_ns is not None and start_ns <= self.start_ns:
            return None
        self.episode, self.start_ns, self.end_ns, self.last_ns = episode, start_ns, None, None
        released = []
        for stamp in sorted(self.held):
            if stamp < start_ns:
                self.counts[STALE] += len(self.held.pop(stamp))
            elif self.classify(stamp, count=False) == CURRENT:
                released += [(stamp, item) for item in self.held.pop(stamp)]
        return released

    def end(self, episode, steps: int | None = None) -> None:
        """Episode ``episode`` ended after ``steps`` steps (its last observation is then
        ``start + steps * dt``); without ``steps``, at the latest stamp handled."""
        if episode != self.episode or self.start_ns is None:
            return
        if steps is not None:
            self.end_ns = self.start_ns + int(steps) * self.dt_ns
        else:
            self.end_ns = self.start_ns if self.last_ns is None else self.last_ns

    def apply(self, status: dict) -> list[tuple[int, object]] | None:
        """Apply an ``episode/status`` payload: a terminal one ends its episode (None), a
        "started" one starts it (what :meth:`start` returns). ValueError for a malformed one,
        before anything changes."""
        try:
            kind, episode = status["status"], status.get("episode")
            stamp = int(status["stamp_ns"]) if kind == "started" else None
            steps = None if kind == "started" or status.get("steps") is None else int(status["steps"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed episode/status ({type(exc).__name__}: {exc})") from None
        if kind != "started":
            self.end(episode, steps)
            return None
        return self.start(episode, stamp)

    def classify(self, stamp: int, count: bool = True) -> str:
        """The verdict for a frame stamped ``stamp`` (ns); counted in ``counts`` unless ``count`` is False."""
        verdict = self._verdict(int(stamp))
        if count:
            self.counts[verdict] += 1
        return verdict

    def _verdict(self, stamp: int) -> str:
        if self.start_ns is None:
            return HELD
        if stamp < self.start_ns:
            return STALE
        if self.end_ns is not None:
            if stamp > self.end_ns:
                return HELD
            return DUPLICATE if stamp == self.last_ns else ENDED
        if self.last_ns is not None and stamp <= self.last_ns:
            return DUPLICATE if stamp == self.last_ns else STALE
        if not self.lockstep:
            return CURRENT
        expected = self.start_ns if self.last_ns is None else self.last_ns + self.dt_ns
        return CURRENT if stamp == expected else HELD

    def hold(self, stamp: int, item) -> None:
        """Keep ``item`` until its episode starts (a ``held`` verdict); bounded by :data:`MAX_HELD_STAMPS`."""
        self.held.setdefault(int(stamp), []).append(item)
        while len(self.held) > MAX_HELD_STAMPS:
            self.counts[STALE] += len(self.held.pop(min(self.held)))

    def handled(self, stamp: int) -> None:
        """The observation stamped ``stamp`` of the live episode has been used (rendered, acted on)."""
        stamp = int(stamp)
        if self.last_ns is None or stamp > self.last_ns:
            self.last_ns = stamp


@dataclass(frozen=True)
class EpisodeCommand:
    """What the evaluator sends on ``episode/command`` (JSON) to start an episode, and what the
    sim echoes, with ``"status": "started"`` and the first observation's ``stamp_ns``, on
    ``episode/status``: everything the nodes need to fly it, so that none of them samples tasks.

    episode: the run's episode number (0, 1, ...). scene_dir: the scene folder. index: the
    task's index among the scene's tasks (for names and records). task: the
    :class:`~airplay.tasks.sampler.Task` (start, goal, path, time limit). success_radius_m: the
    radius (m) within which the sim ends the episode as a success (the scene protocol's; 0 for
    VLN, where AirNav decides success at the end). instruction: the VLN episode's instruction
    ("" otherwise).
    """

    episode: int
    scene_dir: str
    index: int
    task: Task
    success_radius_m: float
    instruction: str = ""

    def to_payload(self) -> dict:
        """The JSON object (floats exact: the task comes back bit for bit)."""
        return {"episode": self.episode, "scene_dir": self.scene_dir, "index": self.index,
                "task": self.task.to_dict(path=True), "success_radius_m": float(self.success_radius_m),
                "instruction": self.instruction}

    @classmethod
    def from_payload(cls, d: dict) -> "EpisodeCommand":
        """The command of :meth:`to_payload` (or of a "started" status); ValueError names the bad field."""
        if not isinstance(d, dict):
            raise ValueError(f"an episode command is a JSON object, got {type(d).__name__}")
        try:
            episode, index = d["episode"], d["index"]
            scene_dir, task, radius = d["scene_dir"], d["task"], d["success_radius_m"]
        except KeyError as exc:
            raise ValueError(f"episode command field {exc} is missing") from None
        for name, value in (("episode", episode), ("index", index)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"episode command field '{name}' must be an integer >= 0, got {value!r}")
        if not isinstance(scene_dir, str) or not scene_dir:
            raise ValueError(f"episode command field 'scene_dir' must be a folder name, got {scene_dir!r}")
        if isinstance(radius, bool) or not isinstance(radius, (int, float)) or not radius >= 0:
            raise ValueError(f"episode command field 'success_radius_m' must be a number >= 0, got {radius!r}")
        if not isinstance(task, dict):
            raise ValueError(f"episode command field 'task' must be a JSON object, got {task!r:.80}")
        instruction = d.get("instruction", "")
        if not isinstance(instruction, str):
            raise ValueError(f"episode command field 'instruction' must be a string, got {instruction!r:.80}")
        return cls(episode, scene_dir, index, Task.from_dict(task), float(radius), instruction)
