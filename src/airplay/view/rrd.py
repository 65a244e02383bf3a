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

from airplay.scene.camera import CameraMount
from airplay.view.sources import Flight, Source

TIMELINE = "sim_time"
STATUS_COLORS = {"success": (40, 180, 60), "collision": (220, 40, 40), "timeout": (230, 160, 20)}
DEFAULT_COLOR = (80, 120, 230)
COMMAND_NAMES = ("vx", "vy", "vz", "yaw_rate")


def _color(status: str) -> tuple[int, int, int]:
    return STATUS_COLORS.get(status, DEFAULT_COLOR)


def log_scene(rec, name: str, folder: Path, points: int) -> None:
    """The scene's collision mesh and up to ``points`` splat means (a seeded subsample), static."""
    import rerun as rr

    from airplay.scene.scene import Scene

    scene = Scene.load(folder)
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


def log_flight(rec, flight: Flight, mount=None) -> None:
    """One episode of a bag or a dataset at the fixed entity paths of the module docstring."""
    import rerun as rr

    n = len(flight.times_ns)
    color = _color(flight.status)
    rec.log("metadata", rr.TextDocument(json.dumps(flight.metadata, indent=2, default=str)), static=True)
    if n:
        rec.log("world/trajectory", rr.LineStrips3D([flight.position.astype(np.float32)], colors=[color]),
                static=True)
    if flight.goal is not None:
        rec.log("world/goal", rr.Points3D([flight.goal], colors=[(250, 200, 0)], radii=0.25, labels=["goal"]),
                static=True)
    if flight.goal_image is not None:
        rec.log("goal_image", rr.Image(flight.goal_image), static=True)
    # the scene's camera mount; without the scene, an optical frame at the vehicle's origin, looking forward
    t = (mount or CameraMount()).base_from_camera()
    camera = [rr.Transform3D(translation=t[:3, 3], mat3x3=t[:3, :3])]
    images = flight.rgb if flight.rgb is not None else flight.depth
    if images is not None:
        h, w = images.shape[1:3]
        k = flight.camera_k if flight.camera_k is not None else np.array(
            [[w / 2.0, 0, w / 2.0], [0, w / 2.0, h / 2.0], [0, 0, 1]])  # 90 degrees horizontal: a placeholder
        camera.append(rr.Pinhole(image_from_camera=k, width=w, height=h, camera_xyz=rr.ViewCoordinates.RDF))
    rec.log("world/vehicle/camera", *camera, static=True)
    for name in COMMAND_NAMES:
        rec.log(f"command/{name}", rr.SeriesLines(names=name), static=True)
    for i in range(n):
        rec.set_time(TIMELINE, duration=np.timedelta64(int(flight.times_ns[i]), "ns"))
        rec.set_time("step", sequence=i)
        yaw = float(flight.yaw[i]) if flight.yaw is not None else 0.0
        rec.log("world/vehicle", rr.Transform3D(translation=flight.position[i], quaternion=_yaw_quaternion(yaw)))
        if flight.rgb is not None:
            rec.log("world/vehicle/camera/rgb", rr.Image(flight.rgb[i]))
        if flight.depth is not None:
            depth = np.where(np.isfinite(flight.depth[i]), flight.depth[i], 0.0).astype(np.float32)
            rec.log("world/vehicle/camera/depth", rr.DepthImage(depth, meter=1.0))
        if flight.action is not None:
            for j, name in enumerate(COMMAND_NAMES):
                rec.log(f"command/{name}", rr.Scalars(float(flight.action[i][j])))
    rec.reset_time()  # statuses have a sim time, not a step
    for t, text in flight.statuses:
        rec.set_time(TIMELINE, duration=np.timedelta64(int(t), "ns"))
        rec.log("status", rr.TextLog(text, level=rr.TextLogLevel.INFO))


def log_results(rec, flights: list[Flight]) -> None:
    """Every episode of a results folder: ``world/<scene>/<task_id>`` its path (static, coloured by
    status), ``.../position`` the vehicle over sim time, and one ``status`` line at its end."""
    import rerun as rr

    for f in flights:
        base = f"world/{rr.escape_entity_path_part(f.scene or 'scene')}/{rr.escape_entity_path_part(f.name)}"
        color = _color(f.status)
        if len(f.position):
            rec.log(base, rr.LineStrips3D([f.position.astype(np.float32)], colors=[color], labels=[f.status]),
                    static=True)
            times = rr.TimeColumn(TIMELINE, duration=f.times_ns.astype("timedelta64[ns]"))
            rec.send_columns(f"{base}/position", indexes=[times],
                             columns=rr.Points3D.columns(positions=f.position.astype(np.float32)))
        for t, text in f.statuses:
            rec.set_time(TIMELINE, duration=np.timedelta64(int(t), "ns"))
            level = rr.TextLogLevel.INFO if f.status == "success" else rr.TextLogLevel.WARN
            rec.log("status", rr.TextLog(f"{f.scene} {f.name}: {f.status} {text}", level=level))


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
