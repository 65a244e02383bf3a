"""Where airplay's YAML configuration lives: the source tree's ``config/`` or the installed copy."""

from __future__ import annotations

import sys
from pathlib import Path


def config_dir() -> Path:
    """``config/`` of the source tree (editable installs, tests), else ``share/airplay/config``
    under the interpreter's prefix (pip wheels, colcon installs)."""
    source = Path(__file__).resolve().parents[2] / "config"
    if source.is_dir():
        return source
    installed = Path(sys.prefix) / "share" / "airplay" / "config"
    if installed.is_dir():
        return installed
    raise FileNotFoundError(f"airplay config folder not found (looked in {source} and {installed})")
