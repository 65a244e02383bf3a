"""The evaluation protocol (``config/protocol.yaml``): task sampling settings, success radius,
episode time limit.

The defaults are AirPlayground's reference task settings (DESIGN.md section 6); the success
radius and the time limit are our choice, documented in the YAML file itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airplay.config import config_dir
from airplay.yaml_config import ConfigError, load_yaml

PROTOCOL_FILE = "protocol.yaml"


@dataclass(frozen=True)
class TaskSettings:
    """How tasks are sampled (``task:`` in protocol.yaml); lengths in metres."""

    grid_resolution_m: float = 0.10
    endpoint_candidates: int = 128
    min_endpoint_separation_m: float = 2.0
    endpoint_extra_clearance_m: float = 0.40
    distance_quantile: float = 0.0
    clearance_margin_m: float = 0.05

    def clearance_m(self, vehicle_radius_m: float) -> float:
        """Planning clearance: the vehicle sphere's radius plus the margin, metres."""
        return float(vehicle_radius_m) + self.clearance_margin_m


@dataclass(frozen=True)
class Protocol:
    """Everything protocol.yaml fixes for closed-loop evaluation."""

    task: TaskSettings = TaskSettings()
    success_radius_m: float = 1.0
    time_limit_base_s: float = 10.0
    time_limit_per_astar_m_s: float = 1.5
    render_lod_px: float = 2.0
    """Level of detail of the camera images (``render: lod_px``; :mod:`airplay.render.lod`):
    clusters of Gaussians projecting to at most this many pixels are drawn merged; 0 = exact."""
    render_lod_cell_m: float = 0.5
    render_lod_cell_deg: float = 15.0
    """Pose cell of the LOD cut (``render: lod_cell_m``, ``lod_cell_deg``; both 0 = off): the cut
    is made once per cell of position (m) x heading (deg), valid for every pose in it, and
    reused (:func:`airplay.render.lod.render_lod_cell_cpu`); images may then be finer, never
    coarser, than at ``lod_px`` per view, and stay a function of the pose."""

    def time_limit_s(self, astar_length_m: float) -> float:
        """Episode time limit, seconds: base + per-metre factor * A* path length (m)."""
        return self.time_limit_base_s + self.time_limit_per_astar_m_s * float(astar_length_m)


def _number(path: Path, data: dict, key: str, prefix: str, *, positive: bool = True,
            integer: bool = False, lo: float | None = None, hi: float | None = None) -> Any:
    name = prefix + key
    if key not in data:
        raise ConfigError(path, "required field is missing", name)
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(path, f"must be a finite number, got {value!r}", name)
    if integer and value != int(value):
        raise ConfigError(path, f"must be an integer, got {value!r}", name)
    if positive and value <= 0:
        raise ConfigError(path, f"must be positive, got {value!r}", name)
    if lo is not None and value < lo or hi is not None and value > hi:
        raise ConfigError(path, f"must be in [{lo}, {hi}], got {value!r}", name)
    return int(value) if integer else float(value)


def load_protocol(path: str | Path | None = None) -> Protocol:
    """Read and validate protocol.yaml (default: :func:`airplay.config.config_dir`/protocol.yaml).

    Raises :class:`~airplay.yaml_config.ConfigError` naming the file and the field when it is
    missing or invalid.
    """
    path = Path(path) if path is not None else config_dir() / PROTOCOL_FILE
    data = load_yaml(path, what="protocol file")
    task = data.get("task")
    if not isinstance(task, dict):
        raise ConfigError(path, "required mapping is missing", "task")
    limit = data.get("time_limit")
    if not isinstance(limit, dict):
        raise ConfigError(path, "required mapping is missing", "time_limit")
    settings = TaskSettings(
        grid_resolution_m=_number(path, task, "grid_resolution_m", "task."),
        endpoint_candidates=_number(path, task, "endpoint_candidates", "task.", integer=True, lo=2),
        min_endpoint_separation_m=_number(path, task, "min_endpoint_separation_m", "task.", positive=False, lo=0.0),
        endpoint_extra_clearance_m=_number(path, task, "endpoint_extra_clearance_m", "task.", positive=False,
                                           lo=0.0),
        distance_quantile=_number(path, task, "distance_quantile", "task.", positive=False, lo=0.0, hi=1.0),
        clearance_margin_m=_number(path, task, "clearance_margin_m", "task.", positive=False, lo=0.0),
    )
    render = data.get("render", {})
    if not isinstance(render, dict):
        raise ConfigError(path, "must be a mapping", "render")
    lod_px = (_number(path, render, "lod_px", "render.", positive=False, lo=0.0) if "lod_px" in render
              else Protocol.render_lod_px)
    cell = {}
    for key in ("lod_cell_m", "lod_cell_deg"):
        cell[key] = (_number(path, render, key, "render.", positive=False, lo=0.0) if key in render
                     else getattr(Protocol, "render_" + key))
    if (cell["lod_cell_m"] > 0.0) != (cell["lod_cell_deg"] > 0.0) or cell["lod_cell_deg"] > 180.0:
        raise ConfigError(path, "render.lod_cell_m and render.lod_cell_deg: both 0 (off) or both positive "
                                f"(lod_cell_deg <= 180), got {cell['lod_cell_m']!r}, {cell['lod_cell_deg']!r}")
    return Protocol(
        render_lod_px=lod_px,
        render_lod_cell_m=cell["lod_cell_m"],
        render_lod_cell_deg=cell["lod_cell_deg"],
        task=settings,
        success_radius_m=_number(path, data, "success_radius_m", ""),
        time_limit_base_s=_number(path, limit, "base_s", "time_limit.", positive=False, lo=0.0),
        time_limit_per_astar_m_s=_number(path, limit, "per_astar_m_s", "time_limit.", positive=False, lo=0.0),
    )
