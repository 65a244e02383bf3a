"""Benchmark AirVLN-R1's step latency with the tiny Qwen2.5-VL on the CPU.

One *step* of the navigator is one model call: build the AirNav prompt (instruction, pose,
past actions, 4 history views + the current view), run the backend, parse the answer. Rows,
measured in the same run on the same prompts (5 views of 56 x 56 after resizing, 32 new
tokens at most, greedy):

* prompt building + parsing alone (the reference: everything but the model);
* transformers backend: ``TransformersBackend.generate`` in this process;
* openai backend: ``OpenAIBackend.generate`` against :mod:`airplay.vln.server` on 127.0.0.1
  serving the same model (the same work plus HTTP, JSON and PNG base64 encoding).

The tiny model (2 layers, hidden 64) says nothing about a 7B model's latency; the figures
show the per-step overhead of airplay's side. ``--json`` prints machine-readable figures;
``--quick`` times 3 steps a row (seconds; what make test runs).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _prompts(n: int):
    from airplay.vln.actions import ActionSpace
    from airplay.vln.prompt import PromptBuilder

    rng = np.random.default_rng(0)
    builder = PromptBuilder(ActionSpace(), image_size=(56, 56))
    frames = [rng.integers(0, 255, (224, 224, 3), dtype=np.uint8) for _ in range(12)]
    out = []
    for i in range(n):
        out.append((builder, "Fly past the green sofa and stop at the brown bookshelf.",
                    (float(i), 0.5, 1.5, 0.1 * i), ["MOVE_FORWARD"] * 11, frames))
    return out


def _time(fn, items) -> list[float]:
    times = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="timed steps per row (after 2 warm-up steps; "
                    "default 20, quick 3)")
    ap.add_argument("--model", default=None, help="a model folder instead of the tiny random one")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="3 timed steps per row (seconds; what make test runs)")
    args = ap.parse_args(argv)
    args.steps = args.steps or (3 if args.quick else 20)

    from airplay.vln.backends import OpenAIBackend, TransformersBackend
    from airplay.vln.parsing import parse_actions
    from airplay.vln.server import ChatServer
    from airplay.vln.tiny import make_tiny_qwen2_5_vl

    tmp = tempfile.TemporaryDirectory()
    model = Path(args.model) if args.model else make_tiny_qwen2_5_vl(Path(tmp.name) / "tiny", seed=0)
    items = _prompts(args.steps + 2)

    def build(item):
        builder, instruction, pose, past, frames = item
        p = builder.build(instruction, pose, past, frames)
        p.chat_messages()
        return p

    local = TransformersBackend(model, max_new_tokens=32)
    rows = {"prompt + parse only": [], "transformers backend": [], "openai backend (local server)": []}
    tokens = {"transformers backend": [], "openai backend (local server)": []}
    with ChatServer(local, "127.0.0.1", 0) as server:
        remote = OpenAIBackend(server.url, max_new_tokens=32)
        # interleaved, step by step, so that machine load hits the rows alike; 2 warm-up steps
        for k, item in enumerate(items):
            for name, fn in (("prompt + parse only", lambda p: str(p.text)),
                             ("transformers backend", local.generate),
                             ("openai backend (local server)", remote.generate)):
                t0 = time.perf_counter()
                answer = fn(build(item))
                parse_actions(answer)
                dt = time.perf_counter() - t0
                if k >= 2:
                    rows[name].append(dt)
                    if name in tokens:
                        tokens[name].append(len(local.processor.tokenizer(answer)["input_ids"]))
    ref = statistics.median(rows["prompt + parse only"])
    figures = {name: {"median_ms": 1000 * statistics.median(t), "p95_ms": 1000 * float(np.percentile(t, 95)),
                      "mean_answer_tokens": float(np.mean(tokens[name])) if name in tokens else 0.0,
                      "steps_per_s": 1.0 / statistics.median(t), "ratio_to_prompt_only": statistics.median(t) / ref}
               for name, t in rows.items()}
    if args.json:
        print(json.dumps({"model": str(model), "steps": args.steps, "quick": args.quick, "rows": figures}, indent=1))
        return 0
    print(f"AirVLN-R1 step latency, {args.steps} steps, model {'tiny random Qwen2.5-VL' if not args.model else model}, "
          f"CPU, 5 views of 56x56, <= 32 new tokens, greedy")
    print(f"{'row':<32}{'median ms':>11}{'p95 ms':>9}{'steps/s':>9}{'x prompt-only':>15}{'answer tokens':>15}")
    for name, f in figures.items():
        print(f"{name:<32}{f['median_ms']:>11.1f}{f['p95_ms']:>9.1f}{f['steps_per_s']:>9.1f}"
              f"{f['ratio_to_prompt_only']:>15.1f}{f['mean_answer_tokens']:>15.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
