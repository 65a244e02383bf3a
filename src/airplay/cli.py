"""The ``airplay`` command: one entry point, one sub-command per job (``airplay -h``)."""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

from airplay.scene.errors import SceneError
from airplay.yaml_config import ConfigError
from airplay.scene.scene import scene_dirs
from airplay import cli_flags
from airplay.policy_names import POLICY_NAMES

DEFAULT_CATEGORIES = ("indoor", "urban", "vegetation")
VLN_BACKENDS = ("transformers", "openai")

COMMAND_MODULES: tuple[str, ...] = ("airplay.commands.bridge", "airplay.policies.train_command",
                                    "airplay.policies.dagger_command", "airplay.policies.replay_command",
                                    "airplay.commands.dataset", "airplay.commands.collect",
                                    "airplay.eval.offline_command", "airplay.eval.offline_closed_command",
                                    "airplay.eval.protocol_command",
                                    "airplay.commands.vln",
                                    "airplay.nodes.bridge_control", "airplay.report.command",
                                    "airplay.view.command", "airplay.commands.aeroground")
"""Modules that add sub-commands: each has ``register(sub)`` taking the sub-parsers object
and setting ``func`` on its parsers. Their heavy imports stay inside the handlers."""


def _cmd_scene_make(args: argparse.Namespace) -> int:
    from airplay.scene.synthetic import make_scene

    t0 = time.perf_counter()
    kwargs = {"name": args.name, "split": args.split}
    if args.density is not None:
        kwargs["gaussians_per_m2"] = args.density
    spec = make_scene(args.category, args.seed, Path(args.dir), **kwargs)
    print(f"made {spec.category} scene '{spec.name}' (seed {args.seed}) in {spec.root} "
          f"in {time.perf_counter() - t0:.1f} s")
    if not args.no_check:
        from airplay.scene.check import check_scene

        print(check_scene(spec.root).format_table())
    return 0


def _cmd_scene_import(args: argparse.Namespace) -> int:
    from airplay.capture_import import ImportOptions, import_capture

    opts = ImportOptions(name=args.name, category=args.category, split=args.split, scale=args.scale,
                         known_distance=tuple(args.known_distance) if args.known_distance else None,
                         align_yaw=not args.no_yaw, voxel_m=args.voxel, max_faces=args.max_faces,
                         drop_from_splat=args.drop_from_splat, backend=args.backend, seed=args.seed)
    result = import_capture(args.capture, args.out, opts)
    f = result.figures
    print(f"imported {f['capture']} ({f['format']}, {f['gaussians']:,} Gaussians) into {result.out_dir} "
          f"in {f['total_s']:.1f} s: scale {f['scale']:.4g} ({f['scale_source']}), mesh {f['mesh_faces']:,} faces, "
          f"navigable {f['navigable_area_m2']:.1f} m^2; report: {result.out_dir / 'import' / 'report.html'}")
    return 0


def _cmd_scene_check(args: argparse.Namespace) -> int:
    from airplay.scene.check import check_scene, summary_json

    failures = 0
    for folder in args.dirs:
        try:
            summary = check_scene(folder)
        except SceneError as err:
            print(f"FAIL {err}", file=sys.stderr)
            failures += 1
            continue
        if args.json:
            print(json.dumps(summary_json(summary)))
        else:
            print(summary.format_table())
            print(f"OK   {folder}")
    return 1 if failures else 0


def _load_for_render(path: Path, convention: str):
    """(gaussians, mesh or None, scene spec or None) from a scene folder or a bare splat file."""
    from airplay.scene.scene import Scene, load_gaussians
    from airplay.scene.spec import CONVENTIONS

    if path.is_dir():
        scene = Scene.load(path)
        return scene.gaussians, scene.mesh, scene.spec
    gaussians = load_gaussians(path)
    if convention != "z_up":
        gaussians = gaussians.transformed(1.0, CONVENTIONS[convention], [0.0, 0.0, 0.0])
    return gaussians, None, None


def _cmd_render(args: argparse.Namespace) -> int:
    from airplay.scene.camera import CameraMount, PinholeCamera
    from airplay.scene.mesh_depth import MeshRaycaster
    from airplay.render.views import alignment_panel, colorize_depth, render_vehicle_view, save_png

    gaussians, mesh, spec = _load_for_render(Path(args.scene), args.convention)
    if spec is not None:
        camera, mount = spec.camera.intrinsics, spec.camera.mount
        background = tuple(args.background) if args.background else spec.background_rgb
    else:
        camera, mount = PinholeCamera.from_fov(224, 224, 90.0), CameraMount()
        background = tuple(args.background) if args.background else (0.0, 0.0, 0.0)
    if args.width or args.height or args.hfov:
        camera = PinholeCamera.from_fov(args.width or camera.width, args.height or camera.height,
                                        args.hfov or math.degrees(2 * math.atan(camera.width / (2 * camera.fx))))
    x, y, z, yaw_deg = args.pose
    pose = (x, y, z, math.radians(yaw_deg))
    t0 = time.perf_counter()
    view = render_vehicle_view(gaussians, camera, pose, mount, backend=args.backend, background=background)
    dt = time.perf_counter() - t0
    out = save_png(args.out, view.rgb)
    print(f"rendered {len(gaussians):,} Gaussians at {camera.width}x{camera.height} with the "
          f"{view.backend} backend in {dt * 1000:.0f} ms (first call includes compilation) -> {out}")
    if args.depth_out:
        if args.depth_source == "mesh":
            if mesh is None:
                raise SystemExit("--depth-source mesh needs a scene folder with a collision mesh")
            depth = MeshRaycaster(mesh).depth(view.viewmat, camera.K, camera.width, camera.height)
        else:
            depth = view.splat_depth_m
        save_png(args.depth_out, colorize_depth(depth))
        finite = depth[depth < float("inf")]
        rng = f"{finite.min():.2f}..{finite.max():.2f} m" if finite.size else "no hits"
        print(f"{args.depth_source} depth ({rng}) -> {args.depth_out}")
    if args.compare_mesh:
        if mesh is None:
            raise SystemExit("--compare-mesh needs a scene folder with a collision mesh")
        save_png(args.compare_mesh, alignment_panel(view, mesh))
        print(f"splat | mesh | blend -> {args.compare_mesh}")
    return 0


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
                     policy_budget_ms=args.policy_budget_ms, wind=args.wind, vehicle=args.vehicle,
                     command=args.command_line)
    if args.vehicle and args.runtime == "ros":
        print("error: --vehicle: the ROS graph's sim flies config/vehicle.yaml; evaluate a vehicle profile in "
              "process (--runtime inprocess)", file=sys.stderr)
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
                              execution_horizon=cfg.execution_horizon, setting=cfg.setting, episodes=cfg.episodes,
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

    scene = sub.add_parser("scene", help="make, import and check scene folders", description="Make, import and check scene folders.")
    scene_sub = scene.add_subparsers(dest="scene_command", required=True, metavar="SUBCOMMAND")
    make = scene_sub.add_parser("make", help="generate a synthetic scene",
                                description="Generate a synthetic scene (splat, collision mesh, scene.yaml) "
                                            "of a category; the same seed gives the same bytes.")
    make.add_argument("dir", help="output folder (created)")
    make.add_argument("--category", required=True, choices=DEFAULT_CATEGORIES)
    cli_flags.add_seed(make, help="seed of the generator (the same seed gives the same bytes)")
    make.add_argument("--density", type=float, default=None, help="Gaussians per m^2 of surface (default: generator's)")
    make.add_argument("--name", default=None, help="scene name (default: CATEGORY_SEED)")
    make.add_argument("--split", default="seen", choices=("seen", "unseen"))
    make.add_argument("--no-check", action="store_true", help="skip the summary after making")
    make.set_defaults(func=_cmd_scene_make)

    imp = scene_sub.add_parser("import", help="make a scene folder from a bare 3DGS capture",
                               description="Import a capture (.ply, compressed .ply, .splat, .spz): find up axis, "
                                           "floor and scale, derive collision mesh and navigable region "
                                           "(docs/scenes.md, 'Bring a real scene').")
    imp.add_argument("capture", help="the splat file")
    imp.add_argument("--out", required=True, help="output scene folder (must not exist or be empty)")
    imp.add_argument("--name", default=None, help="scene name (default: the file's stem)")
    imp.add_argument("--category", default="urban", choices=DEFAULT_CATEGORIES)
    imp.add_argument("--split", default="seen", choices=("seen", "unseen"))
    imp.add_argument("--scale", type=float, default=None, help="metres per capture unit")
    imp.add_argument("--known-distance", type=float, nargs=7, default=None,
                     metavar=("X1", "Y1", "Z1", "X2", "Y2", "Z2", "METRES"),
                     help="two points in the capture's coordinates and their distance in metres")
    imp.add_argument("--no-yaw", action="store_true", help="keep the captured yaw (no wall alignment)")
    imp.add_argument("--voxel", type=float, default=0.1, help="fusion voxel size, m (grown for large captures)")
    imp.add_argument("--max-faces", type=int, default=200_000, help="collision mesh face budget")
    imp.add_argument("--drop-from-splat", action="store_true",
                     help="also remove the cleaned-out Gaussians from the written splat")
    imp.add_argument("--backend", default="auto", choices=("auto", "cpu", "gsplat"), help="depth renderer")
    cli_flags.add_seed(imp, help="seed of plane fitting and camera placement")
    imp.set_defaults(func=_cmd_scene_import)

    check = scene_sub.add_parser("check", help="validate scene folders and print a summary",
                                 description="Validate scene folders; exit 1 if any is malformed.")
    check.add_argument("dirs", nargs="+", help="scene folders")
    check.add_argument("--json", action="store_true", help="one JSON summary per line")
    check.set_defaults(func=_cmd_scene_check)

    rend = sub.add_parser("render", help="render a camera view of a scene to PNG",
                          description="Render the view of the vehicle camera at a pose in the map frame.")
    rend.add_argument("scene", help="scene folder, or a bare .ply/.splat file")
    rend.add_argument("--pose", nargs=4, type=float, metavar=("X", "Y", "Z", "YAW_DEG"), required=True,
                      help="base_link position in map (ENU, m) and yaw in degrees CCW from east")
    rend.add_argument("--out", default="view.png", help="RGB PNG to write")
    rend.add_argument("--backend", default="auto", choices=("auto", "cpu", "gsplat"))
    rend.add_argument("--width", type=int, default=0)
    rend.add_argument("--height", type=int, default=0)
    rend.add_argument("--hfov", type=float, default=0.0, help="horizontal field of view, degrees")
    rend.add_argument("--background", nargs=3, type=float, default=None, metavar=("R", "G", "B"),
                      help="colour behind the splat in [0, 1] (default: the scene's background_rgb, else black)")
    rend.add_argument("--depth-out", default=None, help="also write a colourised depth PNG")
    rend.add_argument("--depth-source", default="splat", choices=("splat", "mesh"),
                      help="depth from the splats (expected depth) or by ray casting the collision mesh")
    rend.add_argument("--compare-mesh", default=None, metavar="PNG",
                      help="write splat | shaded mesh | blend, to check the splat-to-mesh alignment")
    rend.add_argument("--convention", default="z_up", choices=("z_up", "opencv", "opengl"),
                      help="axes of a bare splat file (ignored for scene folders)")
    rend.set_defaults(func=_cmd_render)

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
