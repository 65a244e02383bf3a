"""The composition root: a scene, its renderers, signed distance field, navigable grid and
protocol put together (:class:`World`), the in-process Gymnasium environments that fly tasks
in it (:mod:`airplay.world.env`, one vehicle; :mod:`airplay.world.vector_env`, N as one batch), built
from one configuration (:mod:`airplay.world.env_config`), the ROS graph's episode and sim-time rules
(:mod:`airplay.world.lockstep`) and the nodes' warm-up (:mod:`airplay.world.warmup`).

It sits above scene, render, sim and tasks and below policies, data, eval, vln and bridge
(docs/architecture.md)."""

from airplay.world.world import World

__all__ = ["World"]
