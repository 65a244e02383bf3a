"""Reading YAML configuration files: one loader, and one error type that names the file and field.

Every YAML file airplay reads as configuration (``scene.yaml``, ``protocol.yaml``,
``vehicle.yaml``, ``vln.yaml``) goes through :func:`load_yaml`, and every problem with such a
file, from a missing file to one bad field, is a :class:`ConfigError` whose message reads
``"<file>: <field>: <problem>"`` (``"<file>: <problem>"`` for the file as a whole).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration file that is missing, unreadable or invalid.

    ``path`` is the file, ``field`` the dotted name of the bad field (None for the file as a
    whole), ``problem`` what is wrong; ``str(err)`` is ``"<file>: <field>: <problem>"``.
    """

    def __init__(self, path: str | Path, problem: str, field: str | None = None):
        self.path = Path(path)
        self.field = field
        self.problem = problem
        where = f"{self.path}: {field}: " if field else f"{self.path}: "
        super().__init__(where + problem)


def load_yaml(path: str | Path, *, what: str = "file", empty_ok: bool = False) -> dict[str, Any]:
    """The top-level mapping of the YAML file ``path``.

    ``what`` names the file in the "not found" message (e.g. "protocol file"). An empty file
    gives ``{}`` when ``empty_ok``. Raises :class:`ConfigError` naming the file when it is
    missing, not UTF-8 text, unreadable, not YAML (with the line and column), empty, or not a
    mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(path, f"{what} not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(path, "not a text file") from None
    except OSError as err:
        raise ConfigError(path, f"cannot read: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(path, f"invalid YAML{where}: {getattr(err, 'problem', None) or err}") from None
    if data is None:
        if empty_ok:
            return {}
        raise ConfigError(path, "file is empty")
    if not isinstance(data, dict):
        raise ConfigError(path, f"must be a YAML mapping, got a {type(data).__name__}")
    return data
