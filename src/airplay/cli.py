"""The ``airplay`` command: one entry point, one sub-command per job (``airplay -h``)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from airplay.yaml_config import ConfigError
from airplay.scene.scene import scene_dirs
from airplay import cli_flags
from airplay.commands import scene as scene_commands
from airplay.commands.scene import DEFAULT_CATEGORIES
from airplay.policy_names import POLICY_NAMES

VLN_BACKENDS = ("transformers", "openai")

COMMAND_MODULES: tuple[str, ...] = ("airplay.commands.bridge", "airplay.commands.train", "airplay.commands.dagger",
                                    "airplay.commands.replay", "airplay.commands.dataset", "airplay.commands.collect",
                                    "airplay.commands.eval_offline", "airplay.commands.offline_closed",
                                    "airplay.commands.protocol", "airplay.commands.vln",
                                    "airplay.nodes.bridge_control", "airplay.report.command",
                                    "airplay.view.command", "airplay.commands.aeroground",
                                    "airplay.commands.export")
"""Modules that add sub-commands: each has ``register(sub)`` taking the sub-parsers object
and setting ``func`` on its parsers. Their heavy imports stay inside the handlers."""


def _cmd_eval(args: argparse.Namespace) -> int:
    from airplay.eval.runner import EvalConfig
    from airplay.policies.registry import default_setting, reads_vln_options

    if args.make_default_scenes:
        from airplay.demo import ensure_scene

        for category in DEFAULT_CATEGORIES:
            ensure_scene(Path(args.make_default_scenes) / f"{category}_0", category, 0)
    # --backend transformers|openai selects AirVLN-R1's model backend (render backend: auto)
    vln_backend = args.vln_backend or (args.backend if args.backend in VLN_BACKENDS else None)
    render_backend = "auto" if args.backend in VLN_BACKENDS else args.backend
    setting = args.setting or default_setting(args.policy)
    cfg = EvalConfig(scenes=scene_dirs(args.scenes), policy=args.policy, setting=setting,
                     episodes=args.episodes, seed=args.seed, render_backend=render_backend,
                     render_images=not args.no_images, bootstrap=args.bootstrap,
                     checkpoint=args.checkpoint or "", execution_horizon=args.execution_horizon,
                     policy_backend=args.policy_backend,
                     policy_budget_ms=args.policy_budget_ms, wind=args.wind, vehicle=args.vehicle,
                     command=args.command_line)
    if args.vehicle and args.runtime == "ros":
        print("error: --vehicle: the ROS graph's sim flies config/vehicle.yaml; evaluate a vehicle profile in "
              "process (--runtime inprocess)", file=sys.stderr)
        return 2
    if args.policy_backend != "torch" and args.policy not in ("cnn_bc", "act", "dp"):
        print(f"error: --policy-backend {args.policy_backend}: for a learned cnn_bc, act or dp", file=sys.stderr)
        return 2
    if not cfg.policy_budget_ms >= 0:
        print(f"error: --policy-budget-ms must be >= 0 (0: none), got {args.policy_budget_ms}", file=sys.stderr)
        return 2
    scaled = [flag for flag, on in (("--workers", args.workers != 1), ("--ray", bool(args.ray)),
                                    ("--resume", args.resume)) if on]
    if scaled and (setting == "vln" or reads_vln_options(args.policy) or args.runtime == "ros"):
        what = "--runtime ros" if args.runtime == "ros" else "VLN evaluation"
        print(f"error: {', '.join(scaled)}: not available for {what} (the in-process runtime's PointGoal, "
              "ImageGoal and goal-free settings only)", file=sys.stderr)
        return 2
    viewing = args.view or bool(args.view_out)
    if viewing and (setting == "vln" or reads_vln_options(args.policy) or args.workers != 1 or args.ray):
        what = "VLN evaluation" if setting == "vln" or reads_vln_options(args.policy) else "--workers N / --ray"
        print(f"error: --view/--view-out: not available for {what} (episodes flown in this process, or the ROS "
              "graph)", file=sys.stderr)
        return 2
    from airplay.policies.registry import LEARNED_POLICIES
    from airplay.threads import check_threads, compute_threads

    if args.threads is not None:
        try:
            check_threads(args.threads)
        except ValueError:
            print(f"error: --threads must be >= 1, got {args.threads}", file=sys.stderr)
            return 2

    # airplay.threads: a learned policy (a small torch model, frames of its own size) or no images
    # fly on one compute thread unless --threads says otherwise; the renderer of the experts' images
    # keeps numba's default (all cores), a VLN model torch's; the ROS graph's nodes set their own
    vln = setting == "vln" or reads_vln_options(args.policy)
    learned = args.policy in LEARNED_POLICIES and not vln
    threads = args.threads or (1 if learned or args.no_images else None)
    if args.runtime == "ros":
        threads = None
    with compute_threads(threads, torch_too=learned or (vln and threads is not None)):
        if vln:
            from airplay.commands.vln import eval_vln

            return eval_vln(args, cfg, vln_backend)
        if viewing:
            return _eval_with_view(args, cfg)
        return _run_eval(args, cfg)


def _eval_with_view(args: argparse.Namespace, cfg) -> int:
    """``airplay eval --view / --view-out``: the run streamed to rerun (:mod:`airplay.view.live`): to a
    web viewer on 127.0.0.1 that this process serves (and keeps serving after the run, until Ctrl-C),
    and/or into an .rrd file."""
    from airplay.view.live import EnvObserver, LiveViewError, RerunServer, open_live_view

    view_out = str(Path(args.view_out).resolve()) if args.view_out else None
    try:
        if args.runtime == "ros":
            server = RerunServer(args.view_web_port, args.view_grpc_port) if args.view else None
            live = None
        else:
            live, server = open_live_view(out=view_out, serve=args.view, web_port=args.view_web_port,
                                          grpc_port=args.view_grpc_port, images=cfg.render_images)
    except LiveViewError as err:
        print(f"error: --view: {err}", file=sys.stderr)
        return 2
    if server is not None:
        print(f"live view: open {server.web_url}", flush=True)
    try:
        if live is None:
            code = _run_eval(args, cfg, viewer={"viewer": True, "viewer_out": view_out or "",
                                                "viewer_connect": server.url if server else ""})
        else:
            try:
                code = _run_eval(args, cfg, observer=EnvObserver(live))
            finally:
                live.close()
        if view_out:
            print(f"live view recorded in {view_out}; open it with: rerun {view_out}")
        if server is not None:
            try:  # the line first inside: a Ctrl-C the moment it is read still ends the run with its code
                print(f"the run has ended; the web viewer keeps serving {server.web_url} until Ctrl-C", flush=True)
                server.wait()
            except KeyboardInterrupt:
                pass
        return code
    finally:
        if server is not None:
            server.stop()


def _run_eval(args: argparse.Namespace, cfg, observer=None, viewer: dict | None = None) -> int:
    """The evaluation in the chosen runtime; ``observer`` watches in-process episodes, ``viewer``: the
    sim_eval graph's viewer settings (airplay.graph.SimEvalConfig)."""
    from airplay.eval.runner import evaluate_inprocess

    if args.runtime == "ros":
        # The same evaluation through the ROS graph (sim, renderer, policy, evaluator processes).
        from airplay.graph import SimEvalConfig, sim_eval_nodes
        from airplay.launcher import launch_graph

        graph = SimEvalConfig(scenes=",".join(str(s) for s in cfg.scenes), policy=cfg.policy,
                              checkpoint=str(Path(cfg.checkpoint).resolve()) if cfg.checkpoint else "",
                              execution_horizon=cfg.execution_horizon, policy_backend=cfg.policy_backend,
                              setting=cfg.setting, episodes=cfg.episodes,
                              seed=cfg.seed, out=args.out, policy_budget_ms=float(cfg.policy_budget_ms),
                              render_backend=cfg.render_backend, render_images=cfg.render_images,
                              bootstrap=cfg.bootstrap, wind=cfg.wind, **(viewer or {}))
        return launch_graph(sim_eval_nodes(graph), env={**os.environ, "AIRPLAY_COMMAND": cfg.command})
    try:
        evaluate_inprocess(cfg, Path(args.out), progress=not args.no_progress, workers=args.workers, ray=args.ray,
                           resume=args.resume, observer=observer, batch=args.batch)
    except ValueError as err:  # bad arguments, a folder --resume cannot continue (ResumeError)
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from airplay.demo import run_demo

    return run_demo(Path(args.scenes), Path(args.out), args.categories, args.seed, args.views, args.backend)


def _launch_arguments_help(graph: str, arguments: dict) -> str:
    """The launch arguments of ``graph`` for ``airplay launch GRAPH --help``: ``key:=default``
    and the description below it, as ``ros2 launch ... --show-args`` prints them."""
    import textwrap

    lines = [f"launch arguments of {graph} (key:=value), with their defaults:"]
    for key, argument in arguments.items():
        lines.append(f"  {key}:={argument.default}")
        lines.extend(textwrap.wrap(argument.description, width=100, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6))
    return "\n".join(lines)


def _cmd_launch(args: argparse.Namespace) -> int:
    import shlex

    from airplay.graph import GRAPHS, GraphArgumentError, parse_launch_arguments

    if "-h" in args.arguments or "--help" in args.arguments:
        print(args.launch_help())
        if args.graph in GRAPHS:
            print(_launch_arguments_help(args.graph, GRAPHS[args.graph][1]))
        return 0
    # Options may also follow GRAPH, among the key:=value tokens (argparse leaves them there).
    late = argparse.ArgumentParser(prog=f"airplay launch {args.graph}", add_help=False)
    late.add_argument("--print", action="store_true")
    late.add_argument("--grace", type=float, default=None)
    late.add_argument("tokens", nargs="*")
    extra = late.parse_intermixed_args(args.arguments)
    tokens = extra.tokens
    show = args.print or extra.print
    grace_s = args.grace if extra.grace is None else extra.grace
    if args.graph not in GRAPHS:
        print(f"error: unknown graph {args.graph!r}; graphs: {', '.join(sorted(GRAPHS))}", file=sys.stderr)
        return 2
    builder, accepted = GRAPHS[args.graph]
    try:
        nodes = builder(parse_launch_arguments(tokens, accepted))
    except GraphArgumentError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    from airplay.launcher import launch_graph, node_command

    if show:
        for spec in nodes:
            print(shlex.join(node_command(spec)))
        return 0
    return launch_graph(nodes, grace_s=grace_s)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="airplay", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    scene_commands.register(sub)

    ev = sub.add_parser("eval", help="closed-loop evaluation of a policy over scenes",
                        description="Fly a policy on sampled tasks in each scene and write episodes.jsonl, "
                                    "summary.json, a metrics table and trajectory plots (docs/evaluation.md).")
    cli_flags.add_scenes(ev)
    ev.add_argument("--runtime", default="inprocess", choices=("inprocess", "ros"))
    ev.add_argument("--policy", default="expert",
                    help=f"policy name: {', '.join(POLICY_NAMES)}, or module:factory")
    ev.add_argument("--checkpoint", default=None, metavar="DIR",
                    help="checkpoint folder of a learned policy (the --out of airplay train; for ppo_depth "
                         "OUT/checkpoint of examples/ppo_pointgoal.py)")
    ev.add_argument("--policy-backend", default="torch", choices=("torch", "onnxruntime"),
                    help="what runs a learned cnn_bc, act or dp: torch (default) or onnxruntime on one thread, from "
                         "the checkpoint's ONNX export (airplay export --onnx; --checkpoint: the export folder or a "
                         "checkpoint exported into CHECKPOINT/onnx); episodes then fly one at a time")
    ev.add_argument("--execution-horizon", type=int, default=0, metavar="H",
                    help="controls executed per predicted chunk (default: the policy's own, e.g. ACT 50, DP 16)")
    ev.add_argument("--policy-budget-ms", type=float, default=0.0, metavar="MS",
                    help="per-step compute budget of the policy in its own CPU time: a step over it ends the "
                         "episode as over_budget (default 0: none; wall time never ends an episode)")
    cli_flags.add_wind(ev)
    cli_flags.add_vehicle(ev)
    ev.add_argument("--setting", default=None, choices=("pointgoal", "imagegoal", "goalfree", "vln"),
                    help="task setting (default: vln for --policy airvln_r1, else pointgoal)")
    cli_flags.add_episodes(ev)
    cli_flags.add_seed(ev)
    ev.add_argument("--out", default="out/eval", help="results folder")
    ev.add_argument("--backend", default="auto", choices=("auto", "cpu", "gsplat", *VLN_BACKENDS),
                    help="render backend (auto, cpu, gsplat); transformers or openai instead select AirVLN-R1's "
                         "model backend (same as --vln-backend) and render with auto")
    from airplay.commands.vln import add_eval_arguments

    add_eval_arguments(ev)
    ev.add_argument("--no-images", action="store_true",
                    help="do not render RGB/depth (for policies that read only the state, e.g. the expert)")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the 95%% CIs")
    ev.add_argument("--threads", type=int, default=None, metavar="N",
                    help="CPU threads of numba's renderer and torch in this process (default: 1 for a learned "
                         "policy or --no-images, where more gain nothing and spinning pool threads slowed a DP "
                         "evaluation 7x on a busy machine; else all cores for the renderer; docs/benchmarks.md). "
                         "Workers of --workers use one each")
    ev.add_argument("--workers", type=int, default=1, metavar="N",
                    help="fly the episodes in N spawn processes (default 1: this process); the results files are "
                         "the same as from one process; with --ray: the CPUs of a local instance")
    ev.add_argument("--ray", metavar="ADDRESS", default=None,
                    help="fly the episodes as Ray tasks on the cluster at ADDRESS ('auto', 'ray://host:port'), or "
                         "'local' for a private instance bound to 127.0.0.1 (needs the ray package)")
    cli_flags.add_batch(ev)
    ev.add_argument("--resume", action="store_true",
                    help="continue an interrupted run in --out: keep the finished episodes of OUT/episodes.jsonl "
                         "(refused if OUT/eval_config.json differs from this run's settings) and fly the rest")
    ev.add_argument("--view", action="store_true",
                    help="stream the run live to rerun's web viewer, served on 127.0.0.1 (--view-web-port): camera, "
                         "depth, trajectory and goal over the scene, commands, episode status; it keeps serving "
                         "after the run until Ctrl-C (needs rerun-sdk; one process: not with --workers/--ray)")
    ev.add_argument("--view-out", metavar="RRD", default=None,
                    help="write the live view to this rerun recording (.rrd), with or without --view")
    ev.add_argument("--view-web-port", type=int, default=9090, help="--view: the web viewer's port (default 9090)")
    ev.add_argument("--view-grpc-port", type=int, default=9876,
                    help="--view: the rerun gRPC port the web viewer reads (default 9876)")
    cli_flags.add_no_progress(ev)
    ev.add_argument("--make-default-scenes", metavar="DIR", default=None,
                    help="first generate DIR/{indoor,urban,vegetation}_0 if missing")
    ev.set_defaults(func=_cmd_eval)

    demo = sub.add_parser("demo", help="make the default scenes if missing and render views of each",
                          description="Synthetic scenes of each category (made if missing), "
                                      "checked, and rendered from free viewpoints, with timings.")
    demo.add_argument("--scenes", default="scenes", help="folder holding the scenes (made if missing)")
    demo.add_argument("--out", default="out/demo", help="folder for the PNGs")
    demo.add_argument("--categories", nargs="+", default=list(DEFAULT_CATEGORIES), choices=DEFAULT_CATEGORIES)
    cli_flags.add_seed(demo, help="seed of the scene generator and the views")
    demo.add_argument("--views", type=int, default=3, help="views per scene")
    demo.add_argument("--backend", default="auto", choices=("auto", "cpu", "gsplat"))
    demo.set_defaults(func=_cmd_demo)

    launch = sub.add_parser("launch", help="run a ROS graph as separate processes (pip ROS 2 wheels)",
                            description="Start the nodes of a graph (airplay.graph) as separate processes, "
                                        "forward their output behind their names, and stop them all on Ctrl-C "
                                        "or when the required node (the evaluator) exits. The same graph as "
                                        "`ros2 launch airplay <graph>.launch.py key:=value ...`.")
    launch.add_argument("graph", help="graph name: sim_eval, collect or fly (airplay.graph.GRAPHS); "
                                      "`airplay launch GRAPH --help` lists its launch arguments")
    launch.add_argument("arguments", nargs=argparse.REMAINDER, metavar="key:=value",
                        help="launch arguments, as for ros2 launch (e.g. policy:=expert episodes:=3)")
    launch.add_argument("--print", action="store_true",
                        help="print the node command lines instead of running them (also accepted after GRAPH)")
    launch.add_argument("--grace", type=float, default=5.0,
                        help="seconds between SIGINT, SIGTERM and SIGKILL when stopping (default 5)")
    launch.set_defaults(func=_cmd_launch, launch_help=launch.format_help)

    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # What the results record as the command (airplay.eval.runner.provenance).
    args.command_line = shlex.join(["airplay", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except ConfigError as err:  # a scene or configuration file (SceneError is one)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
