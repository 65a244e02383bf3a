"""A live rerun view of a running evaluation: ``airplay eval --view`` and the ROS graph's ``viewer`` node.

:class:`LiveView` logs what the evaluation shows while it runs, with the functions of
:mod:`airplay.view.rrd` that ``airplay view`` uses for bags, datasets and results, so that the
live view and a recording of the same run have the same entities:

=================================  =====================================================================
``world/scene/<name>/mesh|splat``  each scene's collision mesh and splat points (static, once per scene)
``world/vehicle``                  position and heading at each observation
``world/vehicle/camera``           the camera mount and pinhole model (static)
``world/vehicle/camera/rgb|depth`` the camera images (when the run renders them)
``world/goal``                     the episode's goal (at its start)
``goal_image``                     the goal image (ImageGoal, when rendered)
``world/trajectory``               the episode's path so far (every :data:`TRAJECTORY_EVERY` steps, and
                                   at its end coloured by status)
``world/<scene>/<task_id>``        each ended episode's path (static, coloured and labelled by status)
``command/vx`` ... ``yaw_rate``    the commands (heading frame m/s, rad/s)
``status``                         each episode's start and end (JSON, as on ``episode/status``); on a
                                   vehicle also its phases and the supervisor's interventions
=================================  =====================================================================

Timelines: ``sim_time`` the observations' stamps (the ROS graph's: an episode's first observation
two control periods after the previous episode's last, :func:`airplay.world.lockstep.next_start_ns`;
:class:`EnvObserver` puts in-process episodes on the same times), ``step`` the observation's index in
its episode, ``episode`` the run's episode number.

Sinks: an ``.rrd`` file (``out``), and/or a rerun gRPC proxy at ``connect`` (a URL such as
:meth:`RerunServer.url`): :class:`RerunServer` starts one with rerun's web viewer, bound to 127.0.0.1.
No rclpy here: the ``viewer`` node (:mod:`airplay.nodes.viewer_node`) feeds a LiveView from the topics.
"""

from __future__ import annotations

import bisect
import ctypes
import json
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import numpy as np

from airplay.episode_status import EpisodeStatus
from airplay.view import rrd

TRAJECTORY_EVERY = 10
"""Observations between two updates of ``world/trajectory`` during an episode."""
CONTROL_DT_NS = 20_000_000


class LiveViewError(RuntimeError):
    """The live view cannot start (rerun missing, a port taken); the message says what to do."""


def _die_with_parent() -> None:  # in the child, before exec: SIGTERM when the parent dies
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class RerunServer:
    """The rerun CLI (a child process) serving its web viewer on ``http://127.0.0.1:web_port`` and
    a gRPC proxy on ``127.0.0.1:grpc_port`` that :class:`LiveView` streams to; bound to loopback only.
    It ends with :meth:`stop`, or with this process."""

    def __init__(self, web_port: int = 9090, grpc_port: int = 9876, startup_s: float = 30.0) -> None:
        from airplay.view.command import serve_command

        self.web_port, self.grpc_port = int(web_port), int(grpc_port)
        for port in (self.web_port, self.grpc_port):
            if _port_taken(port):
                raise LiveViewError(f"port {port} on 127.0.0.1 is in use (another rerun viewer?): choose other "
                                    "ports (the web and gRPC port options)")
        self.proc = subprocess.Popen(serve_command(None, self.web_port, self.grpc_port), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + startup_s
        while not (_port_taken(self.grpc_port) and _port_taken(self.web_port)):
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace").strip()[-2000:]
                raise LiveViewError(f"the rerun viewer server exited ({self.proc.returncode}): {err}")
            if time.monotonic() > deadline:
                self.stop()
                raise LiveViewError(f"the rerun viewer server did not listen on 127.0.0.1:{self.grpc_port} "
                                    f"within {startup_s:.0f} s")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        """The gRPC proxy's URL for :class:`LiveView` (``connect``)."""
        return f"rerun+http://127.0.0.1:{self.grpc_port}/proxy"

    @property
    def web_url(self) -> str:
        """The web viewer's page, connected to the proxy."""
        return f"http://127.0.0.1:{self.web_port}/?url=rerun%2Bhttp%3A%2F%2F127.0.0.1%3A{self.grpc_port}%2Fproxy"

    def wait(self) -> int:
        """Until the server exits (Ctrl-C stops it: it shares this terminal's process group)."""
        return self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stderr.close()


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", int(port))) == 0


class LiveView:
    """A rerun recording stream that a running evaluation logs to (module docstring).

    ``out``: an .rrd file to write (complete once :meth:`close` returned); ``connect``: a rerun
    gRPC URL to stream to; at least one of them. ``images``: log camera images (false where the
    run renders none). ``points``: at most this many splat points per scene. ``dt_ns``: the
    control period (the ``step`` timeline)."""

    def __init__(self, *, out: str | Path | None = None, connect: str | None = None, images: bool = True,
                 points: int = 100_000, name: str = "airplay eval", dt_ns: int = CONTROL_DT_NS) -> None:
        try:
            import rerun as rr
        except ImportError:
            raise LiveViewError("the live view needs the rerun-sdk package (pip install -e '.[view]'; "
                                "`make setup` installs it)") from None
        if not out and not connect:
            raise LiveViewError("a live view needs an .rrd path or a rerun server to stream to")
        self.out = Path(out) if out else None
        sinks = []
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            sinks.append(rr.FileSink(str(self.out)))
        if connect:
            sinks.append(rr.GrpcSink(connect))
        self.rec = rec = rr.RecordingStream("airplay", recording_id=f"airplay-live-{uuid.uuid4().hex[:12]}")
        rec.set_log_time_enabled(False)  # sim time and steps only, as airplay view's recordings
        rec.set_sinks(*sinks)
        rec.send_recording_name(name)
        rec.log("world", rr.ViewCoordinates.RIGHT_HAND_Z_UP, static=True)
        rrd.log_command_names(rec)
        self.images, self.points, self.dt_ns = images, int(points), int(dt_ns)
        self.scenes: set[str] = set()
        self.cameras: set[str] = set()
        self.episodes: list[tuple[int, int]] = []  # (first stamp, episode number), in order of start
        self.episode: int | None = None
        self.scene: str | None = None
        self.task_id = ""
        self.start_ns = 0
        self.positions: list[np.ndarray] = []
        self.closed = False

    # -- scenes and episodes ---------------------------------------------------------------
    def show_scene(self, name: str, scene) -> None:
        """Log scene ``name`` (a folder or a loaded Scene) once."""
        import rerun as rr

        if name not in self.scenes:
            self.scenes.add(name)
            rrd.log_scene(self.rec, rr.escape_entity_path_part(name), scene, self.points)

    def _time(self, t_ns: int) -> bool:
        """Put what follows at ``t_ns`` on the timelines, with the step and episode of the episode that
        ``t_ns`` falls in (the latest started at or before it); True when that is the live episode."""
        t_ns = int(t_ns)
        k = bisect.bisect_right(self.episodes, (t_ns, float("inf"))) - 1
        start, episode = self.episodes[k] if k >= 0 else (0, None)
        # before the first episode (a vehicle's take-off, on the wall clock): no step
        rrd.set_time(self.rec, t_ns, max(0, round((t_ns - start) / self.dt_ns)) if k >= 0 else None)
        if episode is not None:
            self.rec.set_time("episode", sequence=episode)
        return k >= 0 and k == len(self.episodes) - 1

    def start_episode(self, t_ns: int, episode: int, scene: str, task_id: str, goal=None, goal_image=None,
                      camera=None, mount=None, status: dict | None = None) -> None:
        """Episode ``episode`` starts at ``t_ns`` in ``scene`` (shown before, :meth:`show_scene`):
        its goal (map m, or None), goal image, camera (``.K``, ``.width``, ``.height``; logged once
        per scene) and mount, and its "started" status (JSON)."""
        self.episode, self.scene, self.task_id, self.start_ns = int(episode), scene, str(task_id), int(t_ns)
        self.positions = []
        if self.episodes and int(t_ns) <= self.episodes[-1][0]:
            raise ValueError(f"episode {episode} starts at {t_ns} ns, not after the one before")
        self.episodes.append((int(t_ns), int(episode)))
        if scene not in self.cameras:
            self.cameras.add(scene)
            k = None if camera is None else np.asarray(camera.K, np.float64)
            rrd.log_camera(self.rec, mount, k, getattr(camera, "width", None) if self.images else None,
                           getattr(camera, "height", None) if self.images else None)
        self._time(t_ns)
        if goal is not None:
            rrd.log_goal(self.rec, goal, static=False)
        if goal_image is not None and self.images:
            rrd.log_goal_image(self.rec, goal_image, static=False)
        rrd.log_status(self.rec, json.dumps(status or {"episode": self.episode, "status": "started",
                                                       "scene": scene, "task_id": self.task_id,
                                                       "stamp_ns": int(t_ns)}))

    def observe(self, t_ns: int, position, yaw: float, rgb=None, depth=None) -> None:
        """The vehicle's pose (map m, rad) at observation ``t_ns``, with its images where given."""
        live = self._time(t_ns)
        rrd.log_vehicle(self.rec, position, yaw)
        self.camera_images(t_ns, rgb, depth, timed=True)
        if live:  # the running path (a late observation of an ended episode is drawn, not added)
            self.positions.append(np.asarray(position, np.float64).reshape(3).copy())
            if len(self.positions) % TRAJECTORY_EVERY == 0:
                rrd.log_trajectory(self.rec, np.array(self.positions), static=False)

    def camera_images(self, t_ns: int, rgb=None, depth=None, timed: bool = False) -> None:
        """The camera's RGB (H, W, 3) uint8 and depth (H, W[, 1]) m at ``t_ns`` (not with ``images`` false)."""
        if not self.images or (rgb is None and depth is None):
            return
        if not timed:
            self._time(t_ns)
        if rgb is not None:
            rrd.log_rgb(self.rec, rgb)
        if depth is not None:
            rrd.log_depth(self.rec, depth)

    def goal_image(self, t_ns: int, image) -> None:
        if self.images:
            self._time(t_ns)
            rrd.log_goal_image(self.rec, image, static=False)

    def command(self, t_ns: int, command) -> None:
        """The command (vx, vy, vz m/s heading frame, yaw rate rad/s) for observation ``t_ns``."""
        self._time(t_ns)
        rrd.log_command(self.rec, np.asarray(command, np.float64).reshape(4))

    def end_episode(self, t_ns: int, status: str, trajectory=None, report: dict | None = None) -> None:
        """The episode ended at ``t_ns`` with ``status``: its path (``trajectory`` (T, 3) map m, or
        the observed positions), and its terminal status (JSON ``report``, without the trajectory)."""
        self._time(t_ns)
        path = np.asarray(trajectory, np.float64) if trajectory is not None and len(trajectory) else (
            np.array(self.positions) if self.positions else np.zeros((0, 3)))
        if len(path):
            rrd.log_trajectory(self.rec, path, status, static=False)
            rrd.log_episode_path(self.rec, self.scene, self.task_id, path, status)
        report = {k: v for k, v in (report or {"episode": self.episode, "status": status}).items()
                  if k != "trajectory"}
        rrd.log_status(self.rec, json.dumps(report, default=str), warn=status != EpisodeStatus.SUCCESS)

    def note(self, t_ns: int, report: dict, warn: bool = False) -> None:
        """A status line (JSON ``report``) at ``t_ns`` beside the episodes' own: a vehicle's phase, an
        intervention of the safety supervisor (``warn``: shown as a warning)."""
        self._time(t_ns)
        rrd.log_status(self.rec, json.dumps(report, default=str), warn=warn)

    def close(self) -> None:
        """Flush and close the sinks (the .rrd is complete)."""
        if not self.closed:
            self.closed = True
            self.rec.flush(timeout_sec=10.0)
            self.rec.disconnect()


class EnvObserver:
    """Shows the episodes of an in-process evaluation (:func:`airplay.eval.runner.run_episode`'s
    observer) in a :class:`LiveView`, on the ROS graph's sim times (module docstring). Where the
    policy's observation has no camera image and the run renders, the images are rendered here as
    the ROS renderer does (``--view`` only)."""

    def __init__(self, live: LiveView) -> None:
        self.live = live
        self.episode = 0
        self.last_ns: int | None = None
        self.start_ns = 0
        self.dt_ns = live.dt_ns

    def _images(self, env, obs):
        if not (self.live.images and env.render_images):
            return None, None
        rgb, depth = obs.get("rgb"), obs.get("depth")
        if rgb is None or depth is None:
            from airplay.world.env import MAX_DEPTH_M

            rgb, depth = env.world.camera_images(env.position, env.yaw, env.render_backend, depth=True,
                                                 max_depth_m=MAX_DEPTH_M)
        return rgb, depth

    def episode_started(self, env, task, obs) -> None:
        from airplay.world.lockstep import next_start_ns

        self.dt_ns = int(round(env.world.vehicle.control_dt_s * 1e9))
        self.live.dt_ns = self.dt_ns
        self.start_ns = next_start_ns(self.last_ns, self.dt_ns)
        spec = env.world.scene.spec
        self.live.show_scene(spec.name, env.world.scene)
        status = {"episode": self.episode, "status": "started", "scene_dir": str(spec.root),
                  "task_id": task.task_id, "stamp_ns": self.start_ns}
        goal_image = obs.get("goal_image") if env.render_images else None
        self.live.start_episode(self.start_ns, self.episode, spec.name, task.task_id, task.goal_position,
                                goal_image, env.camera, spec.camera.mount, status)
        self.live.observe(self.start_ns, env.position, env.yaw, *self._images(env, obs))

    def episode_step(self, env, command, obs) -> None:
        t = self.start_ns + env.steps * self.dt_ns
        self.live.command(t - self.dt_ns, command)
        self.live.observe(t, env.position, env.yaw, *self._images(env, obs))

    def episode_ended(self, env, flown) -> None:
        self.last_ns = self.start_ns + env.steps * self.dt_ns
        report = {"episode": self.episode, "status": str(flown.status), "steps": int(flown.steps)}
        if flown.error is not None:
            report["error"] = flown.error
        self.live.end_episode(self.last_ns, str(flown.status), flown.trajectory, report)
        self.episode += 1


def open_live_view(*, out=None, serve: bool = False, connect: str | None = None, web_port: int = 9090,
                   grpc_port: int = 9876, images: bool = True, points: int = 100_000, name: str = "airplay eval"):
    """(LiveView, RerunServer or None): the view of a run, streaming to a server this starts
    (``serve``), to ``connect``, and/or into ``out``. LiveViewError says what is wrong."""
    server = RerunServer(web_port, grpc_port) if serve and not connect else None
    try:
        live = LiveView(out=out, connect=server.url if server else connect, images=images, points=points, name=name)
    except BaseException:
        if server is not None:
            server.stop()
        raise
    return live, server
