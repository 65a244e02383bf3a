"""The error type for malformed scene input: a :class:`~airplay.yaml_config.ConfigError`."""

from __future__ import annotations

from airplay.yaml_config import ConfigError


class SceneError(ConfigError):
    """Bad scene input (scene.yaml, the splat, the collision mesh): names the file (and field,
    where there is one) and the problem.

    ``str(err)`` reads ``"<file>: <field>: <problem>"`` so a command-line user sees at once
    what to fix.
    """
