"""Log a :class:`~airplay.view.sources.Source` to rerun (``rerun-sdk``, imported inside the functions).

Entities (map ENU, metres; timeline ``sim_time``, seconds of sim time; ``step`` the sample index):

=================================  =====================================================================
``world``                          static view coordinates: right-handed, z up
``world/scene/<name>/mesh``        the collision mesh (static), where the scene folder is known
``world/scene/<name>/splat``       Gaussian means coloured by their colour, at most ``points`` of them
``world/trajectory``               the flown path, one static line strip (bag, dataset)
``world/goal``                     the goal position (static point)
``world/vehicle``                  position and heading at each sample (the camera's stabilised pose)
``world/vehicle/camera``           the camera mount (static) and its pinhole model
``world/vehicle/camera/rgb``       the camera image at each sample
``world/vehicle/camera/depth``     the depth image (m) at each sample, where recorded
``goal_image``                     the goal image (ImageGoal), static
``command/vx`` ... ``yaw_rate``    the commanded velocity (heading frame m/s) and yaw rate (rad/s)
``status``                         the episode's status messages (text log)
``metadata``                       the episode metadata (static text)
``world/<scene>/<task_id>``        results: each episode's path (static) and ``.../position`` over time
=================================  =====================================================================
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.scene.camera import CameraMount
from airplay.view.sources import Flight, Source

TIMELINE = "sim_time"
STATUS_COLORS = {EpisodeStatus.SUCCESS.value: (40, 180, 60), EpisodeStatus.COLLISION.value: (220, 40, 40),
                 EpisodeStatus.TIMEOUT.value: (230, 160, 20)}
"""The 3D view's own colours (RGB) of a flown path by its end: blue (:data:`DEFAULT_COLOR`) is a flight
going on or another end, so timeout is amber here, not the plots' tab:blue
(:data:`airplay.episode_status.STATUS_COLOURS`)."""
DEFAULT_COLOR = (80, 120, 230)
COMMAND_NAMES = ("vx", "vy", "vz", "yaw_rate")


def _color(status: str) -> tuple[int, int, int]:
    return STATUS_COLORS.get(status, DEFAULT_COLOR)


def log_scene(rec, name: str, folder, points: int) -> None:
    """The scene's collision mesh and up to ``points`` splat means (a seeded subsample), static.
    ``folder``: the scene folder, or a loaded :class:`~airplay.scene.scene.Scene`."""
    import rerun as rr

    from airplay.scene.scene import Scene

    scene = folder if isinstance(folder, Scene) else Scene.load(folder)
    mesh = scene.mesh
    rec.log(f"world/scene/{name}/mesh", rr.Mesh3D(vertex_positions=np.asarray(mesh.vertices, np.float32),
                                                  triangle_indices=np.asarray(mesh.faces, np.uint32),
                                                  vertex_normals=np.asarray(mesh.vertex_normals, np.float32),
                                                  albedo_factor=(0.6, 0.6, 0.6, 0.5)), static=True)
    if points > 0:
        g = scene.gaussians
        means = np.asarray(g.means)
        keep = np.arange(len(means))
        if len(keep) > points:
            keep = np.sort(np.random.default_rng(0).choice(len(keep), points, replace=False))
        colors = np.clip(np.asarray(g.colors_dc)[keep], 0.0, 1.0)
        rec.log(f"world/scene/{name}/splat", rr.Points3D(means[keep].astype(np.float32), colors=colors,
                                                         radii=rr.Radius.ui_points(1.5)), static=True)


def _yaw_quaternion(yaw: float):
    import rerun as rr

    return rr.Quaternion(xyzw=[0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0)])


def set_time(rec, t_ns: int, step: int | None = None) -> None:
    """Put the following rows at sim time ``t_ns`` (and sample ``step`` on the ``step`` timeline)."""
    rec.set_time(TIMELINE, duration=np.timedelta64(int(t_ns), "ns"))
    if step is not None:
        rec.set_time("step", sequence=int(step))


def log_camera(rec, mount=None, k=None, width: int | None = None, height: int | None = None) -> None:
    """The camera mount (``world/vehicle/camera``, static) and, with an image size, its pinhole model
    (``k`` None: a 90-degree placeholder). Without a mount: an optical frame at the vehicle's origin."""
    import rerun as rr

    t = (mount or CameraMount()).base_from_camera()
    camera = [rr.Transform3D(translation=t[:3, 3], mat3x3=t[:3, :3])]
    if width and height:
        k = k if k is not None else np.array([[width / 2.0, 0, width / 2.0], [0, width / 2.0, height / 2.0],
                                              [0, 0, 1]])
        camera.append(rr.Pinhole(image_from_camera=k, width=width, height=height,
                                 camera_xyz=rr.ViewCoordinates.RDF))
    rec.log("world/vehicle/camera", *camera, static=True)


def log_command_names(rec) -> None:
    """Names of the ``command/*`` series (static)."""
    import rerun as rr

    for name in COMMAND_NAMES:
        rec.log(f"command/{name}", rr.SeriesLines(names=name), static=True)


def log_trajectory(rec, position: np.ndarray, status: str = "", static: bool = True) -> None:
    """``world/trajectory``: the flown path (T, 3), coloured by ``status``."""
    import rerun as rr

    rec.log("world/trajectory", rr.LineStrips3D([np.asarray(position, np.float32)], colors=[_color(status)]),
            static=static)


def log_goal(rec, goal, static: bool = True) -> None:
    """``world/goal``: the goal position (map m)."""
    import rerun as rr

    rec.log("world/goal", rr.Points3D([np.asarray(goal, np.float32)], colors=[(250, 200, 0)], radii=0.25,
                                      labels=["goal"]), static=static)


def log_goal_image(rec, image, static: bool = True) -> None:
    import rerun as rr

    rec.log("goal_image", rr.Image(image), static=static)


def log_vehicle(rec, position, yaw: float) -> None:
    """``world/vehicle``: position (map m) and heading (rad) at the current time."""
    import rerun as rr

    rec.log("world/vehicle", rr.Transform3D(translation=np.asarray(position, np.float64),
                                            quaternion=_yaw_quaternion(float(yaw))))


def log_rgb(rec, rgb) -> None:
    import rerun as rr

    rec.log("world/vehicle/camera/rgb", rr.Image(rgb))


def log_depth(rec, depth) -> None:
    """The depth image (m; non-finite pixels as 0, rerun's "no depth")."""
    import rerun as rr

    depth = np.asarray(depth, np.float32)
    depth = depth.reshape(depth.shape[0], depth.shape[1])
    rec.log("world/vehicle/camera/depth", rr.DepthImage(np.where(np.isfinite(depth), depth, 0.0), meter=1.0))


def log_command(rec, command) -> None:
    """``command/vx`` ... ``command/yaw_rate`` (heading frame m/s, rad/s) at the current time."""
    import rerun as rr

    for j, name in enumerate(COMMAND_NAMES):
        rec.log(f"command/{name}", rr.Scalars(float(command[j])))


def log_status(rec, text: str, warn: bool = False) -> None:
    """One line of the ``status`` text log at the current time."""
    import rerun as rr

    rec.log("status", rr.TextLog(text, level=rr.TextLogLevel.WARN if warn else rr.TextLogLevel.INFO))


def log_flight(rec, flight: Flight, mount=None) -> None:
    """One episode of a bag or a dataset at the fixed entity paths of the module docstring."""
    import rerun as rr

    n = len(flight.times_ns)
    rec.log("metadata", rr.TextDocument(json.dumps(flight.metadata, indent=2, default=str)), static=True)
    if n:
        log_trajectory(rec, flight.position, flight.status)
    if flight.goal is not None:
        log_goal(rec, flight.goal)
    if flight.goal_image is not None:
        log_goal_image(rec, flight.goal_image)
    # the scene's camera mount; without the scene, an optical frame at the vehicle's origin, looking forward
    images = flight.rgb if flight.rgb is not None else flight.depth
    h, w = images.shape[1:3] if images is not None else (None, None)
    log_camera(rec, mount, flight.camera_k, w, h)
    log_command_names(rec)
    for i in range(n):
        set_time(rec, flight.times_ns[i], i)
        log_vehicle(rec, flight.position[i], float(flight.yaw[i]) if flight.yaw is not None else 0.0)
        if flight.rgb is not None:
            log_rgb(rec, flight.rgb[i])
        if flight.depth is not None:
            log_depth(rec, flight.depth[i])
        if flight.action is not None:
            log_command(rec, flight.action[i])
    rec.reset_time()  # statuses have a sim time, not a step
    for t, text in flight.statuses:
        set_time(rec, t)
        log_status(rec, text)


def log_episode_path(rec, scene: str | None, name: str, position: np.ndarray, status: str) -> str:
    """``world/<scene>/<task_id>``: an ended episode's path (static, coloured and labelled by its
    status); returns the entity path."""
    import rerun as rr

    base = f"world/{rr.escape_entity_path_part(scene or 'scene')}/{rr.escape_entity_path_part(name)}"
    rec.log(base, rr.LineStrips3D([np.asarray(position, np.float32)], colors=[_color(status)], labels=[status]),
            static=True)
    return base


def log_results(rec, flights: list[Flight]) -> None:
    """Every episode of a results folder: ``world/<scene>/<task_id>`` its path (static, coloured by
    status), ``.../position`` the vehicle over sim time, and one ``status`` line at its end."""
    import rerun as rr

    for f in flights:
        if len(f.position):
            base = log_episode_path(rec, f.scene, f.name, f.position, f.status)
            times = rr.TimeColumn(TIMELINE, duration=f.times_ns.astype("timedelta64[ns]"))
            rec.send_columns(f"{base}/position", indexes=[times],
                             columns=rr.Points3D.columns(positions=f.position.astype(np.float32)))
        for t, text in f.statuses:
            set_time(rec, t)
            log_status(rec, f"{f.scene} {f.name}: {f.status} {text}", warn=f.status != EpisodeStatus.SUCCESS)


def write_recording(source: Source, scenes: dict[str, Path], out: Path, *, points: int = 100_000):
    """Log ``source`` (with the scene folders ``scenes``, by name, where its episodes name one) into a
    recording saved to ``out`` (the caller renames it into place). Returns the recording stream (flushed)."""
    import rerun as rr

    from airplay.scene.spec import parse_scene_yaml

    rec = rr.RecordingStream("airplay", recording_id=f"airplay-view-{source.path.name}")
    rec.set_log_time_enabled(False)  # sim time only: the same input gives the same recording
    rec.save(out)
    rec.send_recording_name(f"{source.kind} {source.path.name}")
    rec.log("world", rr.ViewCoordinates.RIGHT_HAND_Z_UP, static=True)
    wanted = list(dict.fromkeys(f.scene for f in source.flights if f.scene))
    for name in wanted:
        if name in scenes:
            log_scene(rec, rr.escape_entity_path_part(name), scenes[name], points)
    if source.kind == "results":
        log_results(rec, source.flights)
    else:
        flight = source.flights[0]
        mount = parse_scene_yaml(scenes[flight.scene]).camera.mount if flight.scene in scenes else None
        log_flight(rec, flight, mount)
    rec.flush()
    return rec
