"""Bring your own capture: a bare 3DGS file becomes a scene folder (``airplay scene import``).

Sits above ``render`` (it renders depth with airplay's renderer) and ``scene`` (files, spec);
see :mod:`airplay.capture_import.pipeline` for the stages.
"""

from airplay.capture_import.pipeline import ImportOptions, ImportResult, import_capture

__all__ = ["ImportOptions", "ImportResult", "import_capture"]
