"""External velocity disturbances of the flight model: wind with gusts, and velocity impulses.

A :class:`Disturbance` is written as one text (the ``--wind`` option of ``airplay eval``, the
``wind`` parameter of the ``sim`` node and launch argument of ``sim_eval``), comma-separated
``key=value`` items; vectors are colon-separated map-frame (ENU) components, m/s::

    wind=VX:VY[:VZ]      mean wind (default 0:0:0)
    gust=STD             gust strength: standard deviation of each horizontal gust component, m/s (default 0)
    gust_tau=S           correlation time of the gusts, s (default 2)
    drag_tau=S           how hard the air pulls: a wind W accelerates the vehicle by W / drag_tau (default 1 s)
    impulse=VX:VY[:VZ]@STEP   a velocity added once, at the start of control step STEP (0: the first step)

A bare vector (``--wind 3:0``) is short for ``wind=3:0``. The empty text is no disturbance.

Model, per 50 Hz control step k of an episode, before the flight model integrates the step:
the air velocity is ``a_k = wind + g_k``, where the gust ``g`` is a horizontal Ornstein-Uhlenbeck
process (``g_k = e g_{k-1} + gust sqrt(1 - e^2) n_k``, ``e = exp(-dt / gust_tau)``, ``n_k``
standard normal, ``g_0`` drawn from its stationary law); the vehicle's map velocity gains
``a_k dt / drag_tau``, plus the impulse at step ``STEP``. The velocity controller of
:mod:`airplay.sim.dynamics` then pulls the velocity back towards the command, so a steady wind
W leaves a hovering vehicle drifting at ``W velocity_time_constant_s / drag_tau`` and an
impulse of v moves it about ``v velocity_time_constant_s`` before it is absorbed.

The gust noise is seeded by the evaluation's seed and the task's id (CRC-32), so the in-process
runtime and the ROS graph's sim node draw the same gusts for the same task. No disturbance
(None, or the empty text) leaves the flight model untouched: results are those without one.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

import numpy as np

_KEYS = ("wind", "gust", "gust_tau", "drag_tau", "impulse")
_STREAM = 0x57494E44  # "WIND": keeps the gust draws apart from other per-task generators


class DisturbanceError(ValueError):
    """A disturbance text that cannot be parsed; the message names the item."""


def _vector(key: str, text: str) -> tuple[float, float, float]:
    parts = text.split(":")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (2, 3) or not all(math.isfinite(v) for v in values):
        raise DisturbanceError(f"disturbance item {key}={text!r} must be VX:VY or VX:VY:VZ in m/s (finite numbers)")
    return (values[0], values[1], values[2] if len(values) == 3 else 0.0)


def _number(key: str, text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        what = "> 0" if positive else ">= 0"
        raise DisturbanceError(f"disturbance item {key}={text!r} must be a number {what}")
    return value


@dataclass(frozen=True)
class Disturbance:
    """See the module docstring. Vectors in map ENU m/s; times in s; ``impulse_step`` -1: none."""

    wind: tuple[float, float, float] = (0.0, 0.0, 0.0)
    gust: float = 0.0
    gust_tau: float = 2.0
    drag_tau: float = 1.0
    impulse: tuple[float, float, float] = (0.0, 0.0, 0.0)
    impulse_step: int = -1

    @property
    def has_air(self) -> bool:
        """True when wind or gusts act (otherwise only the impulse, if any)."""
        return self.gust > 0.0 or any(v != 0.0 for v in self.wind)

    @classmethod
    def parse(cls, text: str) -> "Disturbance | None":
        """The disturbance written as ``text`` (module docstring); None for the empty text.
        DisturbanceError names the item that is wrong."""
        text = (text or "").strip()
        if not text:
            return None
        if "=" not in text:
            text = f"wind={text}"
        values: dict = {}
        for item in text.split(","):
            if "=" not in item:
                raise DisturbanceError(f"disturbance item {item.strip()!r} must look like key=value "
                                       f"(keys: {', '.join(_KEYS)})")
            key, value = (s.strip() for s in item.split("=", 1))
            if key not in _KEYS:
                raise DisturbanceError(f"unknown disturbance item {key!r}; keys: {', '.join(_KEYS)}")
            if key in values:
                raise DisturbanceError(f"disturbance item {key!r} given twice")
            values[key] = value
        kwargs: dict = {}
        if "wind" in values:
            kwargs["wind"] = _vector("wind", values["wind"])
        if "gust" in values:
            kwargs["gust"] = _number("gust", values["gust"], positive=False)
        for key in ("gust_tau", "drag_tau"):
            if key in values:
                kwargs[key] = _number(key, values[key], positive=True)
        if "impulse" in values:
            vec, sep, step = values["impulse"].partition("@")
            if not sep or not step.strip().isdigit():
                raise DisturbanceError(f"disturbance item impulse={values['impulse']!r} must be VX:VY[:VZ]@STEP "
                                       "(STEP: the control step, an integer >= 0)")
            kwargs["impulse"], kwargs["impulse_step"] = _vector("impulse", vec), int(step)
        return cls(**kwargs)

    def to_text(self) -> str:
        """The canonical text of this disturbance (parses back to an equal one)."""
        def vec(v):
            return ":".join(repr(float(c)) for c in v)

        items = [f"wind={vec(self.wind)}"]
        if self.gust:
            items.append(f"gust={self.gust!r}")
        items += [f"gust_tau={self.gust_tau!r}", f"drag_tau={self.drag_tau!r}"]
        if self.impulse_step >= 0:
            items.append(f"impulse={vec(self.impulse)}@{self.impulse_step}")
        return ",".join(items)

    def start(self, seed: int, task_id: str, dt_s: float) -> "DisturbanceRun":
        """The disturbance of one episode (its gusts seeded by ``seed`` and ``task_id``)."""
        return DisturbanceRun(self, seed, task_id, dt_s)


class DisturbanceRun:
    """One episode's disturbance: :meth:`velocity_change` for each control step in turn."""

    def __init__(self, spec: Disturbance, seed: int, task_id: str, dt_s: float) -> None:
        self.spec = spec
        self.dt = float(dt_s)
        self.rng = np.random.default_rng([int(seed), zlib.crc32(str(task_id).encode()), _STREAM])
        self.decay = math.exp(-self.dt / spec.gust_tau)
        self.gust = np.zeros(3)
        if spec.gust > 0.0:
            self.gust[:2] = spec.gust * self.rng.standard_normal(2)
        self.wind = np.asarray(spec.wind, dtype=np.float64)
        self.impulse = np.asarray(spec.impulse, dtype=np.float64)

    def velocity_change(self, step: int) -> np.ndarray | None:
        """(3,) map velocity (m/s) to add before control step ``step`` (0-based), or None for none."""
        spec = self.spec
        out = None
        if spec.has_air:
            if spec.gust > 0.0 and step > 0:
                noise = self.rng.standard_normal(2)
                self.gust[:2] = self.decay * self.gust[:2] + spec.gust * math.sqrt(1.0 - self.decay ** 2) * noise
            out = (self.wind + self.gust) * (self.dt / spec.drag_tau)
        if step == spec.impulse_step:
            out = self.impulse.copy() if out is None else out + self.impulse
        return out
