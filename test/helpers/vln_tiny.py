"""The tiny fine-tuned Qwen2.5-VL of the VLN tests, built once and cached on disk.

:func:`tiny_vl_model` makes a tiny random Qwen2.5-VL (:func:`airplay.vln.tiny.make_tiny_qwen2_5_vl`)
and fine-tunes it (:func:`airplay.vln.tiny.fit_tiny`) to answer :data:`ANSWER` ("move forward,
turn left, stop"), the real loading path included. The folder is cached under pytest's cache
(``.pytest_cache/d/airplay-tiny-vl/<key>``), keyed by the builder's source, the answer, the
training settings and the torch / transformers versions, so a test run builds it once (the
``tiny_vl_model`` fixture in conftest.py is session-scoped) and later runs not at all. Concurrent
runs build into a temporary folder and rename it into place.

A vln.yaml with ``max_actions_per_step: 2`` truncates the answer to ["MOVE_FORWARD",
"TURN_LEFT"] (the navigator asks again: several model calls per episode); the default keeps all
three (the episode ends on STOP, status ``stopped`` away from the goal).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

ANSWER = '["MOVE_FORWARD", "TURN_LEFT", "STOP"]'
STEPS = 50
LR = 4e-3
INSTRUCTION = "Fly past the green sofa and stop at the brown bookshelf."


def prompt(seed: int, n_frames: int):
    """A prompt with ``n_frames`` random 56x56 views (``n_frames - 1`` past actions)."""
    from airplay.vln.actions import ActionSpace
    from airplay.vln.prompt import PromptBuilder

    rng = np.random.default_rng(seed)
    frames = [rng.integers(0, 255, (56, 56, 3), dtype=np.uint8) for _ in range(n_frames)]
    pose = tuple(rng.uniform(-5, 5, 3)) + (float(rng.uniform(-3, 3)),)
    return PromptBuilder(ActionSpace()).build(INSTRUCTION, pose, ["MOVE_FORWARD"] * (n_frames - 1), frames)


def _key() -> str:
    import torch
    import transformers

    import airplay.vln.tiny as tiny

    h = hashlib.sha256()
    for part in (Path(tiny.__file__).read_text(), Path(__file__).read_text(), ANSWER, str(STEPS), str(LR),
                 torch.__version__, transformers.__version__):
        h.update(part.encode())
    return h.hexdigest()[:16]


def build(folder: Path) -> dict:
    """Make and fine-tune the model in ``folder``; returns the losses."""
    from airplay.vln.tiny import fit_tiny, make_tiny_qwen2_5_vl

    make_tiny_qwen2_5_vl(folder, seed=0)
    examples = []
    for seed, n in ((0, 1), (1, 2)):
        messages, images = prompt(seed, n).chat_messages()
        examples.append((messages, images, ANSWER))
    return fit_tiny(folder, examples, steps=STEPS, lr=LR)


def tiny_vl_model(cache_root: Path) -> Path:
    """The cached model folder (``<cache_root>/<key>/tiny-qwen2.5-vl``), built if missing."""
    final = Path(cache_root) / _key()
    model = final / "tiny-qwen2.5-vl"
    if (final / "losses.json").is_file():
        return model
    Path(cache_root).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=cache_root))
    try:
        losses = build(work / "tiny-qwen2.5-vl")
        assert losses["loss_last"] < 0.2 * losses["loss_first"], losses
        (work / "losses.json").write_text(json.dumps(losses))
        try:
            os.rename(work, final)
        except OSError:  # another run put it there first
            if not (final / "losses.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return model
