"""``random``: the lower bound of the closed-loop experiments (docs/policies.md).

Every control period it draws a command uniformly from the vehicle's command box, the
action space of :class:`airplay.world.env.AirPlayEnv`: vx, vy in [-max_speed_xy, +max_speed_xy]
(m/s, heading frame; the flight model clips the horizontal norm to max_speed_xy), vz in
[-max_speed_down, +max_speed_up] and yaw rate in [-max_yaw_rate, +max_yaw_rate] (rad/s),
limits from ``config/vehicle.yaml``. It reads no observation.

The draws are reproducible: ``reset(task)`` reseeds the generator from ``seed`` and the
task's id (CRC-32, not Python's salted ``hash``), so the in-process runner and the policy
node fly the same commands for the same task.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import ClassVar

import numpy as np

from airplay.policies.base import Policy, PolicyConfig, check


@dataclasses.dataclass
class RandomConfig(PolicyConfig):
    """One fresh random command per control (hold, H = 1). seed: base of the per-task seed."""

    type: ClassVar[str] = "random"
    chunk_size: int = 1
    execution_horizon: int = 1
    adapter: str = "hold"
    seed: int = 0

    def validate(self) -> None:
        super().validate()
        check(isinstance(self.seed, int) and not isinstance(self.seed, bool) and self.seed >= 0, "seed",
              f"must be an integer >= 0, got {self.seed!r}")


class RandomPolicy(Policy):
    """Uniform random commands within the vehicle limits (see the module docstring)."""

    name = "random"

    def __init__(self, vehicle=None, config: RandomConfig | None = None) -> None:
        from airplay.sim.dynamics import load_vehicle_params

        super().__init__(config or RandomConfig())
        v = vehicle if vehicle is not None else load_vehicle_params()
        self.low = np.array([-v.max_speed_xy_m_s, -v.max_speed_xy_m_s, -v.max_speed_down_m_s, -v.max_yaw_rate_rad_s],
                            np.float64)
        self.high = np.array([v.max_speed_xy_m_s, v.max_speed_xy_m_s, v.max_speed_up_m_s, v.max_yaw_rate_rad_s],
                             np.float64)
        self.rng = np.random.default_rng(self.config.seed)

    def reset(self, task=None) -> None:
        super().reset(task)
        key = zlib.crc32(str(getattr(task, "task_id", "")).encode()) if task is not None else 0
        self.rng = np.random.default_rng([self.config.seed, key])

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        """(chunk_size, 4) float32 uniform draws in [low, high]."""
        return self.rng.uniform(self.low, self.high, (self.config.chunk_size, 4)).astype(np.float32)
