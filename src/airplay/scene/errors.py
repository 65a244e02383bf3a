"""The one error type for malformed scene input."""

from __future__ import annotations

from pathlib import Path


class SceneError(ValueError):
    """Bad scene input: names the file (and field, where there is one) and the problem.

    ``str(err)`` reads ``"<file>: <field>: <problem>"`` so a command-line user sees at once
    what to fix.
    """

    def __init__(self, path: str | Path, problem: str, field: str | None = None):
        self.path = Path(path)
        self.field = field
        self.problem = problem
        where = f"{self.path}: {field}: " if field else f"{self.path}: "
        super().__init__(where + problem)
