"""AirVLN-R1's options as named string values: launch arguments and ROS parameters.

The ROS graph passes the options of ``airplay eval --policy airvln_r1`` as parameters of the
policy node (and the episode ones to every node). They travel as strings (``key:=value``) and
are validated here, once, for the graph description (:mod:`airplay.graph`) and the nodes;
every error names the parameter.

=================  ============================================================================
vln_backend        ``transformers`` (a local Qwen2.5-VL folder, ``model``) or ``openai``
                   (an OpenAI-compatible server, ``endpoint``)
model              transformers: the model folder
endpoint           openai: the API base, e.g. ``http://127.0.0.1:8000/v1``
served_model       openai: the model name ("" = the server's first)
device             transformers: ``cpu`` or ``cuda[:N]``
max_new_tokens     tokens per answer (integer >= 1)
image_size         ``W,H``: resize the views sent to the model ("" = as rendered)
history_offsets    ``-7,-4,-2,-1``: history views, steps back ("" = the default)
vln_config         a YAML file instead of ``config/vln.yaml`` ("" = that file)
vln_episodes       an episode file (airplay's, or AirNav/CityNav-style) instead of sampling
=================  ============================================================================
"""

from __future__ import annotations

from pathlib import Path

from airplay.node_params import launch_text
from airplay.node_schemas import EPISODE, VLN_BACKEND

VLN_OPTIONS: dict[str, str] = {p.name: launch_text(p.default)
                               for p in (*VLN_BACKEND, EPISODE["vln_config"], EPISODE["vln_episodes"])}
"""The option names and their defaults as strings (the node schemas' defaults)."""

EPISODE_OPTIONS = ("vln_config", "vln_episodes")
"""The options that decide the episodes (every node of the graph needs them)."""


class VLNOptionError(ValueError):
    """An option value that cannot be used; the message names the parameter."""


def _ints(name: str, text: str, count: int | None = None) -> tuple[int, ...]:
    parts = [t for t in text.replace(" ", ",").split(",") if t]
    try:
        values = tuple(int(t) for t in parts)
    except ValueError:
        raise VLNOptionError(f"parameter '{name}' must be integers separated by commas, got {text!r}") from None
    if count is not None and len(values) != count:
        raise VLNOptionError(f"parameter '{name}' must be {count} integers separated by a comma, got {text!r}")
    return values


def parse_vln_options(values: dict) -> dict:
    """``{name: str}`` (missing names take the defaults) -> the checked options:
    ``{"backend", "model", "endpoint", "served_model", "device", "max_new_tokens", "image_size",
    "history_offsets", "vln_config", "vln_episodes"}`` with typed values (None where unset).

    Checks what can be checked without loading anything: the backend's required option, that
    the model folder and the files exist, the endpoint's scheme, the integers.
    """
    from airplay.vln.backends import BACKENDS
    from airplay.vln.prompt import DEFAULT_HISTORY_OFFSETS

    v = {**VLN_OPTIONS, **{k: "" if values[k] is None else str(values[k]) for k in values if k in VLN_OPTIONS}}
    backend = v["vln_backend"]
    if backend not in BACKENDS:
        raise VLNOptionError(f"parameter 'vln_backend' must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "transformers":
        if not v["model"]:
            raise VLNOptionError("parameter 'model' must name a local Qwen2.5-VL folder for vln_backend transformers")
        if not Path(v["model"]).is_dir():
            raise VLNOptionError(f"parameter 'model': folder {v['model']} does not exist")
    else:
        if not v["endpoint"]:
            raise VLNOptionError("parameter 'endpoint' must be the API base of an OpenAI-compatible server "
                                 "(e.g. http://127.0.0.1:8000/v1) for vln_backend openai")
        if not v["endpoint"].startswith(("http://", "https://")):
            raise VLNOptionError(f"parameter 'endpoint' must start with http:// or https://, got {v['endpoint']!r}")
    try:
        tokens = int(v["max_new_tokens"])
    except ValueError:
        tokens = 0
    if tokens < 1:
        raise VLNOptionError(f"parameter 'max_new_tokens' must be an integer >= 1, got {v['max_new_tokens']!r}")
    size = _ints("image_size", v["image_size"], 2) if v["image_size"] else None
    if size is not None and min(size) < 1:
        raise VLNOptionError(f"parameter 'image_size' must be two positive integers W,H, got {v['image_size']!r}")
    offsets = _ints("history_offsets", v["history_offsets"]) if v["history_offsets"] else DEFAULT_HISTORY_OFFSETS
    if any(k >= 0 for k in offsets):
        raise VLNOptionError(f"parameter 'history_offsets' must be negative (steps back), got {v['history_offsets']!r}")
    for name in EPISODE_OPTIONS:
        if v[name] and not Path(v[name]).is_file():
            raise VLNOptionError(f"parameter '{name}': file {v[name]} does not exist")
    return {"backend": backend, "model": v["model"] or None, "endpoint": v["endpoint"] or None,
            "served_model": v["served_model"] or None, "device": v["device"] or "cpu", "max_new_tokens": tokens,
            "image_size": size, "history_offsets": tuple(offsets), "vln_config": v["vln_config"] or None,
            "vln_episodes": v["vln_episodes"] or None}


def load_episode_options(vln_config: str | None, vln_episodes: str | None):
    """(VLNConfig, imported episodes or None) of the two episode options; errors name the file."""
    from airplay.vln.actions import load_vln_config
    from airplay.vln.episodes import read_episodes

    return load_vln_config(vln_config or None), (read_episodes(vln_episodes) if vln_episodes else None)
