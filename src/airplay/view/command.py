"""``airplay view BAG|DATASET|RESULTS [-o out.rrd] [--serve]`` (:mod:`airplay.view`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _cmd_view(args: argparse.Namespace) -> int:
    from airplay.view.sources import ViewError, read_source, scene_folders_by_name

    out = Path(args.out) if args.out else Path(f"{Path(args.input).resolve().name}.rrd")
    try:
        source = read_source(args.input, episode=args.episode)
        scenes = scene_folders_by_name([f for f in source.scene_folders if (f / "scene.yaml").is_file()])
        scenes.update(scene_folders_by_name(args.scenes or []))
    except ViewError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        import rerun  # noqa: F401
    except ImportError:
        print("error: airplay view needs the rerun-sdk package (pip install -e '.[view]'; `make setup` installs it)",
              file=sys.stderr)
        return 2
    from airplay.scene.errors import SceneError
    from airplay.view.rrd import write_recording

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        rec = write_recording(source, scenes, tmp, points=args.points)
        rec.disconnect()  # closes the file sink: the .rrd is complete
        os.replace(tmp, out)
    except (SceneError, OSError, ValueError) as err:
        print(f"error: {args.input}: {err}", file=sys.stderr)
        return 2
    finally:
        if tmp.exists():
            tmp.unlink()
    flights = source.flights
    frames = sum(len(f.times_ns) for f in flights)
    shown = sorted(n for n in {f.scene for f in flights} if n in scenes)
    print(f"{source.kind} {source.path}: {len(flights)} episode(s), {frames} sample(s), scene(s) drawn: "
          f"{', '.join(shown) or 'none (pass --scenes DIR)'}")
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB); open it with: rerun {out}")
    if args.serve:
        return serve(out, args.web_port, args.grpc_port)
    return 0


def rerun_executable() -> str:
    """The rerun viewer binary that the rerun-sdk package ships (``$RERUN_CLI_PATH`` first, as rerun's own
    launcher reads it). Started directly, not through ``python -m rerun``: that launcher runs the binary as
    its child, which a signal to the launcher leaves running (and listening) as an orphan."""
    if os.environ.get("RERUN_CLI_PATH"):
        return os.environ["RERUN_CLI_PATH"]
    try:
        import rerun_cli
    except ImportError:
        return sys.executable  # with the arguments below: "python -m rerun" fails naming what is missing
    return str(Path(rerun_cli.__file__).resolve().parent / "rerun")


def serve_command(rrd: Path | None, web_port: int, grpc_port: int) -> list[str]:
    """The rerun CLI serving ``rrd`` to its web viewer, both servers bound to 127.0.0.1 only
    (``rrd`` None: a gRPC proxy that SDKs stream to, :class:`airplay.view.live.RerunServer`)."""
    exe = rerun_executable()
    launcher = ["-m", "rerun"] if exe == sys.executable else []
    return [exe, *launcher, "--serve-web", "--bind", "127.0.0.1", "--web-viewer-port", str(web_port),
            "--port", str(grpc_port), *([str(rrd)] if rrd is not None else [])]


def serve(rrd: Path, web_port: int, grpc_port: int) -> int:
    """Replace this process with the rerun CLI serving ``rrd`` (Ctrl-C or SIGTERM stops it)."""
    print(f"serving {rrd} to rerun's web viewer at http://127.0.0.1:{web_port} (gRPC on 127.0.0.1:{grpc_port}); "
          "Ctrl-C stops", flush=True)
    sys.stderr.flush()
    command = serve_command(rrd, web_port, grpc_port)
    os.execv(command[0], command)
    return 0  # not reached


def register(sub) -> None:
    """Add ``airplay view`` to the sub-parsers ``sub``."""
    p = sub.add_parser(
        "view", help="a rerun recording (.rrd) of an episode bag, a LeRobot dataset or eval results",
        description="Write a rerun recording of an episode bag (a folder of MCAP files), a LeRobot dataset "
                    "(`airplay dataset export`) or an `airplay eval` results folder: camera images, depth, the "
                    "trajectory and goal in 3D over the scene's collision mesh and splat points (where the scene "
                    "folder is known: the results' summary.json or --scenes), the commands and the episode status "
                    "on the sim_time timeline. Open it with `rerun OUT.rrd`. Needs the rerun-sdk package.")
    p.add_argument("input", metavar="BAG|DATASET|RESULTS", help="a bag folder (or one of its .mcap files), a "
                   "LeRobot dataset folder, or an eval results folder (or its episodes.jsonl)")
    p.add_argument("-o", "--out", metavar="RRD", help="the recording to write (default: INPUT-NAME.rrd here)")
    p.add_argument("--scenes", nargs="+", metavar="DIR", help="scene folders, or folders of scenes, to draw "
                   "under the episodes (matched by the scene name the episodes record)")
    p.add_argument("--episode", type=int, default=0, help="which episode of a dataset (episode_index; default 0)")
    p.add_argument("--points", type=int, default=100_000, help="at most this many splat points per scene "
                   "(0: the mesh only; default 100000)")
    p.add_argument("--serve", action="store_true", help="then serve the recording to rerun's web viewer on "
                   "127.0.0.1 (the rerun CLI, bound to loopback only) until stopped")
    p.add_argument("--web-port", type=int, default=9090, help="the web viewer's HTTP port with --serve "
                   "(default 9090)")
    p.add_argument("--grpc-port", type=int, default=9876, help="the recording's gRPC port with --serve "
                   "(default 9876)")
    p.set_defaults(func=_cmd_view)
