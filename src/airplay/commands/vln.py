"""``airplay vln ...`` sub-commands and the VLN options of ``airplay eval``.

* ``airplay vln episodes SCENE... --episodes N --seed S --out FILE`` - VLN episodes with
  generated instructions (``--print`` shows them); ``--import FILE`` converts an AirNav /
  CityNav-style file to airplay's format (errors name the file and the field).
* ``airplay vln sft-export SCENE... --out DIR`` - SFT data from expert episodes (ShareGPT /
  LLaMA-Factory JSON + PNG images).
* ``airplay vln serve --model DIR [--port 8000]`` - an OpenAI-compatible server on 127.0.0.1.
* ``airplay vln make-tiny DIR`` - a tiny random Qwen2.5-VL (tests, benchmarks, trying the pipeline).

``airplay eval --policy airvln_r1 --backend transformers --model DIR`` (or ``--backend openai
--endpoint URL``) evaluates VLN in-process (:mod:`airplay.vln.evaluate`); with ``--runtime ros``
the same episodes fly through the ROS graph (``airplay launch sim_eval setting:=vln
policy:=airvln_r1 ...``, the options as launch arguments, :mod:`airplay.vln.options`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from airplay.scene.scene import scene_dirs
from airplay import cli_flags


def add_eval_arguments(ev: argparse.ArgumentParser) -> None:
    """The VLN options of ``airplay eval``."""
    g = ev.add_argument_group("VLN (--policy airvln_r1; docs/vln.md)")
    g.add_argument("--vln-backend", default=None, choices=("transformers", "openai"),
                   help="where AirVLN-R1's answers come from (also accepted as --backend transformers|openai)")
    g.add_argument("--model", default=None, metavar="DIR",
                   help="transformers backend: local Qwen2.5-VL folder (e.g. the AirVLN-R1 weights)")
    g.add_argument("--endpoint", default=None, metavar="URL",
                   help="openai backend: API base of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    g.add_argument("--served-model", default=None, help="openai backend: model name (default: the server's first)")
    g.add_argument("--device", default="cpu", help="transformers backend: cpu or cuda[:N]")
    g.add_argument("--max-new-tokens", type=int, default=64, help="tokens per answer")
    cli_flags.add_image_size(g, "resize the views sent to the model (default: as rendered)")
    g.add_argument("--history-offsets", type=int, nargs="*", default=None, metavar="K",
                   help="history views, steps back (default -7 -4 -2 -1)")
    g.add_argument("--vln-episodes", default=None, metavar="FILE",
                   help="episode file (airplay's, or AirNav/CityNav-style) instead of sampling")
    g.add_argument("--vln-config", default=None, metavar="YAML", help="instead of config/vln.yaml")


def eval_vln(args: argparse.Namespace, cfg, vln_backend: str | None) -> int:
    """``airplay eval`` for the vln setting (in-process)."""
    from airplay.vln.actions import load_vln_config
    from airplay.vln.backends import BackendError
    from airplay.vln.evaluate import evaluate_vln
    from airplay.vln.prompt import DEFAULT_HISTORY_OFFSETS

    if cfg.policy != "airvln_r1" or cfg.setting != "vln":
        print("error: the vln setting is flown by --policy airvln_r1 (and airvln_r1 only in the vln setting)",
              file=sys.stderr)
        return 2
    if vln_backend is None:
        vln_backend = "openai" if args.endpoint else "transformers"
    if args.runtime == "ros":
        return _eval_vln_ros(args, cfg, vln_backend)
    vcfg = load_vln_config(args.vln_config)
    options = dict(backend=vln_backend, model=args.model, endpoint=args.endpoint, served_model=args.served_model,
                   max_new_tokens=args.max_new_tokens, image_size=tuple(args.image_size) if args.image_size else None,
                   history_offsets=tuple(args.history_offsets) if args.history_offsets else DEFAULT_HISTORY_OFFSETS,
                   vln_config=vcfg)

    def factory(world):
        from airplay.policies import make_policy

        return make_policy("airvln_r1", world, device=args.device, vln=options)

    try:
        evaluate_vln(cfg, Path(args.out), factory, episodes_file=args.vln_episodes, progress=not args.no_progress,
                     vln_config=vcfg)
    except BackendError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def ros_graph_config(args: argparse.Namespace, cfg, vln_backend: str):
    """``airplay eval``'s evaluation with its VLN options as the sim_eval graph's settings
    (:class:`airplay.graph.SimEvalConfig`; paths made absolute)."""
    from airplay.graph import SimEvalConfig

    def path(value):
        return str(Path(value).resolve()) if value else ""

    vln = {"vln_backend": vln_backend, "model": path(args.model), "endpoint": args.endpoint or "",
           "served_model": args.served_model or "", "device": args.device, "max_new_tokens": args.max_new_tokens,
           "vln_config": path(args.vln_config), "vln_episodes": path(args.vln_episodes)}
    if args.image_size:
        vln["image_size"] = f"{args.image_size[0]},{args.image_size[1]}"
    if args.history_offsets:
        vln["history_offsets"] = ",".join(str(k) for k in args.history_offsets)
    return SimEvalConfig(scenes=",".join(str(Path(s).resolve()) for s in cfg.scenes), policy=cfg.policy,
                         setting="vln", episodes=cfg.episodes, seed=cfg.seed, out=args.out,
                         render_backend=cfg.render_backend, bootstrap=cfg.bootstrap,
                         policy_budget_ms=float(args.policy_budget_ms), vln=vln)


def _eval_vln_ros(args: argparse.Namespace, cfg, vln_backend: str) -> int:
    """The VLN evaluation through the ROS graph (sim, renderer, policy, evaluator processes)."""
    from airplay.graph import GraphArgumentError, sim_eval_nodes
    from airplay.launcher import launch_graph

    try:
        nodes = sim_eval_nodes(ros_graph_config(args, cfg, vln_backend))
    except GraphArgumentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return launch_graph(nodes, env={**os.environ, "AIRPLAY_COMMAND": cfg.command} if cfg.command else None)


def _cmd_episodes(args: argparse.Namespace) -> int:
    import json

    from airplay.vln.episodes import EpisodeFileError, import_episodes, sample_vln_episodes, write_episodes

    if args.import_file:
        try:
            episodes = import_episodes(args.import_file, scene=args.scene_name, scale=args.scale,
                                       offset=tuple(args.offset))
        except EpisodeFileError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    else:
        from airplay.world import World

        if not args.scenes:
            print("error: give scene folders (or --import FILE)", file=sys.stderr)
            return 2
        episodes = []
        for d in scene_dirs(args.scenes):
            episodes += sample_vln_episodes(World.load(d), args.episodes, args.seed)
    if args.print:
        for e in episodes:
            print(json.dumps({"episode_id": e.episode_id, "scene": e.scene, "persona": e.persona,
                              "instruction": e.instruction}))
    if args.out:
        print(f"{len(episodes)} episodes -> {write_episodes(args.out, episodes)}")
    return 0


def _cmd_sft_export(args: argparse.Namespace) -> int:
    from airplay.vln.sft_export import export_sft

    summary = export_sft(scene_dirs(args.scenes), Path(args.out), episodes=args.episodes, seed=args.seed,
                         image_size=tuple(args.image_size) if args.image_size else None,
                         render_backend=args.render_backend)
    print(f"{summary['samples']} samples from {summary['episodes']} episodes, {summary['images']} images -> "
          f"{args.out} ({summary['file']}; dataset_info.json for LLaMA-Factory)")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from airplay.vln.server import serve

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"note: serving on {args.host}, reachable from other machines", file=sys.stderr)
    return serve(args.model, host=args.host, port=args.port, device=args.device,
                 max_new_tokens=args.max_new_tokens, model_name=args.name)


def _cmd_make_tiny(args: argparse.Namespace) -> int:
    from airplay.vln.tiny import make_tiny_qwen2_5_vl

    print(f"tiny random Qwen2.5-VL -> {make_tiny_qwen2_5_vl(args.dir, seed=args.seed)}")
    return 0


def register(sub) -> None:
    vln = sub.add_parser("vln", help="AirVLN-R1: VLN episodes, SFT export, model server",
                         description="Vision-language navigation (AirNav's AirVLN-R1): episodes with "
                                     "instructions, SFT data, an OpenAI-compatible server for a local model.")
    vsub = vln.add_subparsers(dest="vln_command", required=True, metavar="SUBCOMMAND")

    ep = vsub.add_parser("episodes", help="sample VLN episodes with instructions, or import a file",
                         description="VLN episodes with template instructions in ten personas' styles.")
    ep.add_argument("scenes", nargs="*", help="scene folders, or folders holding scene folders")
    cli_flags.add_episodes(ep)
    cli_flags.add_seed(ep)
    ep.add_argument("--out", default=None, help="episode file to write (JSON)")
    ep.add_argument("--print", action="store_true", help="print one JSON line per episode")
    ep.add_argument("--import", dest="import_file", default=None, metavar="FILE",
                    help="import an AirNav/CityNav/AerialVLN-style episode file instead of sampling")
    ep.add_argument("--scene-name", default=None, help="with --import: the scene these episodes belong to")
    ep.add_argument("--scale", type=float, default=1.0, help="with --import: p_map = scale * p + offset")
    ep.add_argument("--offset", type=float, nargs=3, default=(0.0, 0.0, 0.0), metavar=("X", "Y", "Z"))
    ep.set_defaults(func=_cmd_episodes)

    sft = vsub.add_parser("sft-export", help="SFT data (ShareGPT / LLaMA-Factory) from expert VLN episodes",
                          description="Fly the expert's discrete actions along sampled VLN episodes and write "
                                      "one chat sample per step: the AirNav prompt with its images and the "
                                      "expert's next actions as the answer.")
    sft.add_argument("scenes", nargs="+")
    sft.add_argument("--out", required=True, help="output folder (images/ and the JSON files)")
    cli_flags.add_episodes(sft)
    cli_flags.add_seed(sft)
    cli_flags.add_image_size(sft, "resize the views of the samples (default: as rendered)")
    sft.add_argument("--render-backend", default="auto", choices=("auto", "cpu", "gsplat"))
    sft.set_defaults(func=_cmd_sft_export)

    srv = vsub.add_parser("serve", help="OpenAI-compatible server for a local Qwen2.5-VL folder",
                          description="POST /v1/chat/completions and GET /v1/models, answered by the "
                                      "transformers backend (for users without vLLM).")
    srv.add_argument("--model", required=True, metavar="DIR")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--device", default="cpu")
    srv.add_argument("--max-new-tokens", type=int, default=64)
    srv.add_argument("--name", default=None, help="served model name (default: the folder name)")
    srv.set_defaults(func=_cmd_serve)

    tiny = vsub.add_parser("make-tiny", help="write a tiny random Qwen2.5-VL (for trying the pipeline)")
    tiny.add_argument("dir")
    cli_flags.add_seed(tiny, help="seed of the random weights")
    tiny.set_defaults(func=_cmd_make_tiny)
