"""Write a scene folder atomically: everything goes to a temporary folder next to the
target first, and only complete files are moved into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

SCENE_FILES = ("scene.yaml", "splat.ply", "collision.ply")


def check_target(out_dir: Path) -> None:
    """ValueError unless ``out_dir`` is missing, empty, or holds only files of a previous make."""
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"{out_dir}: exists and is not a directory; refusing to write a scene there")
    if out_dir.is_dir():
        foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in SCENE_FILES or not p.is_file())
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ValueError(
                f"{out_dir}: directory is not empty and holds files that are not from a previous "
                f"'scene make' ({shown}); refusing to overwrite it. Choose an empty or new directory."
            )


def write_atomically(out_dir: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_dir)`` to produce the scene files, then move them into ``out_dir``.

    ``scene.yaml`` is moved last, so a folder with a new scene.yaml always has the new
    splat and mesh beside it; an interrupted run leaves only the temporary folder.
    """
    out_dir = Path(out_dir)
    check_target(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; the scene folder should not be
        write(tmp)
        missing = [f for f in SCENE_FILES if not (tmp / f).is_file()]
        if missing:
            raise RuntimeError(f"scene writer produced no {missing}")
        if not out_dir.exists():
            try:
                os.rename(tmp, out_dir)
                return
            except OSError:
                out_dir.mkdir(parents=True, exist_ok=True)
        for name in sorted(SCENE_FILES, key=lambda f: f == "scene.yaml"):  # scene.yaml last
            os.replace(tmp / name, out_dir / name)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
