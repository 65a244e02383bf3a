"""Benchmark the ROS 2 graph: control steps per second against in-process, and image latency.

1. Throughput. The same episodes (synthetic indoor scene, seed 1, default Gaussian density;
   ``--episodes`` pointgoal tasks from seed 0, the expert policy, RGB + depth rendered every
   step unless ``--no-images``) run twice:

   * in-process: ``evaluate_inprocess``; the figure is summary.json meta ``control_steps`` /
     ``flying_time_s`` (the sum over episodes of reset + policy + step + rendering, without
     scene set-up);
   * through the graph: the four nodes of ``sim_eval_graph`` (sim, renderer, policy,
     evaluator; lockstep) as separate processes started from ``node_command`` over real DDS
     on loopback; the figure is the evaluator's summary.json meta ``control_steps`` /
     ``wall_time_s``, which runs from the evaluator publishing the first episode command to
     its receiving the last terminal episode status (process start-up, DDS discovery and
     scene loading are before it; writing the results after it). The bench also listens to
     ``episode/status`` itself and reports, as a cross-check, the time from the first
     "started" status to the last terminal status it heard.

   Both include each episode's reset and first frame; the graph also includes the hand-over
   between episodes (command -> sim reset -> status), which in-process is a function call.
   Target: graph >= 0.8 x in-process. The nodes spin airplay's executor
   (:class:`airplay.nodes.executor.LeanExecutor`) unless AIRPLAY_EXECUTOR says otherwise;
   ``--compare-executor`` runs the graph a second time under rclpy's SingleThreadedExecutor
   (AIRPLAY_EXECUTOR=rclpy) and reports that rate and ratio in the same run.

2. Latency of a 224x224 RGB image (sensor_msgs/Image rgb8, 150,528 bytes) between two
   processes: a publisher process at 50 Hz stamps each message's header with its wall-clock
   send time (``time.time_ns()``; frame_id carries the sequence number); this process
   subscribes and records receive - send. Run with the QoS the graph uses for camera images
   in lockstep (``airplay.nodes.common.LOCKSTEP_STREAM``: reliable, keep last
   ``LOCKSTEP_DEPTH`` = 100), and once
   with ``rclpy.qos.qos_profile_sensor_data`` (best effort, keep last 5) on both ends for
   comparison. Targets (graph QoS): p50 <= 2 ms and no drops at 50 Hz.

3. Start-up time and peak memory per node of the sim_eval graph (sim, renderer, policy,
   evaluator), measured in every graph run of 1. and alone with ``--startup``: the four nodes
   are started together (``python -m <module>`` of whatever ``airplay`` this interpreter
   imports, so PYTHONPATH selects the code under test); a node is ready when its endpoint
   on ``/episode/command`` is visible in the ROS graph (sim, renderer, policy: their
   subscription; evaluator: its publisher), polled every 20 ms by the bench's own node; the
   table gives seconds from the node's process start to ready, the CPU seconds its process
   had used by then (steadier than wall time on a loaded machine) and its peak resident
   memory (VmHWM of /proc/<pid>/status, read every 20 ms until it exits; see NodeRun for
   why not ru_maxrss), and when the first episode started. The scene and its disk caches (SDF,
   LOD hierarchy) are prepared first by a child process with a numba cache of its own, so a
   run with an empty NUMBA_CACHE_DIR really starts the nodes cold. Only the topic names
   episode/command and episode/status and the evaluator's results files are relied on.

Every ROS process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, the loopback Fast DDS
profile and a ROS_DOMAIN_ID of its own (random 1..101 unless set).

    .venv/bin/python bench/graph.py           # table (~3 minutes)
    .venv/bin/python bench/graph.py --json    # one JSON object
    .venv/bin/python bench/graph.py --quick   # ~20 s: 1 episode, sparse scene, 64x64, 1 s of images (make test)
    .venv/bin/python bench/graph.py --compare-executor   # + the graph under rclpy's executor
    .venv/bin/python bench/graph.py --startup --runs 3   # start-up and memory per node only
    PYTHONPATH=/tmp/airplay-before/src .venv/bin/python bench/graph.py --startup   # another commit's nodes
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from benchlib import finish_meta, run_meta

TARGET_RATIO = 0.8
TARGET_P50_MS = 2.0
IMAGE_SIDE = 224
IMAGE_RATE_HZ = 50.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ros_environment() -> dict[str, str]:
    """This process's environment with the loopback DDS settings and an own ROS domain: the
    given ROS_DOMAIN_ID, else a random one in 1..101 on which no other node is seen (other
    graphs on this machine's loopback would mix with ours; up to 10 draws)."""
    from airplay.launcher import graph_environment

    env = graph_environment()
    for key in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "PYTHONUNBUFFERED"):
        os.environ.setdefault(key, env[key])  # this process subscribes too
    if "ROS_DOMAIN_ID" not in os.environ:
        draw = random.SystemRandom()
        for _ in range(10):
            domain = draw.randint(1, 101)
            others = nodes_on_domain(domain)
            if not others:
                break
            log(f"[ros] domain {domain} is in use ({', '.join(others[:4])}); drawing another")
        os.environ["ROS_DOMAIN_ID"] = str(domain)
    env["ROS_DOMAIN_ID"] = os.environ["ROS_DOMAIN_ID"]
    env["PYTHONPATH"] = with_airplay_on_path(env.get("PYTHONPATH", ""))
    return env


def with_airplay_on_path(pythonpath: str) -> str:
    """``pythonpath`` with the folder of the ``airplay`` this process imported first, so that
    every child (nodes, publisher) runs the code this bench reports, whatever is installed."""
    import airplay

    root = str(Path(airplay.__file__).resolve().parents[1])
    parts = [p for p in pythonpath.split(os.pathsep) if p]
    return os.pathsep.join([root] + [p for p in parts if os.path.abspath(p) != root])


def nodes_on_domain(domain: int, wait_s: float = 1.5) -> list[str]:
    """Names of the ROS nodes other processes run on ``domain`` (seen within ``wait_s`` seconds)."""
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain)
    try:
        node = rclpy.create_node("bench_domain_probe", context=context)
        time.sleep(wait_s)  # discovery runs in the middleware's own threads
        names = sorted(n for n in node.get_node_names() if n != "bench_domain_probe")
        node.destroy_node()
        return names
    finally:
        context.try_shutdown()


# --------------------------------------------------------------------------------------
# 1. Throughput


class GraphWatcher:
    """The bench's own view of a graph run (own rclpy context, spun in a thread): the wall time
    of each ``episode/status`` message, and when each node became ready.

    A node is ready when its endpoint on ``/episode/command`` is visible in the ROS graph:
    the sim's, renderer's and policy's subscription (they subscribe once they can take an
    episode), the evaluator's publisher. The graph is polled every ``POLL_S`` seconds; at
    the poll that first sees a node, its ready time and its CPU seconds so far are taken.
    It never subscribes to ``episode/command`` (the evaluator counts its subscribers).
    """

    POLL_S = 0.02

    def __init__(self, pids: dict[str, int]) -> None:
        import threading

        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        self.pids = dict(pids)
        self.lock = threading.Lock()
        self.events: list[tuple[float, dict]] = []
        self.ready: dict[str, tuple[float, float | None]] = {}  # name -> (perf_counter, CPU s of its process)
        self.foreign: set[str] = set()  # nodes of other processes on our domain (they would spoil the run)
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("bench_graph_watcher", context=self.context)
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, history=HistoryPolicy.KEEP_LAST,
                              durability=DurabilityPolicy.VOLATILE)  # as the graph's episode control
        self.node.create_subscription(String, "episode/status", self._on_status, reliable)
        self.node.create_timer(self.POLL_S, self._poll)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, name="bench-graph-watcher", daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self.executor.spin()
        except ExternalShutdownException:
            pass

    def _on_status(self, msg) -> None:
        t = time.perf_counter()
        with self.lock:
            self.events.append((t, json.loads(msg.data)))

    def _poll(self) -> None:
        """Record the nodes newly seen on /episode/command (subscribers; the evaluator as publisher)."""
        t = time.perf_counter()
        seen = {i.node_name for i in self.node.get_subscriptions_info_by_topic("/episode/command")}
        seen |= {i.node_name for i in self.node.get_publishers_info_by_topic("/episode/command")
                 if i.node_name == "evaluator"}
        names = self.node.get_node_names()
        strangers = {n for n in names if n not in self.pids and not n.startswith("bench_")}
        strangers |= {f"second {n}" for n in self.pids if names.count(n) > 1}
        with self.lock:
            self.foreign |= strangers
            fresh = [name for name in seen if name in self.pids and name not in self.ready]
        for name in fresh:
            cpu = cpu_seconds(self.pids[name])
            with self.lock:
                self.ready[name] = (t, cpu)

    def foreign_nodes(self) -> list[str]:
        """Nodes seen on the domain that are not this run's (a shared domain: figures unreliable)."""
        with self.lock:
            return sorted(self.foreign)

    def ready_times(self) -> dict[str, tuple[float, float | None]]:
        """name -> (perf_counter when first seen ready, its process's CPU seconds then)."""
        with self.lock:
            return dict(self.ready)

    def span(self) -> dict:
        with self.lock:
            starts = [t for t, m in self.events if m.get("status") == "started"]
            ends = [(t, m) for t, m in self.events if m.get("status") != "started"]
        out = {"first_started_at": starts[0] if starts else None, "statuses_heard": len(ends)}
        if not starts or not ends:
            return {**out, "span_s": None, "steps": None}
        return {**out, "span_s": ends[-1][0] - starts[0],
                "steps": int(sum(int(m.get("steps", 0)) for _, m in ends))}

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=1.0)
        self.node.destroy_node()
        self.context.try_shutdown()
        self.thread.join(timeout=2.0)


class NodeRun:
    """One node process of a graph run: started now, sampled while it runs, reaped by ``waitpid``.

    Peak memory is the process's peak resident set, ``VmHWM`` of /proc/<pid>/status (KiB),
    read every ``SAMPLE_S`` seconds until it is reaped (through its shutdown when the bench
    stops it): a high-water mark, so the last read holds every peak but one in the last
    sample interval before the process exits. Not ``ru_maxrss`` from wait4: Linux keeps in
    it the RSS high-water mark of the memory image the child replaced at exec, i.e. this
    bench's own size when it forked the node (965 MiB for every node after the in-process
    run; a child with a VmHWM of 10.5 MiB reports 527 MiB under a 500 MiB parent).
    """

    SAMPLE_S = 0.02

    def __init__(self, name: str, cmd: list[str], env: dict, log_path: Path) -> None:
        self.name = name
        self.log = open(log_path, "w")  # noqa: SIM115 - the node's stdout while it runs; closed in reap()
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.hwm_kib: int | None = None
        self.cpu_s: float | None = None
        self.code: int | None = None

    @property
    def running(self) -> bool:
        return self.code is None

    def sample(self) -> None:
        """Read the live process's VmHWM (KiB) and CPU seconds (kept: the last read before it exits)."""
        if self.running:
            hwm = proc_status_kib(self.proc.pid, "VmHWM")
            self.hwm_kib = hwm if hwm is not None else self.hwm_kib
            cpu = cpu_seconds(self.proc.pid)
            self.cpu_s = cpu if cpu is not None else self.cpu_s

    def reap(self, timeout_s: float = 0.0) -> bool:
        """Collect the exit status if the process has ended (waiting up to ``timeout_s``
        seconds); True once it has."""
        deadline = time.monotonic() + timeout_s
        while self.running:
            self.sample()  # VmHWM and CPU time up to the last moment (a stopped node's shutdown too)
            pid, status = os.waitpid(self.proc.pid, os.WNOHANG)
            if pid:
                self.code = self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.log.close()
            elif time.monotonic() >= deadline:
                return False
            else:
                time.sleep(self.SAMPLE_S)
        return True

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the node's process group (it was started in a session of its own)."""
        if self.running:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def peak_mib(self) -> float | None:
        """Peak resident memory (MiB): the last VmHWM read."""
        return None if self.hwm_kib is None else round(self.hwm_kib / 1024.0, 1)


def proc_status_kib(pid: int, key: str) -> int | None:
    """A ``kB`` field (VmHWM, VmRSS, ...) of /proc/<pid>/status in KiB; None if unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def run_inprocess(scene_dir: Path, out: Path, episodes: int, render_images: bool) -> dict:
    import contextlib
    import io

    from airplay.eval.runner import EvalConfig, evaluate_inprocess

    cfg = EvalConfig(scenes=[scene_dir], policy="expert", setting="pointgoal", episodes=episodes, seed=0,
                     render_images=render_images)
    with contextlib.redirect_stdout(io.StringIO()):  # its table; stdout is ours (--json)
        evaluate_inprocess(cfg, out, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    return summary["meta"], _outcomes(out)


def _outcomes(out: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines() if line.strip()]
    return [(r.get("task_id"), r.get("status"), r.get("steps")) for r in rows]


def graph_arguments(scene_dir: Path, episodes: int, render_images: bool, out: Path) -> list[str]:
    """The sim_eval launch arguments of the bench run, those the importable airplay accepts
    (so that the bench also starts older or newer node code; graph.py refuses unknown keys)."""
    from airplay.graph import SIM_EVAL_ARGUMENTS

    wanted = {"scenes": scene_dir, "episodes": episodes, "seed": 0, "policy": "expert", "setting": "pointgoal",
              "lockstep": "true", "command_timeout_s": "10.0", "out": out,
              "render_images": str(render_images).lower()}
    return [f"{k}:={v}" for k, v in wanted.items() if k in SIM_EVAL_ARGUMENTS]


def run_graph(scene_dir: Path, out: Path, episodes: int, render_images: bool, env: dict, log_dir: Path,
              timeout_s: float) -> tuple:
    """Start the four sim_eval nodes, wait for the evaluator to exit (or ``timeout_s``), stop the
    rest. Returns (summary meta, outcomes, status span, seconds from the first start to the
    evaluator's exit, CPU seconds of the nodes still running then, per-node start-up rows)."""
    from airplay.graph import SIM_EVAL_ARGUMENTS, parse_launch_arguments, sim_eval_graph
    from airplay.launcher import node_command

    specs = sim_eval_graph(parse_launch_arguments(graph_arguments(scene_dir, episodes, render_images, out),
                                                  SIM_EVAL_ARGUMENTS))
    runs: dict[str, NodeRun] = {}
    watcher = None
    t0 = time.perf_counter()
    try:
        for spec in specs:
            runs[spec.name] = NodeRun(spec.name, node_command(spec, sys.executable), env, log_dir / f"{spec.name}.log")
        watcher = GraphWatcher({name: run.proc.pid for name, run in runs.items()})
        evaluator = runs["evaluator"]
        while not evaluator.reap() and time.perf_counter() - t0 < timeout_s:
            for run in runs.values():
                run.reap()  # samples it first
            time.sleep(NodeRun.SAMPLE_S)
        code = evaluator.code
        total_s = time.perf_counter() - t0
        for run in runs.values():
            run.sample()  # the last VmHWM and CPU time before the bench stops them
        cpu_s = {name: run.cpu_s for name, run in runs.items() if run.running}
        time.sleep(0.2)
        span = watcher.span()
        ready = watcher.ready_times()
        foreign = watcher.foreign_nodes()
    finally:
        _stop(runs)
        if watcher is not None:
            watcher.close()
    if code != 0:
        tail = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(log_dir.glob("*.log")))
        raise RuntimeError(f"the evaluator {'timed out' if code is None else f'exited with {code}'}\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    nodes = {**startup_rows(runs, ready, span, t0), "foreign_nodes": foreign}
    return summary["meta"], _outcomes(out), span, total_s, cpu_s, nodes


def startup_rows(runs: dict, ready: dict, span: dict, t0: float) -> dict:
    """Per node: seconds from its process start to ready, its CPU seconds then, its peak RSS (MiB);
    and when the first episode started (seconds after the first process start)."""
    nodes = {}
    for name, run in runs.items():
        t, cpu = ready.get(name, (None, None))
        nodes[name] = {"ready_s": None if t is None else round(t - run.started, 2),
                       "cpu_s_to_ready": cpu, "peak_rss_mib": run.peak_mib(), "exit_code": run.code}
    first = span.get("first_started_at")
    return {"nodes": nodes, "first_episode_started_s": None if first is None else round(first - t0, 2)}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process so far (Linux /proc), None if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, IndexError, ValueError):
        return None


def _stop(runs: dict, wait_s: float = 5.0) -> None:
    """SIGINT each running node's process group and reap them all (sampling each until it exits);
    SIGKILL what is left after ``wait_s``."""
    for run in runs.values():
        run.signal(signal.SIGINT)
    deadline = time.monotonic() + wait_s
    while not all([run.reap() for run in runs.values()]) and time.monotonic() < deadline:  # noqa: C419 - reap all
        time.sleep(NodeRun.SAMPLE_S)
    for run in runs.values():
        if not run.reap():
            run.signal(signal.SIGKILL)
            run.reap(5.0)


PREP_NUMBA_CACHE = Path(tempfile.gettempdir()) / "airplay-bench-prep-numba"
"""NUMBA_CACHE_DIR of the scene-preparing child process: not the nodes' (a cold-cache
start-up run must find the nodes' cache as the user left it)."""


def prepare_scene(scene_dir: Path, density: float | None, env: dict, camera_px: int | None = None) -> None:
    """Generate the synthetic indoor scene (seed 1; its camera ``camera_px`` square, same field of
    view, where given) and fill the disk caches the nodes read (its SDF and level-of-detail
    hierarchy), in a child process with a numba cache of its own."""
    log("[scene] generating the synthetic indoor scene (seed 1), its SDF and LOD hierarchy ...")
    t = time.perf_counter()
    cmd = [sys.executable, os.path.abspath(__file__), "--prepare-scene", str(scene_dir)]
    cmd += [] if density is None else ["--density", str(density)]
    cmd += [] if camera_px is None else ["--camera-px", str(camera_px)]
    done = subprocess.run(cmd, env={**env, "NUMBA_CACHE_DIR": str(PREP_NUMBA_CACHE)}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"preparing the scene failed (code {done.returncode}):\n{done.stderr[-3000:]}")
    log(f"[scene] ready in {time.perf_counter() - t:.1f} s")


def prepare_scene_main(scene_dir: Path, density: float | None, camera_px: int | None = None) -> int:
    """The child of :func:`prepare_scene`: make the scene, then build (or read) its cached parts."""
    from airplay.scene.synthetic import make_scene
    from airplay.world import World

    make_scene("indoor", 1, scene_dir, name="indoor_1", **({} if density is None else {"gaussians_per_m2": density}))
    if camera_px:  # the scene's camera at camera_px x camera_px pixels, the same field of view
        import yaml

        spec = yaml.safe_load((scene_dir / "scene.yaml").read_text())
        cam, scale = spec["camera"], camera_px / spec["camera"]["width"]
        cam.update(width=camera_px, height=camera_px, fx=cam["fx"] * scale, fy=cam["fy"] * scale,
                   cx=cam["cx"] * scale, cy=cam["cy"] * scale)
        (scene_dir / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    world = World.load(scene_dir)
    world.sdf  # noqa: B018 - the disk-cached SDF, built once before four processes want it
    world.lod_hierarchy()  # the renderer's disk-cached LOD hierarchy, likewise
    return 0


def throughput(tmp: Path, episodes: int, render_images: bool, env: dict, density: float | None,
               logs_to: Path | None = None, compare_executor: bool = False, camera_px: int | None = None) -> dict:
    scene_dir = tmp / "indoor_1"
    prepare_scene(scene_dir, density, env, camera_px)

    images = "with" if render_images else "without"
    log(f"[in-process] {episodes} episodes, expert, {images} images ...")
    t = time.perf_counter()
    ip_meta, ip_out = run_inprocess(scene_dir, tmp / "out-inprocess", episodes, render_images)
    ip_rate = ip_meta["control_steps"] / max(ip_meta["flying_time_s"], 1e-9)
    log(f"[in-process] {ip_meta['control_steps']} steps in {ip_meta['flying_time_s']:.2f} s flying = "
        f"{ip_rate:.0f} steps/s ({time.perf_counter() - t:.1f} s in all)")

    log(f"[graph] the same {episodes} episodes through sim, renderer, policy, evaluator (ROS_DOMAIN_ID "
        f"{env['ROS_DOMAIN_ID']}) ...")
    log_dir = tmp / "graph-logs"
    log_dir.mkdir()
    budget = 60.0 + 4.0 * ip_meta["wall_time_s"]
    g_meta, g_out, span, total_s, cpu_s, startup = run_graph(scene_dir, tmp / "out-graph", episodes,
                                                             render_images, env, log_dir, budget)
    if logs_to is not None:
        import shutil

        shutil.copytree(log_dir, logs_to, dirs_exist_ok=True)
    g_rate = g_meta["control_steps"] / max(g_meta["wall_time_s"], 1e-9)
    log(f"[graph] {g_meta['control_steps']} steps in {g_meta['wall_time_s']:.2f} s = {g_rate:.0f} steps/s "
        f"({total_s:.1f} s from the first process start to the evaluator's exit)")
    span_rate = (span["steps"] / span["span_s"]) if span["span_s"] else None
    ratio = g_rate / ip_rate
    reference = None
    if compare_executor:  # the same graph spun by rclpy's SingleThreadedExecutor
        log("[graph] again with AIRPLAY_EXECUTOR=rclpy (rclpy's SingleThreadedExecutor) ...")
        ref_dir = tmp / "graph-logs-rclpy"
        ref_dir.mkdir()
        r_meta, r_out, _, _, r_cpu, _ = run_graph(scene_dir, tmp / "out-graph-rclpy", episodes, render_images,
                                               {**env, "AIRPLAY_EXECUTOR": "rclpy"}, ref_dir, budget)
        r_rate = r_meta["control_steps"] / max(r_meta["wall_time_s"], 1e-9)
        log(f"[graph] rclpy executor: {r_meta['control_steps']} steps in {r_meta['wall_time_s']:.2f} s = "
            f"{r_rate:.0f} steps/s")
        reference = {"control_steps": r_meta["control_steps"], "time_s": r_meta["wall_time_s"],
                     "steps_per_s": round(r_rate, 1), "ratio": round(r_rate / ip_rate, 3),
                     "same_outcomes": r_out == ip_out, "node_cpu_s_at_end": r_cpu}
    return {
        "scene": "indoor_1 (synthetic indoor, seed 1)",
        "gaussians_per_m2": density if density is not None else "default",
        "camera_px": camera_px if camera_px else "default (224)",
        "episodes": episodes,
        "render_images": render_images,
        "inprocess": {"control_steps": ip_meta["control_steps"], "time_s": ip_meta["flying_time_s"],
                      "interval": "sum of per-episode flying time (reset, policy, step, rendering)",
                      "steps_per_s": round(ip_rate, 1), "wall_time_s": ip_meta["wall_time_s"]},
        "graph": {"control_steps": g_meta["control_steps"], "time_s": g_meta["wall_time_s"],
                  "interval": "evaluator: first episode command -> last terminal status",
                  "steps_per_s": round(g_rate, 1), "process_start_to_exit_s": round(total_s, 2),
                  "listener_span_s": round(span["span_s"], 3) if span["span_s"] else None,
                  "listener_steps": span["steps"], "listener_statuses": span["statuses_heard"],
                  "listener_steps_per_s": round(span_rate, 1) if span_rate else None,
                  "node_cpu_s_at_end": cpu_s, "executor": env.get("AIRPLAY_EXECUTOR", "auto") or "auto"},
        "graph_rclpy_executor": reference,
        "startup": startup,
        "same_outcomes": ip_out == g_out,
        "ratio": round(ratio, 3),
        "target_ratio": TARGET_RATIO,
        "pass_ratio": bool(ratio >= TARGET_RATIO),
    }


# --------------------------------------------------------------------------------------
# 2. Image latency


def _qos(name: str):
    from rclpy.qos import qos_profile_sensor_data

    from airplay.nodes.common import LOCKSTEP_STREAM

    return {"graph": LOCKSTEP_STREAM, "sensor_data": qos_profile_sensor_data}[name]


def publisher_main(qos_name: str, rate_hz: float, duration_s: float, wait_s: float = 15.0) -> int:
    """The publisher process: waits for a subscriber, then sends for ``duration_s`` at ``rate_hz``;
    prints one JSON line {"sent": N, "match_wait_s": ...}."""
    import rclpy
    from sensor_msgs.msg import Image

    rclpy.init()
    node = rclpy.create_node("bench_image_publisher")
    pub = node.create_publisher(Image, "bench/image_raw", _qos(qos_name))
    t = time.monotonic()
    while pub.get_subscription_count() < 1 and time.monotonic() - t < wait_s:
        time.sleep(0.01)
    matched_after = time.monotonic() - t
    time.sleep(0.5)  # let the reader finish matching
    rgb = np.random.default_rng(0).integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8)
    msg = Image(height=IMAGE_SIDE, width=IMAGE_SIDE, encoding="rgb8", is_bigendian=0, step=IMAGE_SIDE * 3)
    msg.data = rgb.tobytes()
    period = 1.0 / rate_hz
    n = round(duration_s * rate_hz)
    start = time.perf_counter()
    for i in range(n):
        target = start + i * period
        while (d := target - time.perf_counter()) > 0:
            time.sleep(d)
        now = time.time_ns()
        msg.header.stamp.sec, msg.header.stamp.nanosec = now // 1_000_000_000, now % 1_000_000_000
        msg.header.frame_id = str(i)
        pub.publish(msg)
    late = time.perf_counter() - (start + (n - 1) * period)
    time.sleep(1.0)  # let the last ones arrive (reliable: retransmits)
    print(json.dumps({"sent": n, "matched_after_s": round(matched_after, 3), "end_late_s": round(late, 4)}),
          flush=True)
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def latency(qos_name: str, duration_s: float, env: dict) -> dict:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image

    log(f"[latency] 224x224 rgb8 at {IMAGE_RATE_HZ:g} Hz for {duration_s:g} s, QoS {qos_name} ...")
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("bench_image_subscriber", context=context)
    lat_ns: list[int] = []
    seqs: list[int] = []
    sizes: set[int] = set()

    def on_image(msg) -> None:
        now = time.time_ns()
        lat_ns.append(now - (msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec))
        seqs.append(int(msg.header.frame_id))
        sizes.add(len(msg.data))

    node.create_subscription(Image, "bench/image_raw", on_image, _qos(qos_name))
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--publish", qos_name,
                             "--publish-seconds", str(duration_s)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + duration_s + 40.0
        while proc.poll() is None and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.01)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    finally:
        executor.shutdown(timeout_sec=1)
        node.destroy_node()
        context.try_shutdown()
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the publisher failed (code {proc.returncode}): {err.decode()[-2000:]}")
    pub = json.loads(lines[-1])
    ms = np.asarray(lat_ns, np.float64) / 1e6
    sent, received = pub["sent"], len(set(seqs))
    row = {
        "qos": qos_name,
        "sent": sent,
        "received": received,
        "dropped": sent - received,
        "bytes": sorted(sizes),
        "p50_ms": round(float(np.percentile(ms, 50)), 3) if len(ms) else None,
        "p95_ms": round(float(np.percentile(ms, 95)), 3) if len(ms) else None,
        "p99_ms": round(float(np.percentile(ms, 99)), 3) if len(ms) else None,
        "max_ms": round(float(ms.max()), 3) if len(ms) else None,
        "publisher_matched_after_s": pub["matched_after_s"],
    }
    row["pass"] = bool(row["p50_ms"] is not None and row["p50_ms"] <= TARGET_P50_MS and row["dropped"] == 0)
    log(f"[latency] {qos_name}: {received}/{sent} received, p50 {row['p50_ms']} ms, p95 {row['p95_ms']} ms, "
        f"p99 {row['p99_ms']} ms")
    return row


# --------------------------------------------------------------------------------------
# 3. Start-up time and peak memory per node


def startup(tmp: Path, runs: int, episodes: int, render_images: bool, env: dict, density: float | None,
            timeout_s: float, logs_to: Path | None = None) -> dict:
    """Start the sim_eval graph ``runs`` times on the prepared scene (``episodes`` each) and
    measure each node's start-up and peak memory (:func:`startup_rows`); also the median
    and range over the runs."""
    scene_dir = tmp / "indoor_1"
    prepare_scene(scene_dir, density, env)
    rows = []
    for i in range(runs):
        log(f"[start-up] run {i + 1}/{runs}: sim, renderer, policy, evaluator, {episodes} episode(s) ...")
        log_dir = tmp / f"startup-logs-{i}"
        log_dir.mkdir()
        *_, total_s, _, row = run_graph(scene_dir, tmp / f"out-startup-{i}", episodes, render_images, env, log_dir,
                                        timeout_s)
        if logs_to is not None:
            import shutil

            shutil.copytree(log_dir, logs_to / f"startup-{i}", dirs_exist_ok=True)
        log("[start-up] " + ", ".join(f"{name} ready {n['ready_s']} s ({n['peak_rss_mib']} MiB)"
                                      for name, n in row["nodes"].items())
            + f"; first episode {row['first_episode_started_s']} s; evaluator exit {total_s:.1f} s")
        if row["foreign_nodes"]:
            log(f"[start-up] WARNING: other nodes on ROS_DOMAIN_ID {env['ROS_DOMAIN_ID']}: {row['foreign_nodes']}")
        rows.append(row)
    return {"runs": rows, "summary": summarize_startup(rows), "episodes": episodes, "render_images": render_images,
            "gaussians_per_m2": density if density is not None else "default"}


def summarize_startup(rows: list[dict]) -> dict:
    """Per node and figure (ready_s, cpu_s_to_ready, peak_rss_mib): [median, min, max] over runs
    (None where no run had it); and the same for first_episode_started_s."""
    def stats(values: list) -> list | None:
        v = [x for x in values if x is not None]
        return [round(float(np.median(v)), 2), min(v), max(v)] if v else None

    names = list(rows[0]["nodes"]) if rows else []
    figures = ("ready_s", "cpu_s_to_ready", "peak_rss_mib")
    out = {name: {f: stats([r["nodes"][name][f] for r in rows]) for f in figures} for name in names}
    return {"nodes": out, "first_episode_started_s": stats([r["first_episode_started_s"] for r in rows])}


def code_under_test() -> dict:
    """Where the ``airplay`` the nodes import lives, and its git commit (with '+dirty' when
    tracked files under src/ differ from it); the nodes are started from the same interpreter
    and PYTHONPATH."""
    import airplay

    src = Path(airplay.__file__).resolve().parent
    root = src.parents[1]
    commit = None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", "src"],
                               capture_output=True, text=True, timeout=10, check=False)
        if head.returncode == 0:
            commit = head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return {"package": str(src), "commit": commit}


def numba_cache_state(env: dict) -> dict:
    """The nodes' NUMBA_CACHE_DIR and how many compiled-function index files (*.nbi) it held
    before the run (0: a cold cache; unset: numba caches in __pycache__ next to the sources)."""
    folder = env.get("NUMBA_CACHE_DIR")
    if not folder:
        return {"dir": None, "index_files": None}
    path = Path(folder)
    return {"dir": folder, "index_files": sum(1 for _ in path.rglob("*.nbi")) if path.is_dir() else 0}


def print_startup(st: dict, title: str) -> None:
    """The start-up table: per node, ready time, CPU seconds to ready and peak RSS."""
    runs = st["runs"]
    summary = summarize_startup(runs) if "summary" not in st else st["summary"]
    print(f"\n{title}")
    many = len(runs) > 1
    cell = (lambda v, p: "-" if v is None else (f"{v[0]:.{p}f} ({v[1]:.{p}f}-{v[2]:.{p}f})" if many
                                                 else f"{v[0]:.{p}f}"))
    head = f"{'node':<11}{'ready s':>20}{'CPU s to ready':>20}{'peak RSS MiB':>22}"
    print(head)
    print("-" * len(head))
    foreign = sorted({n for r in runs for n in r.get("foreign_nodes", [])})
    for name, f in summary["nodes"].items():
        print(f"{name:<11}{cell(f['ready_s'], 2):>20}{cell(f['cpu_s_to_ready'], 2):>20}"
              f"{cell(f['peak_rss_mib'], 1):>22}")
    print(f"{'graph':<11}{cell(summary['first_episode_started_s'], 2):>20}  first episode 'started' status, from "
          "the first process start")
    print("ready: the node's endpoint on /episode/command seen in the ROS graph (sim, renderer, policy: its "
          "subscription; evaluator: its publisher), from its own process start; CPU s: user + system of its "
          "process then; peak RSS: VmHWM, read every 20 ms until it exited."
          + (" Median (min-max) over runs." if many else ""))
    if foreign:
        print(f"WARNING: nodes of other processes were on the ROS domain during the run(s): {', '.join(foreign)}; "
              "the ready times may be theirs")


# --------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true",
                        help="seconds, not minutes (what make test runs): 1 episode in a sparse scene (4 Gaussians/m^2) "
                             "with a 64x64 camera, 1 s of images per QoS")
    parser.add_argument("--episodes", type=int, default=None,
                        help="episodes of each graph run (default 4; --quick and --startup: 1)")
    parser.add_argument("--no-images", dest="images", action="store_false",
                        help="render_images false: the renderer publishes zero frames (the expert does not look)")
    parser.add_argument("--density", type=float, default=None,
                        help="gaussians_per_m2 of the scene (default: make_scene's default; quick 4)")
    parser.add_argument("--latency-seconds", type=float, default=None,
                        help="seconds of images per QoS (default 10, quick 1)")
    parser.add_argument("--compare-executor", action="store_true",
                        help="also run the graph with rclpy's SingleThreadedExecutor (AIRPLAY_EXECUTOR=rclpy)")
    parser.add_argument("--logs", type=Path, default=None, help="copy the graph nodes' logs into this folder")
    parser.add_argument("--startup", action="store_true",
                        help="only measure start-up time and peak memory per node (no in-process run, no latency)")
    parser.add_argument("--runs", type=int, default=1, help="graph runs of --startup (default 1)")
    parser.add_argument("--graph-timeout", type=float, default=600.0,
                        help="seconds a --startup graph run may take (a cold numba cache compiles in it)")
    parser.add_argument("--skip-throughput", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--camera-px", type=int, default=None,
                        help="the throughput scene's camera, pixels square (default: the scene's 224; quick 64)")
    parser.add_argument("--prepare-scene", type=Path, default=None, help=argparse.SUPPRESS)  # the scene child
    parser.add_argument("--publish", default=None, help=argparse.SUPPRESS)  # the publisher child process
    parser.add_argument("--publish-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.publish:
        return publisher_main(args.publish, IMAGE_RATE_HZ, args.publish_seconds)
    if args.prepare_scene:
        return prepare_scene_main(args.prepare_scene, args.density, args.camera_px)
    if args.startup:
        return startup_main(args)
    episodes = args.episodes or (1 if args.quick else 4)
    lat_s = args.latency_seconds or (1.0 if args.quick else 10.0)
    if args.quick and args.density is None:
        args.density = 4.0  # the sparse scene of the ROS graph tests: the same code path, a fraction of the work
    if args.quick and args.camera_px is None:
        args.camera_px = 64

    meta = run_meta("graph")
    env = ros_environment()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="airplay-bench-graph-") as tmp:
        thr = None if args.skip_throughput else throughput(Path(tmp), episodes, args.images, env, args.density,
                                                           args.logs, args.compare_executor, args.camera_px)
    lat = [latency("graph", lat_s, env), latency("sensor_data", lat_s, env)]
    result = {
        "cpu_count": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "ros_domain_id": int(env["ROS_DOMAIN_ID"]),
        "rmw": env.get("RMW_IMPLEMENTATION", "default (rmw_fastrtps_cpp)"),
        "throughput": thr,
        "latency": lat,
        "target_p50_ms": TARGET_P50_MS,
        "pass_latency": lat[0]["pass"],
        "quick": args.quick,
        "bench_s": round(time.perf_counter() - t_all, 1),
    }
    result["meta"] = finish_meta(meta)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


def startup_main(args) -> int:
    """``--startup``: the start-up and memory table alone (``--runs`` graph runs of ``--episodes``, default 1)."""
    env = ros_environment()
    result = {"cpu_count": os.cpu_count(), "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
              "ros_domain_id": int(env["ROS_DOMAIN_ID"]), "code": code_under_test(),
              "numba_cache": numba_cache_state(env)}
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="airplay-bench-startup-") as tmp:
        result["startup"] = startup(Path(tmp), max(1, args.runs), args.episodes or 1, args.images, env, args.density,
                                    args.graph_timeout, args.logs)
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["bench_s"] = round(time.perf_counter() - t_all, 1)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    st, nc = result["startup"], result["numba_cache"]
    cache = ("NUMBA_CACHE_DIR unset (__pycache__)" if nc["dir"] is None
             else f"NUMBA_CACHE_DIR {nc['dir']} ({nc['index_files']} index files at start)")
    print(f"{result['cpu_count']} CPUs, load average {result['load_average_at_start'][0]:.2f} at start, "
          f"{result['load_average_at_end'][0]:.2f} at end; ROS_DOMAIN_ID {result['ros_domain_id']}, loopback only; "
          f"bench {result['bench_s']:.0f} s.\ncode: {result['code']['package']} ({result['code']['commit']}); {cache}")
    print_startup(st, f"Start-up and peak memory per node: sim_eval graph, the four nodes started together, "
                      f"{st['episodes']} pointgoal episode(s), expert, synthetic indoor_1 (seed 1, "
                      f"{st['gaussians_per_m2']} Gaussians/m^2), "
                      f"{'RGB + depth rendered' if st['render_images'] else 'no images rendered'}; "
                      f"{len(st['runs'])} run(s)")
    return 0


def print_table(res: dict) -> None:
    print(f"{res['cpu_count']} CPUs, load average {res['load_average_at_start'][0]:.2f} at start; "
          f"ROS_DOMAIN_ID {res['ros_domain_id']}, {res['rmw']}, loopback only; bench {res['bench_s']:.0f} s.")
    t = res["throughput"]
    if t:
        print(f"\nThroughput: {t['episodes']} pointgoal episodes, expert, {t['scene']}, "
              f"{t['gaussians_per_m2']} Gaussians/m^2, camera {t.get('camera_px', 'default')} px, "
              f"{'RGB + depth rendered every step' if t['render_images'] else 'no images rendered (zeros published)'}")
        head = f"{'runtime':<12}{'steps':>7}{'time s':>9}{'steps/s':>9}  interval"
        print(head)
        print("-" * (len(head) + 50))
        ip, g = t["inprocess"], t["graph"]
        print(f"{'in-process':<12}{ip['control_steps']:>7}{ip['time_s']:>9.2f}{ip['steps_per_s']:>9.0f}  {ip['interval']}")
        print(f"{'graph':<12}{g['control_steps']:>7}{g['time_s']:>9.2f}{g['steps_per_s']:>9.0f}  {g['interval']}"
              f" ({g['executor']} executor)")
        r = t.get("graph_rclpy_executor")
        if r:
            print(f"{'  rclpy exec':<12}{r['control_steps']:>7}{r['time_s']:>9.2f}{r['steps_per_s']:>9.0f}  the same, "
                  f"rclpy's SingleThreadedExecutor: {r['ratio']:.2f} x in-process, same outcomes {r['same_outcomes']}")
        if g["listener_span_s"]:
            print(f"{'  (bench)':<12}{g['listener_steps']:>7}{g['listener_span_s']:>9.2f}"
                  f"{g['listener_steps_per_s']:>9.0f}  bench listener: first 'started' -> last terminal status")
        if g.get("node_cpu_s_at_end"):
            print("graph nodes' CPU seconds (user + system, from process start, read when the evaluator exited): "
                  + ", ".join(f"{k} {v}" for k, v in g["node_cpu_s_at_end"].items()))
        print(f"graph process start -> evaluator exit: {g['process_start_to_exit_s']:.1f} s; in-process with "
              f"scene set-up: {ip['wall_time_s']:.1f} s. Same per-episode outcomes: {t['same_outcomes']}")
        if t.get("startup"):
            print_startup({"runs": [t["startup"]]}, "Start-up and peak memory per node (the graph run above):")
    print(f"\nImage latency: 224x224 rgb8 (150,528 bytes) between two processes at {IMAGE_RATE_HZ:g} Hz, "
          "receive - send wall time")
    head = f"{'QoS':<13}{'sent':>6}{'recv':>6}{'drops':>6}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    print(head)
    print("-" * len(head))
    names = {"graph": "graph (lock)", "sensor_data": "sensor_data"}
    for r in res["latency"]:
        fmt = lambda v: f"{v:>9.3f}" if v is not None else f"{'-':>9}"
        print(f"{names[r['qos']]:<13}{r['sent']:>6}{r['received']:>6}{r['dropped']:>6}"
              f"{fmt(r['p50_ms'])}{fmt(r['p95_ms'])}{fmt(r['p99_ms'])}{fmt(r['max_ms'])}")
    from airplay.nodes.common import LOCKSTEP_DEPTH

    print(f"graph (lock) = airplay.nodes.common.LOCKSTEP_STREAM (reliable, keep last {LOCKSTEP_DEPTH}), what the "
          "renderer uses "
          "in lockstep; sensor_data = rclpy.qos.qos_profile_sensor_data (best effort, keep last 5).")
    print("Targets")
    if t:
        print(f"  graph / in-process steps/s = {t['ratio']:.2f} (>= {t['target_ratio']:g})  "
              f"{'PASS' if t['pass_ratio'] else 'FAIL'}")
    g = res["latency"][0]
    print(f"  image p50 {g['p50_ms']} ms (<= {res['target_p50_ms']:g} ms), {g['dropped']} drops of {g['sent']} "
          f"at {IMAGE_RATE_HZ:g} Hz (graph QoS)  {'PASS' if g['pass'] else 'FAIL'}")


if __name__ == "__main__":
    sys.exit(main())
