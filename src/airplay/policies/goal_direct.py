"""``goal_direct``: the straight-line baseline. It turns to face the goal and flies straight at it.

It reads only the goal vector of the pointgoal observation (``goal``: the goal relative to the
vehicle in its heading frame, m; :func:`airplay.world.env.goal_in_heading_frame`), no image and
no map: what a policy that ignores the scene would do. In an open space it reaches the goal; where
the straight line crosses a wall it flies into it. The collision tests of the vehicle graph use it
for that (docs/vehicle.md), and the closed-loop tables can list it beside random and the experts.

Command (heading frame, m/s and rad/s; config/vehicle.yaml limits): yaw rate
``yaw_gain * bearing`` (bearing: the goal's angle off the nose, rad), clipped to the vehicle's
limit; forward speed ``min(cruise_m_s, distance / slow_radius_m * cruise_m_s)``, scaled by
``cos(bearing)`` and zero while the goal lies more than ``turn_first_rad`` off the nose (it turns
on the spot first); vertical speed ``vz_gain * dz``, clipped to the limits.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np

from airplay.policies.base import Policy, PolicyConfig, check


@dataclasses.dataclass
class GoalDirectConfig(PolicyConfig):
    """cruise_m_s: forward speed far from the goal; slow_radius_m: distance below which it slows
    down in proportion; yaw_gain (1/s), vz_gain (1/s): proportional gains; turn_first_rad: bearing
    beyond which it turns without moving forward."""

    type: ClassVar[str] = "goal_direct"
    chunk_size: int = 1
    execution_horizon: int = 1
    adapter: str = "hold"
    cruise_m_s: float = 1.0
    slow_radius_m: float = 1.5
    yaw_gain: float = 1.5
    vz_gain: float = 1.0
    turn_first_rad: float = math.radians(45.0)

    def validate(self) -> None:
        super().validate()
        for name in ("cruise_m_s", "slow_radius_m", "yaw_gain", "vz_gain", "turn_first_rad"):
            value = getattr(self, name)
            check(isinstance(value, (int, float)) and math.isfinite(value) and value > 0, name,
                  f"must be a number > 0, got {value!r}")


class GoalDirectPolicy(Policy):
    """Straight at the goal (see the module docstring)."""

    name = "goal_direct"

    def __init__(self, vehicle=None, config: GoalDirectConfig | None = None) -> None:
        from airplay.sim.dynamics import load_vehicle_params

        super().__init__(config or GoalDirectConfig())
        v = vehicle if vehicle is not None else load_vehicle_params()
        self.max_xy, self.max_up, self.max_down = v.max_speed_xy_m_s, v.max_speed_up_m_s, v.max_speed_down_m_s
        self.max_yaw_rate = v.max_yaw_rate_rad_s

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        """(1, 4) float32 [vx, vy, vz, yaw_rate] towards ``obs['goal']`` (heading frame, m)."""
        if "goal" not in obs:
            raise ValueError("goal_direct flies to a goal vector: observation 'goal' is missing (setting pointgoal)")
        cfg = self.config
        gx, gy, gz = (float(v) for v in np.asarray(obs["goal"], np.float64).reshape(-1)[:3])
        distance = math.hypot(gx, gy)
        bearing = math.atan2(gy, gx) if distance > 1e-6 else 0.0
        yaw_rate = float(np.clip(cfg.yaw_gain * bearing, -self.max_yaw_rate, self.max_yaw_rate))
        speed = min(cfg.cruise_m_s, self.max_xy, distance / cfg.slow_radius_m * cfg.cruise_m_s)
        vx = 0.0 if abs(bearing) > cfg.turn_first_rad else speed * math.cos(bearing)
        vz = float(np.clip(cfg.vz_gain * gz, -self.max_down, self.max_up))
        return np.array([[vx, 0.0, vz, yaw_rate]], np.float32)
