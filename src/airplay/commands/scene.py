"""``airplay scene make | import | check`` and ``airplay render``: scene folders and camera views
of them. Heavy imports (the generator, the importer, the renderer) stay inside the handlers."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from airplay import cli_flags
from airplay.scene.errors import SceneError

DEFAULT_CATEGORIES = ("indoor", "urban", "vegetation")
"""The synthetic scene categories (``airplay scene make --category``, ``airplay demo``)."""


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
                         camera_points=args.camera_points,
                         drop_from_splat=args.drop_from_splat, backend=args.backend, seed=args.seed,
                         cameras=args.cameras, cameras_frame=args.cameras_frame,
                         cameras_transform=args.cameras_transform, camera_height_m=args.camera_height,
                         up_from=args.up_from, max_capture_views=args.capture_views,
                         core_from_cameras=args.core_from_cameras)
    result = import_capture(args.capture, args.out, opts)
    f = result.figures
    cams = ""
    if "cameras" in f:
        angle = f["cameras_up_vs_ground_deg"]
        cams = (f"; {f['cameras']['count']} cameras ({f['cameras']['format']}), {f['capture_views']} of them rendered, "
                f"up from the {f['up_axis_from']}"
                + ("" if angle is None else f" ({angle:.1f} deg between the cameras' up and the ground plane)"))
    print(f"imported {f['capture']} ({f['format']}, {f['gaussians']:,} Gaussians) into {result.out_dir} "
          f"in {f['total_s']:.1f} s: scale {f['scale']:.4g} ({f['scale_source']}), mesh {f['mesh_faces']:,} faces, "
          f"navigable {f['navigable_area_m2']:.1f} m^2{cams}; report: {result.out_dir / 'import' / 'report.html'}")
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


def register(sub) -> None:
    """Add ``scene`` (make, import, check) and ``render`` to the CLI's sub-parsers."""
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
    imp.add_argument("--cameras", default=None, metavar="PATH",
                     help="the capture's cameras: a COLMAP sparse model folder (cameras, images, points3D .bin/.txt) "
                          "or a nerfstudio / instant-ngp transforms.json; gives up axis, scale (camera height) "
                          "and depth views")
    imp.add_argument("--cameras-frame", default="capture", choices=("capture", "colmap"),
                     help="capture: the poses are in the splat's frame; colmap: undo a transforms.json's "
                          "applied_transform (splat trained on the COLMAP model)")
    imp.add_argument("--cameras-transform", default=None, metavar="JSON",
                     help="nerfstudio's dataparser_transforms.json, for a splat exported by splatfacto")
    from airplay.capture_import.pipeline import DEFAULT_CAMERA_HEIGHT_M

    imp.add_argument("--camera-height", type=float, default=DEFAULT_CAMERA_HEIGHT_M, metavar="M",
                     help="assumed median height of the cameras above the floor, m (the scale when neither "
                          f"--scale nor --known-distance is given; default {DEFAULT_CAMERA_HEIGHT_M:g}, hand-held)")
    imp.add_argument("--up-from", default="auto", choices=("auto", "cameras", "ground"),
                     help="with --cameras: auto takes the ground plane the cameras' mean up points to (their "
                          "mean up if none is within 15 deg); cameras / ground force one")
    imp.add_argument("--capture-views", type=int, default=48, metavar="N",
                     help="at most this many of the capture's cameras render a depth view each")
    imp.add_argument("--core-from-cameras", type=float, default=None, metavar="FACTOR",
                     help="far background: outside FACTOR x the cameras' 95th-percentile distance from their median")
    imp.add_argument("--no-yaw", action="store_true", help="keep the captured yaw (no wall alignment)")
    imp.add_argument("--voxel", type=float, default=0.1, help="fusion voxel size, m (grown for large captures)")
    imp.add_argument("--max-faces", type=int, default=200_000, help="collision mesh face budget")
    imp.add_argument("--camera-points", type=int, default=32, help="depth-camera positions (six views each)")
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
