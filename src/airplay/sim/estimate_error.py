"""The error of a vehicle's position estimate, as the policy sees it.

On a real vehicle the policy sees the autopilot's *estimate*: the camera image is taken (in a
rehearsal, rendered) where the vehicle truly is, but the state and the goal vector are the
estimate's, and in a rehearsal the image too is rendered at the estimated pose. Measured on PX4
SIH (``airplay identify --truth``) the estimate was 0.10 m horizontally and 0.11 m vertically
off the truth (RMS), and the error wanders slowly rather than jumping from frame to frame.

:class:`EstimateErrorModel` describes it as a first-order Gauss-Markov process per map axis
(x, y, z): stationary RMS ``xy_rms_m`` of the horizontal error (both axes together, so each axis
has ``xy_rms_m / sqrt(2)``), ``z_rms_m`` vertically, and correlation time ``time_constant_s``.
A vehicle profile (``config/vehicles/*.yaml``) carries it in ``profile.estimate_error``
(:func:`load_vehicle_file`); ``airplay eval``, ``collect`` and ``dagger`` with ``--vehicle``
then fly with it: :class:`~airplay.world.env.AirPlayEnv` keeps the true state for the physics
and the task's rules (collision, success, time) and gives the policy the estimated position
(state, goal vector, camera pose). The process starts from its stationary distribution; each
episode's draw is seeded by the seed given and the task's id, so a run is reproducible.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from airplay.sim.dynamics import PROFILE_KEY, VehicleParams, load_vehicle_params, load_vehicle_profile
from airplay.yaml_config import ConfigError

ESTIMATE_ERROR_KEY = "estimate_error"
"""The field of a vehicle profile's ``profile`` mapping that holds the model."""
DEFAULT_TIME_CONSTANT_S = 5.0
"""Correlation time where a profile does not give one, s."""


@dataclass(frozen=True)
class EstimateErrorModel:
    """Position-estimate error (module docstring): RMS horizontally (m, both axes together) and
    vertically (m), and the correlation time (s)."""

    xy_rms_m: float
    z_rms_m: float
    time_constant_s: float = DEFAULT_TIME_CONSTANT_S

    def __post_init__(self) -> None:
        for name in ("xy_rms_m", "z_rms_m"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"estimate error '{name}' must be a finite number >= 0 (m), got {value!r}")
        if not (isinstance(self.time_constant_s, (int, float)) and math.isfinite(self.time_constant_s)
                and self.time_constant_s > 0):
            raise ValueError(f"estimate error 'time_constant_s' must be > 0 (s), got {self.time_constant_s!r}")

    @property
    def sigma_m(self) -> np.ndarray:
        """(3,) stationary standard deviation per map axis, m."""
        return np.array([self.xy_rms_m / math.sqrt(2.0), self.xy_rms_m / math.sqrt(2.0), self.z_rms_m])

    def start(self, seed: int, task_id: str, dt_s: float) -> EstimateErrorRun:
        """One episode's error, stepped every ``dt_s`` seconds, drawn from (``seed``, ``task_id``)."""
        rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, zlib.crc32(str(task_id).encode())])
        return EstimateErrorRun(self, rng, dt_s)

    def to_dict(self) -> dict:
        return {"xy_rms_m": self.xy_rms_m, "z_rms_m": self.z_rms_m, "time_constant_s": self.time_constant_s}


class EstimateErrorRun:
    """One episode of the process: :attr:`offset` (3,) m (estimate - truth, map frame), advanced
    by :meth:`step` once per control period."""

    def __init__(self, model: EstimateErrorModel, rng: np.random.Generator, dt_s: float) -> None:
        self.model, self.rng = model, rng
        self.sigma = model.sigma_m
        self.decay = math.exp(-float(dt_s) / model.time_constant_s)
        self.drive = math.sqrt(1.0 - self.decay ** 2)
        self.offset = self.sigma * rng.standard_normal(3)

    def step(self) -> np.ndarray:
        """Advance one period; the new offset."""
        self.offset = self.decay * self.offset + self.drive * self.sigma * self.rng.standard_normal(3)
        return self.offset


def estimate_error_from_profile(profile: dict) -> EstimateErrorModel | None:
    """The model in a vehicle profile's ``profile`` mapping (``estimate_error``: ``xy_rms_m``,
    ``z_rms_m``, optional ``time_constant_s``), or None where it has none. ValueError names the field."""
    data = profile.get(ESTIMATE_ERROR_KEY) if isinstance(profile, dict) else None
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"'{ESTIMATE_ERROR_KEY}' must be a mapping, got {data!r}")
    values = {}
    for key in ("xy_rms_m", "z_rms_m", "time_constant_s"):
        if key not in data:
            if key == "time_constant_s":
                continue
            raise ValueError(f"'{ESTIMATE_ERROR_KEY}.{key}' is missing")
        try:
            values[key] = float(data[key])
        except (TypeError, ValueError):
            raise ValueError(f"'{ESTIMATE_ERROR_KEY}.{key}' must be a number, got {data[key]!r}") from None
    return EstimateErrorModel(**values)


def load_vehicle_file(path: str | Path | None) -> tuple[VehicleParams, EstimateErrorModel | None]:
    """What ``--vehicle FILE`` gives a :class:`~airplay.world.World`: the flight model's parameters
    and the estimate-error model of the vehicle file ``path`` (empty or None: config/vehicle.yaml,
    no estimate error); a :class:`~airplay.yaml_config.ConfigError` names the file and the field."""
    if not path:
        return load_vehicle_params(), None
    params, profile = load_vehicle_profile(path)
    try:
        return params, estimate_error_from_profile(profile)
    except ValueError as exc:
        raise ConfigError(Path(path), str(exc), f"{PROFILE_KEY}.{ESTIMATE_ERROR_KEY}") from None

