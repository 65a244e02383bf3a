"""``airplay aeroground capture|build|check|eval|human``: the AeroGround-style benchmark (docs/aeroground.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from airplay import cli_flags


def _size(text: str) -> tuple[int, int]:
    return cli_flags.image_size(text)


def _cmd_capture(args: argparse.Namespace) -> int:
    from airplay.aeroground.capture import CaptureError, capture
    from airplay.scene.scene import scene_dirs

    if args.make_default_scenes:
        from airplay.demo import ensure_scene

        for category in ("indoor", "urban", "vegetation"):
            ensure_scene(Path(args.make_default_scenes) / f"{category}_0", category, 0)
    try:
        counts = capture(scene_dirs(args.scenes), Path(args.out), args.groups, seed=args.seed, backend=args.backend,
                         aerial_size=args.aerial_size, ground_size=args.ground_size, progress=not args.no_progress)
    except CaptureError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"captured {counts['groups']} groups ({counts['skipped']} already there, {counts['failed']} without a "
          f"walkable pose) in {args.out}")
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from airplay.aeroground.build import build

    s = build(Path(args.capture), Path(args.out), seed=args.seed, tasks=args.tasks, progress=not args.no_progress)
    print(f"{s['items']} items from {s['groups']} groups in {args.out}")
    for task, n in s["per_task"].items():
        print(f"  {task:<24}{n:>6}")
    print(f"rejected: {sum(s['rejected'].values())} (reasons in {args.out}/build.json)")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from airplay.aeroground.build import load_items
    from airplay.aeroground.checker import check_item

    items = load_items(Path(args.items))
    instances = {}
    if args.capture:
        for scene in {it["scene"] for it in items}:
            path = Path(args.capture) / scene / "instances.json"
            instances[scene] = {i["id"]: i for i in json.loads(path.read_text())}
    problems = [p for it in items for p in check_item(it, instances.get(it["scene"]))]
    for p in problems[:20]:
        print(p)
    print(f"{len(items)} items checked, {len(problems)} problems")
    return 1 if problems else 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from airplay.aeroground import evaluate as ev

    if args.backend == "random":
        answerer, model = ev.random_answerer(args.seed), "random choice"
    elif args.backend == "oracle":
        answerer, model = ev.oracle_answerer(), "oracle (reads the evidence)"
    else:
        from airplay.vln.backends import BackendError, make_backend

        try:
            backend = make_backend(args.backend, model=args.model, endpoint=args.endpoint, device=args.device,
                                   max_new_tokens=args.max_new_tokens, served_model=args.served_model)
        except BackendError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        answerer, model = ev.backend_answerer(backend, args.image_size), args.model or backend.model_name
    settings = {"backend": args.backend, "model": model}
    s = ev.evaluate(answerer, Path(args.items), Path(args.out), tasks=args.tasks, limit=args.limit,
                    bootstrap=args.bootstrap, seed=args.seed, progress=not args.no_progress, settings=settings)
    o = s["overall"]
    print(f"{'task':<24}{'n':>6}{'acc %':>8}{'random %':>10}{'CAA':>8}")
    for task, e in s["per_task"].items():
        print(f"{task:<24}{e['n']:>6}{100 * e['accuracy']['mean']:>8.1f}{100 * e['chance']:>10.1f}{e['caa']:>8.3f}")
    print(f"{'average':<24}{o['n']:>6}{100 * o['accuracy']['mean']:>8.1f}{100 * o['chance']:>10.1f}{o['caa']:>8.3f}")
    print(f"results in {args.out}/ (summary.json, results.html, responses.jsonl)")
    return 0


def _cmd_human(args: argparse.Namespace) -> int:
    import numpy as np

    from airplay.aeroground.build import load_items
    from airplay.aeroground.pages import human_page

    items = load_items(Path(args.items))
    if args.sample and args.sample < len(items):
        idx = sorted(np.random.default_rng(args.seed).choice(len(items), size=args.sample, replace=False))
        items = [items[int(i)] for i in idx]
    out = Path(args.items) / args.name
    out.write_text(human_page(items))
    print(f"human-evaluation page with {len(items)} items: {out}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("aeroground", help="AeroGround-style aerial/ground dual-view QA benchmark",
                       description="Capture paired aerial/ground views in scenes, build the QA items, evaluate "
                                   "VLMs on them, and make a human-evaluation page (docs/aeroground.md).")
    s = p.add_subparsers(dest="aeroground_command", required=True)

    cap = s.add_parser("capture", help="render observation groups with ground truth")
    cli_flags.add_scenes(cap)
    cap.add_argument("--out", required=True, help="capture folder (resumed when it exists)")
    cap.add_argument("--groups", type=int, default=120, help="observation groups per scene (default 120)")
    cli_flags.add_seed(cap, help="seed of the poses")
    cap.add_argument("--backend", default="cpu", choices=("auto", "cpu", "gsplat"),
                     help="renderer (default cpu: the same bytes on every machine)")
    cap.add_argument("--aerial-size", type=_size, default=(192, 192), metavar="WxH")
    cap.add_argument("--ground-size", type=_size, default=(192, 144), metavar="WxH")
    cap.add_argument("--make-default-scenes", metavar="DIR", default=None,
                     help="first generate DIR/{indoor,urban,vegetation}_0 if missing")
    cli_flags.add_no_progress(cap)
    cap.set_defaults(func=_cmd_capture)

    b = s.add_parser("build", help="make the QA items from a capture")
    b.add_argument("--capture", required=True, help="capture folder")
    b.add_argument("--out", required=True, help="items folder")
    b.add_argument("--tasks", nargs="+", default=None, help="only these tasks")
    cli_flags.add_seed(b, help="seed of the item choices and option order")
    cli_flags.add_no_progress(b)
    b.set_defaults(func=_cmd_build)

    c = s.add_parser("check", help="recompute every item's answer from its evidence (and the capture)")
    c.add_argument("--items", required=True)
    c.add_argument("--capture", default=None, help="capture folder, to check the evidence against the scenes")
    c.set_defaults(func=_cmd_check)

    e = s.add_parser("eval", help="ask a VLM every item and score it")
    e.add_argument("--backend", required=True, choices=("transformers", "openai", "random", "oracle"),
                   help="a VLM (transformers, openai), or a reference answerer: random (seeded uniform choice) or "
                        "oracle (reads the evidence)")
    e.add_argument("--model", default=None, help="local model folder (transformers)")
    e.add_argument("--endpoint", default=None, help="OpenAI-compatible API base (openai), e.g. http://127.0.0.1:8000/v1")
    e.add_argument("--served-model", default=None, help="model name on the server (default: its first)")
    e.add_argument("--device", default="cpu")
    e.add_argument("--max-new-tokens", type=int, default=32)
    e.add_argument("--image-size", type=_size, default=None, metavar="WxH", help="resize images for the model")
    e.add_argument("--items", required=True, help="items folder")
    e.add_argument("--out", required=True, help="results folder (resumed when it exists)")
    e.add_argument("--tasks", nargs="+", default=None)
    e.add_argument("--limit", type=int, default=None, help="at most N items per task")
    e.add_argument("--bootstrap", type=int, default=1000)
    cli_flags.add_seed(e, help="seed of the bootstrap and the simulated random baseline")
    cli_flags.add_no_progress(e)
    e.set_defaults(func=_cmd_eval)

    h = s.add_parser("human", help="write the static human-evaluation page into the items folder")
    h.add_argument("--items", required=True)
    h.add_argument("--sample", type=int, default=100, help="items to show (default 100; 0: all)")
    h.add_argument("--name", default="human.html")
    cli_flags.add_seed(h, help="seed of the sample")
    h.set_defaults(func=_cmd_human)
