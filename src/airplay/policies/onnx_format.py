"""The ONNX export of a learned policy on disk: a folder of ``.onnx`` graphs and ``onnx.json``.

``airplay export --onnx CHECKPOINT --out OUT`` (:mod:`airplay.policies.onnx_export`) writes it;
the onnxruntime backend (:mod:`airplay.policies.onnx_runtime`) reads it. The graphs hold the
network only, on normalized inputs:

* CNN-BC and ACT: ``policy.onnx``, the chunk predictor: inputs ``image`` (B, T, 3, S, S) float32
  in [0, 1], ``state`` (B, T, D) (only where the policy reads state features), ``goal`` (B, T, 3)
  (PointGoal) or ``goal_image`` (B, 3, S, S) (ImageGoal); output ``actions`` (B, K, 4), the
  normalized chunk. ACT's latent is the prior's mean (0), as in torch at inference; its chunk
  queue or temporal ensembling stays in Python (:mod:`airplay.policies.adapters`).
* DP: ``condition.onnx`` (the same inputs -> ``condition`` (B, C), the observation encoding) and
  ``denoiser.onnx`` (``sample`` (B, K, 4), ``timestep`` (B,) int64, ``condition`` -> ``model_output``
  (B, K, 4), the noise-prediction U-Net). The DDIM loop runs outside, in numpy, from the
  ``sampling`` block of ``onnx.json``.

``onnx.json`` (the sidecar) says the policy ``type`` and ``config`` (the checkpoint's), the opset and
exporter, each graph's file, SHA-256, inputs and outputs, the ``normalization`` the inputs need
(per key its mode, ``center`` and ``scale``: x_model = (x - center) / scale; actions come back as
x * scale + center, in m/s and rad/s), the ``preprocessing`` of images and state, DP's ``sampling``,
and ``check``: the tolerance the export was checked to and the error measured (the largest
absolute difference of unnormalized commands, onnxruntime against torch, m/s or rad/s).

No torch or onnxruntime here: reading and checking the sidecar needs neither.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

SIDECAR = "onnx.json"
FORMAT = "airplay-onnx"
FORMAT_VERSION = 1
EXPORTABLE = ("cnn_bc", "act", "dp")
"""The learned policies that export to ONNX (ppo_depth is not: it reads depth, not this contract)."""
DEFAULT_SUBFOLDER = "onnx"
"""Where ``airplay export --onnx CHECKPOINT`` writes without ``--out`` (CHECKPOINT/onnx), and where
the onnxruntime backend looks when given a checkpoint folder."""
OPSET = 17
TOLERANCE = {"cnn_bc": 1e-4, "act": 1e-4, "dp": 1e-3}
"""Default largest absolute difference of unnormalized commands (m/s, rad/s) between onnxruntime and
torch that an export accepts. DP's is wider: its 10 DDIM steps carry the graphs' float32 rounding
(~1e-6 per call) through the sampling, and its epsilon inversion divides by sqrt(alpha-bar)."""
CHECK_OBSERVATIONS = 4
"""Observations the export is checked on (half of them noise images, half smooth ones)."""

INPUT_NAMES = {"observation.images.rgb": "image", "observation.state": "state", "observation.goal": "goal",
               "observation.images.goal": "goal_image"}
"""Batch key (:mod:`airplay.policies.observation`) -> graph input name."""


class OnnxExportError(ValueError):
    """An export that cannot be written or read; the message names the file."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def export_folder(folder: str | Path) -> Path:
    """The export folder of ``folder``: itself when it holds ``onnx.json``, else ``folder/onnx``
    (a checkpoint exported with the default ``--out``); OnnxExportError says what to run otherwise."""
    folder = Path(folder)
    for candidate in (folder, folder / DEFAULT_SUBFOLDER):
        if (candidate / SIDECAR).is_file():
            return candidate
    raise OnnxExportError(f"{folder / SIDECAR}: no such file (nor {folder / DEFAULT_SUBFOLDER / SIDECAR}); export "
                          f"the checkpoint first: airplay export --onnx CHECKPOINT --out {folder}")


def read_sidecar(folder: str | Path) -> tuple[Path, dict]:
    """(export folder, its ``onnx.json``) for an export folder or a checkpoint exported into
    ``CHECKPOINT/onnx``; every error names the file."""
    folder = export_folder(folder)
    path = folder / SIDECAR
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise OnnxExportError(f"{path}: not readable as JSON ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise OnnxExportError(f"{path}: not an airplay ONNX export (field 'format' must be {FORMAT!r})")
    if meta.get("version") != FORMAT_VERSION:
        raise OnnxExportError(f"{path}: export format version {meta.get('version')!r}, this airplay reads "
                              f"{FORMAT_VERSION}; export again")
    for key in ("type", "config", "graphs", "normalization", "check"):
        if key not in meta:
            raise OnnxExportError(f"{path}: field {key!r} is missing")
    if meta["type"] not in EXPORTABLE:
        raise OnnxExportError(f"{path}: field 'type' must be one of {', '.join(EXPORTABLE)}, got {meta['type']!r}")
    return folder, meta


def graph_file(folder: Path, meta: dict, name: str) -> Path:
    """The file of graph ``name``, checked against the sidecar's SHA-256 (a corrupted file or one of
    another export is refused, naming it)."""
    entry = meta["graphs"].get(name)
    if not isinstance(entry, dict) or "file" not in entry:
        raise OnnxExportError(f"{folder / SIDECAR}: no graph {name!r} (graphs: {', '.join(meta['graphs'])})")
    path = folder / entry["file"]
    if not path.is_file():
        raise OnnxExportError(f"{path}: no such file (named by {folder / SIDECAR})")
    if entry.get("sha256") and sha256(path) != entry["sha256"]:
        raise OnnxExportError(f"{path}: its SHA-256 is not the one {folder / SIDECAR} records: the file is "
                              f"corrupted or from another export; export again")
    return path
