"""Collision and bounds checks, and the explicit status every episode ends with.

The vehicle is a sphere of radius ``radius_m`` (config/vehicle.yaml). It collides when
the signed distance at its centre is below the radius; it is out of bounds when its
centre leaves the navigable polygon or the flight height band (scene.yaml).
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from airplay.scene.spec import NavigableRegion
from airplay.sim.sdf import SignedDistanceField


class EpisodeStatus(str, Enum):
    """How an episode ended (``RUNNING`` while it has not); values are the results strings."""

    RUNNING = "running"
    SUCCESS = "success"
    COLLISION = "collision"
    OUT_OF_BOUNDS = "out_of_bounds"
    TIMEOUT = "timeout"
    NO_COMMAND = "no_command"
    """The policy sent no command within the bounded wait (ROS lockstep)."""


class CollisionChecker:
    """Sphere-vs-SDF collision and region bounds for one scene, vectorised over vehicles."""

    def __init__(self, sdf: SignedDistanceField, region: NavigableRegion, radius_m: float) -> None:
        if radius_m <= 0:
            raise ValueError(f"vehicle radius must be positive, got {radius_m}")
        self.sdf = sdf
        self.region = region
        self.radius_m = float(radius_m)

    def clearance(self, positions: np.ndarray) -> np.ndarray:
        """(N,) distance from the sphere's surface to the nearest obstacle, m (< 0: collision)."""
        return self.sdf.query(positions) - self.radius_m

    def collided(self, positions: np.ndarray) -> np.ndarray:
        """(N,) bool: the sphere at each position (N, 3) intersects the collision mesh."""
        return self.clearance(positions) < 0.0

    def out_of_bounds(self, positions: np.ndarray) -> np.ndarray:
        """(N,) bool: centre outside the navigable polygon or the height band."""
        return ~self.region.contains(positions)

    def status(self, positions: np.ndarray) -> np.ndarray:
        """(N,) object array of :class:`EpisodeStatus`: COLLISION, OUT_OF_BOUNDS or RUNNING.

        Collision takes precedence when both hold (a crash outside the region is a crash).
        """
        out = np.full(len(np.atleast_2d(positions)), EpisodeStatus.RUNNING, dtype=object)
        out[self.out_of_bounds(positions)] = EpisodeStatus.OUT_OF_BOUNDS
        out[self.collided(positions)] = EpisodeStatus.COLLISION
        return out
