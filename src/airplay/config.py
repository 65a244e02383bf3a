"""Where airplay's files live: the user cache (:func:`cache_dir`), and the installed data,
``config/`` (node and protocol YAML, the loopback Fast DDS profile) and ``launch/`` (the
``ros2 launch`` files), under the package's share folder.

The share folder is looked for, in this order:

1. the ament index (``ament_index_python.get_package_share_directory('airplay')``), where
   ``ament_index_python`` is importable and ``airplay`` is registered on ``AMENT_PREFIX_PATH``
   (a sourced ``colcon build``, with or without ``--symlink-install``; the Docker image);
2. the data installed with this module (``pip install .``, a wheel): the
   ``share/airplay`` that the installed distribution's file list holds next to this very
   module, or else ``PREFIX/share/airplay`` for a module installed in
   ``PREFIX/lib/pythonX.Y/site-packages`` (a colcon install that is not sourced);
3. the source tree this module is imported from (``pip install -e .``, tests), whose root
   holds ``package.xml``, ``config/`` and ``launch/``.

A share folder counts only if it holds ``config/``. Nothing is found: FileNotFoundError
listing every place looked at, and how to install.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE = "airplay"
MARKER = "config"
"""The sub-folder a share folder must hold to count."""


class ShareNotFound(FileNotFoundError):
    """No share folder of airplay holding ``config/`` was found; the message says where it looked."""


def _from_ament_index(looked: list[str]) -> Path | None:
    """share/airplay registered in the ament index, or None (reason appended to ``looked``)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        looked.append("the ament index (ament_index_python is not installed)")
        return None
    if not os.environ.get("AMENT_PREFIX_PATH"):
        looked.append("the ament index (AMENT_PREFIX_PATH is not set: no ROS workspace is sourced)")
        return None
    try:
        share = Path(get_package_share_directory(PACKAGE))
    except (PackageNotFoundError, LookupError, OSError, ValueError) as exc:
        looked.append(f"the ament index ({PACKAGE} is not registered on AMENT_PREFIX_PATH: {exc})")
        return None
    if (share / MARKER).is_dir():
        return share
    looked.append(f"{share / MARKER} (the ament index's share folder of {PACKAGE}; no {MARKER}/ in it)")
    return None


def _from_distribution(looked: list[str]) -> Path | None:
    """share/airplay from the file list of the installed distribution that holds this module."""
    from importlib import metadata

    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        looked.append(f"the installed {PACKAGE} distribution's files (none installed)")
        return None
    here = Path(__file__).resolve()
    files = dist.files or []
    if not any(f.name == here.name and Path(dist.locate_file(f)).resolve() == here for f in files):
        looked.append(f"the installed {PACKAGE} distribution's files (not the one this module {here} comes from)")
        return None
    suffix = ("share", PACKAGE, MARKER)
    for f in files:
        parts = Path(f).parts
        if len(parts) > 3 and parts[-4:-1] == suffix:
            return Path(dist.locate_file(f)).resolve().parents[1]
    looked.append(f"the installed {PACKAGE} distribution's files (no share/{PACKAGE}/{MARKER}/ among them)")
    return None


def _from_module_prefix(looked: list[str]) -> Path | None:
    """PREFIX/share/airplay for this module at PREFIX/lib*/python*/(site|dist)-packages/airplay."""
    package_dir = Path(__file__).resolve().parent
    site, pyver, lib = package_dir.parent, package_dir.parents[1], package_dir.parents[2]
    if not (site.name in ("site-packages", "dist-packages") and pyver.name.startswith("python")
            and lib.name.startswith("lib")):
        looked.append(f"the install prefix of {package_dir} (not in a lib/pythonX.Y/site-packages folder)")
        return None
    share = lib.parent / "share" / PACKAGE
    if (share / MARKER).is_dir():
        return share
    looked.append(str(share / MARKER))
    return None


def _from_source_tree(looked: list[str]) -> Path | None:
    """The repository root when this module is imported from its source tree (src/airplay)."""
    root = Path(__file__).resolve().parents[2]
    if (root / "package.xml").is_file() and (root / MARKER).is_dir():
        return root
    looked.append(f"{root / MARKER} (the source tree)")
    return None


def share_dir() -> Path:
    """airplay's share folder (holding ``config/`` and, installed, ``launch/``): module docstring's order."""
    looked: list[str] = []
    for find in (_from_ament_index, _from_distribution, _from_module_prefix, _from_source_tree):
        found = find(looked)
        if found is not None:
            return found
    raise ShareNotFound(
        f"{PACKAGE}'s {MARKER} folder was not found. Looked in: " + "; ".join(looked) + ". "
        f"Install {PACKAGE} with its data (pip install . from the repository, or colcon build and "
        "source install/setup.bash), or run it from a source checkout (pip install -e .).")


def config_dir() -> Path:
    """``config/`` of :func:`share_dir` (YAML parameters, ``fastdds_localhost.xml``)."""
    return share_dir() / MARKER


def cache_dir() -> Path:
    """Where airplay caches what it derives from scenes and datasets (signed distance fields,
    level-of-detail hierarchies, decoded frames): ``$AIRPLAY_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/airplay``, else ``~/.cache/airplay``."""
    if os.environ.get("AIRPLAY_CACHE_DIR"):
        return Path(os.environ["AIRPLAY_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airplay"


def launch_dir() -> Path:
    """``launch/`` of :func:`share_dir` (``sim_eval.launch.py``, ``collect.launch.py``, ``fly.launch.py``)."""
    return share_dir() / "launch"
