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
   in lockstep (``airplay.nodes.common.LOCKSTEP_IMAGES``: reliable, keep last 10), and once
   with ``rclpy.qos.qos_profile_sensor_data`` (best effort, keep last 5) on both ends for
   comparison. Targets (graph QoS): p50 <= 2 ms and no drops at 50 Hz.

Every ROS process runs with ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, the loopback Fast DDS
profile and a ROS_DOMAIN_ID of its own (random 1..100 unless set).

    .venv/bin/python bench/graph.py           # table (~3 minutes)
    .venv/bin/python bench/graph.py --json    # one JSON object
    .venv/bin/python bench/graph.py --quick   # under a minute
    .venv/bin/python bench/graph.py --compare-executor   # + the graph under rclpy's executor
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

TARGET_RATIO = 0.8
TARGET_P50_MS = 2.0
IMAGE_SIDE = 224
IMAGE_RATE_HZ = 50.0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def ros_environment() -> dict[str, str]:
    """This process's environment with the loopback DDS settings and an own ROS domain."""
    from airplay.launcher import graph_environment

    os.environ.setdefault("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 100)))
    env = graph_environment()
    for key in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE", "PYTHONUNBUFFERED"):
        os.environ.setdefault(key, env[key])  # this process subscribes too
    return env


# --------------------------------------------------------------------------------------
# 1. Throughput


class StatusListener:
    """Records the wall time of each ``episode/status`` message (own context, spun in a thread)."""

    def __init__(self) -> None:
        from std_msgs.msg import String

        from airplay.nodes.background import BackgroundNode
        from airplay.nodes.common import RELIABLE

        self.background = BackgroundNode("bench_status_listener")
        self.lock = self.background.lock
        self.events: list[tuple[float, dict]] = []
        self.background.node.create_subscription(String, "episode/status", self._on, RELIABLE)
        self.background.start()

    def _on(self, msg) -> None:
        t = time.perf_counter()
        with self.lock:
            self.events.append((t, json.loads(msg.data)))

    def span(self) -> dict:
        with self.lock:
            starts = [t for t, m in self.events if m.get("status") == "started"]
            ends = [(t, m) for t, m in self.events if m.get("status") != "started"]
        if not starts or not ends:
            return {"statuses_heard": len(ends), "span_s": None, "steps": None}
        return {"statuses_heard": len(ends), "span_s": ends[-1][0] - starts[0],
                "steps": int(sum(int(m.get("steps", 0)) for _, m in ends))}

    def close(self) -> None:
        self.background.close()


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


def run_graph(scene_dir: Path, out: Path, episodes: int, render_images: bool, env: dict, log_dir: Path,
              timeout_s: float) -> dict:
    from airplay.graph import SIM_EVAL_ARGUMENTS, parse_launch_arguments, sim_eval_graph
    from airplay.launcher import node_command

    specs = sim_eval_graph(parse_launch_arguments(
        [f"scenes:={scene_dir}", f"episodes:={episodes}", "seed:=0", "policy:=expert", "setting:=pointgoal",
         "lockstep:=true", "command_timeout_s:=10.0", f"out:={out}",
         f"render_images:={str(render_images).lower()}"], SIM_EVAL_ARGUMENTS))
    listener = StatusListener()
    procs: dict[str, subprocess.Popen] = {}
    t0 = time.perf_counter()
    try:
        for spec in specs:
            logf = open(log_dir / f"{spec.name}.log", "w")
            procs[spec.name] = subprocess.Popen(node_command(spec, sys.executable), env=env, stdout=logf,
                                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                                start_new_session=True)
        try:
            code = procs["evaluator"].wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        total_s = time.perf_counter() - t0
        cpu_s = {name: _cpu_seconds(proc.pid) for name, proc in procs.items() if proc.poll() is None}
        time.sleep(0.2)
        span = listener.span()
    finally:
        _stop(procs)
        listener.close()
    if code != 0:
        tail = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(log_dir.glob("*.log")))
        raise RuntimeError(f"the evaluator {'timed out' if code is None else f'exited with {code}'}\n{tail}")
    summary = json.loads((out / "summary.json").read_text())
    return summary["meta"], _outcomes(out), span, total_s, cpu_s


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process so far (Linux /proc), None if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, IndexError, ValueError):
        return None


def _stop(procs: dict) -> None:
    for proc in procs.values():
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 5.0
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)


def throughput(tmp: Path, episodes: int, render_images: bool, env: dict, density: float | None,
               logs_to: Path | None = None, compare_executor: bool = False) -> dict:
    from airplay.scene.synthetic import make_scene
    from airplay.sim.world import World

    scene_dir = tmp / "indoor_1"
    log("[scene] generating the synthetic indoor scene (seed 1) ...")
    t = time.perf_counter()
    kwargs = {} if density is None else {"gaussians_per_m2": density}
    make_scene("indoor", 1, scene_dir, name="indoor_1", **kwargs)
    World.load(scene_dir)  # the disk-cached SDF, built once before four processes want it
    log(f"[scene] ready in {time.perf_counter() - t:.1f} s")

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
    g_meta, g_out, span, total_s, cpu_s = run_graph(scene_dir, tmp / "out-graph", episodes, render_images, env,
                                                    log_dir, budget)
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
        r_meta, r_out, _, _, r_cpu = run_graph(scene_dir, tmp / "out-graph-rclpy", episodes, render_images,
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
                  "node_cpu_s_at_end": cpu_s, "executor": env.get("AIRPLAY_EXECUTOR", "lean") or "lean"},
        "graph_rclpy_executor": reference,
        "same_outcomes": ip_out == g_out,
        "ratio": round(ratio, 3),
        "target_ratio": TARGET_RATIO,
        "pass_ratio": bool(ratio >= TARGET_RATIO),
    }


# --------------------------------------------------------------------------------------
# 2. Image latency


def _qos(name: str):
    from rclpy.qos import qos_profile_sensor_data

    from airplay.nodes.common import LOCKSTEP_IMAGES

    return {"graph": LOCKSTEP_IMAGES, "sensor_data": qos_profile_sensor_data}[name]


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
    n = int(round(duration_s * rate_hz))
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--quick", action="store_true", help="under a minute: 1 episode, 3 s of images")
    parser.add_argument("--episodes", type=int, default=None, help="episodes of the throughput runs (default 4, quick 1)")
    parser.add_argument("--no-images", dest="images", action="store_false",
                        help="render_images false: the renderer publishes zero frames (the expert does not look)")
    parser.add_argument("--density", type=float, default=None,
                        help="gaussians_per_m2 of the scene (default: make_scene's default)")
    parser.add_argument("--latency-seconds", type=float, default=None,
                        help="seconds of images per QoS (default 10, quick 3)")
    parser.add_argument("--compare-executor", action="store_true",
                        help="also run the graph with rclpy's SingleThreadedExecutor (AIRPLAY_EXECUTOR=rclpy)")
    parser.add_argument("--logs", type=Path, default=None, help="copy the graph nodes' logs into this folder")
    parser.add_argument("--skip-throughput", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--publish", default=None, help=argparse.SUPPRESS)  # the publisher child process
    parser.add_argument("--publish-seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.publish:
        return publisher_main(args.publish, IMAGE_RATE_HZ, args.publish_seconds)
    episodes = args.episodes or (1 if args.quick else 4)
    lat_s = args.latency_seconds or (3.0 if args.quick else 10.0)

    env = ros_environment()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="airplay-bench-graph-") as tmp:
        thr = None if args.skip_throughput else throughput(Path(tmp), episodes, args.images, env, args.density,
                                                           args.logs, args.compare_executor)
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
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_table(result)
    return 0


def print_table(res: dict) -> None:
    print(f"{res['cpu_count']} CPUs, load average {res['load_average_at_start'][0]:.2f} at start; "
          f"ROS_DOMAIN_ID {res['ros_domain_id']}, {res['rmw']}, loopback only; bench {res['bench_s']:.0f} s.")
    t = res["throughput"]
    if t:
        print(f"\nThroughput: {t['episodes']} pointgoal episodes, expert, {t['scene']}, "
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
    print(f"\nImage latency: 224x224 rgb8 (150,528 bytes) between two processes at {IMAGE_RATE_HZ:g} Hz, "
          "receive - send wall time")
    head = f"{'QoS':<13}{'sent':>6}{'recv':>6}{'drops':>6}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    print(head)
    print("-" * len(head))
    names = {"graph": "graph (lock)", "sensor_data": "sensor_data"}
    for r in res["latency"]:
        fmt = lambda v: f"{v:>9.3f}" if v is not None else f"{'-':>9}"  # noqa: E731
        print(f"{names[r['qos']]:<13}{r['sent']:>6}{r['received']:>6}{r['dropped']:>6}"
              f"{fmt(r['p50_ms'])}{fmt(r['p95_ms'])}{fmt(r['p99_ms'])}{fmt(r['max_ms'])}")
    print("graph (lock) = airplay.nodes.common.LOCKSTEP_IMAGES (reliable, keep last 10), what the renderer uses "
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
