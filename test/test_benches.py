"""Every benchmark under ``bench/`` runs in its ``--quick`` mode and prints its figures (issue 44).

A bench that nothing runs rots: ``bench/graph.py`` imported a QoS profile renamed weeks before.
Each runnable bench has a ``--quick`` mode (the same code path at tiny sizes: few episodes or
steps, tiny scenes, images and models; seconds, not minutes) and is run here as a user runs it,
``python bench/NAME.py --quick [--json]``, in a subprocess: the exit status must be 0 and the
output must hold the bench's figures (its ``--json`` object where it has one, parsed; else the
lines of its table), finite. The figures themselves are not judged: quick runs are too short.

:data:`QUICK` lists what each bench is run with and how its output is read; :data:`HELPERS` the
files under bench/ that are not benchmarks, and :data:`ELSEWHERE` the benches whose ``--quick``
another test runs. A new file under bench/ in none of them fails
:func:`test_every_bench_has_a_quick_run`.

The runs share one temporary folder (their working directory and ``TMPDIR``: nothing is
written into the repository) and one sparse scene, and run two at a time (the selected ones
start when the first test of the module asks; each test waits for its own), so that the module
takes about two minutes on 2 cores. ROS benches get the loopback DDS settings and a ROS domain
of their own. The runs are marked ``slow``; the coverage checks (no bench without a quick run)
are not, and take milliseconds.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import random_ros_domain, sparse_indoor_scene

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
JOBS = 2
"""Benches run at once (the development machine's cores)."""
TIMEOUT_S = 420
"""Seconds one quick run may take (they take 2-60 s on 2 idle cores; two at a time, on a loaded machine
several times that)."""
SKIPPED = 77
"""The exit status of a bench that cannot run here and says why (verify_lerobot.py: its venv is not cached)."""

HELPERS = {
    "benchlib.py": "helpers imported by the benches",
}
"""Files under bench/ that are not benchmarks, and why."""

ELSEWHERE = {
    "hil.py": ("test_px4_hil.py", "flies PX4 SITL in a network namespace: the sitl test runs its --quick"),
    "sitl_failures.py": ("test_px4_sitl.py", "flies PX4 SITL in a network namespace: test_px4_gps_loss runs its "
                                             "--quick"),
}
"""Benches whose ``--quick`` another test runs (file under test/, why not here)."""


# ---------------------------------------------------------------------------------------------
# Reading the output


def finite(value, what: str, positive: bool = False) -> float:
    assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{what}: {value!r} is not a number"
    assert math.isfinite(value), f"{what}: {value!r} is not finite"
    if positive:
        assert value > 0, f"{what}: {value!r} is not > 0"
    return float(value)


def json_object(out: str) -> dict:
    """The one JSON object a bench printed on stdout (its first ``{`` to the end)."""
    start = out.find("{")
    assert start >= 0, f"no JSON object in the output:\n{out[-3000:]}"
    return json.loads(out[start:])


def numbers(pattern: str, out: str) -> list[float]:
    """The groups of the first match of ``pattern`` in ``out``, as finite numbers."""
    m = re.search(pattern, out, re.MULTILINE)
    assert m, f"no line matches {pattern!r} in the output:\n{out[-3000:]}"
    return [finite(float(g), f"{pattern!r} group {i}") for i, g in enumerate(m.groups(), 1)]


def check_action_spaces(out: str, tmp: Path) -> None:
    for variant in ("velocity", r"waypoint:10:5"):
        r2 = numbers(rf"^\| {variant} \| \d+/1 \| ([-\d.]+), ([-\d.]+), ([-\d.]+), ([-\d.]+) \| \d+ \|$", out)
        assert all(x <= 1.0 for x in r2), r2
    numbers(r"^\| recorded waypoints .* \| \d+/1 \| largest distance from the flight ([\d.]+)-([\d.]+) m", out)


def check_collect(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"] and len(res["rows"]) == 1
    row = res["rows"][0]
    assert row["flights"] == row["written"] == 2, row
    for key in ("flights_per_s_per_core", "flights_per_s_wall", "ratio_to_target", "cpu_ms_per_step", "mb_per_flight"):
        finite(row[key], key, positive=True)
    assert {c["compression"] for c in res["compression"]} >= {"none", "lz4"}
    for c in res["compression"]:
        finite(c["time_vs_rosbags"], f"{c['compression']} time_vs_rosbags", positive=True)
    assert res["compression"][-1]["writer"].startswith("rosbags")  # the reference, in the same run
    finite(res["render_stages"]["ms_per_frame"]["total"], "render stages total", positive=True)


def check_dagger_rollout(out: str, tmp: Path) -> None:
    steps, ms = numbers(r"torch 1 thread: (\d+) steps, ([\d.]+) ms/step = render", out)
    assert steps > 0 and ms > 0
    for threads in (1, 2):
        numbers(rf"^CameraBatch, 8 views a call, {threads} thread\(s\): ([\d.]+) ms/view", out)
    single, batched = numbers(r"^Batched evaluation, .* batch 1 ([\d.]+) ms CPU/step .* batch \d+ ([\d.]+) ms CPU/step",
                              out)
    assert single > 0 and batched > 0 and "outcomes equal: yes" in out
    numbers(r"^Batched DAgger flights, .* one at a time ([\d.]+) ms CPU/step .* batch \d+ ([\d.]+) ms CPU/step", out)
    assert "files equal: yes" in out


def check_eval_workers(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"] and [r["policy"] for r in res["rows"]] == ["expert"]
    row = res["rows"][0]
    assert row["episodes"] == 2 and row["workers"] == 2 and row["steps"] > 0
    assert row["identical"], "episodes.jsonl of 2 processes differs from one process's"
    for key in ("one_process_s", "n_processes_s", "speedup"):
        finite(row[key], key, positive=True)


def check_graph(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"]
    t = res["throughput"]
    assert t["episodes"] == 1 and t["same_outcomes"], t
    assert t["graph"]["control_steps"] == t["inprocess"]["control_steps"] > 0
    finite(t["ratio"], "graph / in-process ratio", positive=True)
    for name, node in t["startup"]["nodes"].items():
        assert node["exit_code"] is not None, name
        finite(node["ready_s"], f"{name} ready_s", positive=True)
        finite(node["peak_rss_mib"], f"{name} peak RSS", positive=True)
    assert [r["qos"] for r in res["latency"]] == ["graph", "sensor_data"]
    for r in res["latency"]:
        assert r["sent"] == 50 and r["received"] > 0, r
        finite(r["p50_ms"], f"{r['qos']} p50", positive=True)


def check_odom_round_trip(out: str, tmp: Path) -> None:
    episodes, n, d64, _, d32, _, worst = numbers(
        r"^(\d+) episodes, (\d+) observations: the float64 state read back from odom differs in (\d+) "
        r"\(([\d.]+) %\), the float32 observation state in (\d+) \(([\d.]+) %\); largest difference ([\d.e+-]+)$", out)
    assert episodes == 1 and n > 0 and d64 <= n and d32 <= n and worst < 1e-9


def check_policy(out: str, tmp: Path) -> None:
    res = json_object(out)
    cpu = [(r["config"], r["policy"]) for r in res["rows"] if r["device"] == "cpu"]
    assert res["quick"] and cpu == [(c, p) for c in ("paper", "benchmark") for p in ("cnn_bc", "act", "dp")], cpu
    assert res["threads"] == 1 and res["meta"]["benchmark"] == "policy"
    for r in res["rows"]:
        assert r["image_size"] == (224 if r["config"] == "paper" else 64)
        finite(r["params_M"], f"{r['policy']} params_M", positive=True)
        for key in ("per_call_ms", "per_control_ms"):
            for stat in ("p50", "p95", "max", "mean"):
                finite(r[key][stat], f"{r['policy']} {key} {stat}", positive=True)
            assert r[key]["p50"] <= r[key]["p95"] <= r[key]["max"]
        assert r["fits_period_every_step"] == (r["per_control_ms"]["max"] <= res["control_period_ms"])


def check_policy_experiment(out: str, tmp: Path) -> None:
    folder = tmp / "runs" / "policy_experiment" / "out"
    res = json.loads((folder / "results.json").read_text())
    assert set(res["rows"]) == {"cnn_bc", "cnn_bc_dagger", "expert"}, list(res["rows"])
    for name, row in res["rows"].items():
        for split in ("train_scenes_new_tasks", "unseen_scenes"):
            assert row[split]["episodes"] == 1
            for key in ("sr", "spl", "cr"):
                assert 0.0 <= finite(row[split][key], f"{name} {split} {key}") <= 1.0
    assert (folder / "report.html").stat().st_size > 0 and (folder / "sr_vs_flights.png").is_file()
    assert "| expert |" in out and "written" in out


def check_rehearsal(out: str, tmp: Path) -> None:
    _task, astar, closest = numbers(r"^\| (\d+) \| ([\d.]+) \| - \| \w+ \| ([\d.]+) \| [-\d.]+ \| [-\d /]+ \|$", out)
    assert astar > 0 and closest >= 0
    _reached, flown = numbers(r"^rehearsal: (\d+) of (\d+) reached", out)
    assert flown == 1


def check_render(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"] and not res["skipped"] and [r["scene"] for r in res["scenes"]] == ["synthetic-urban"]
    row = res["scenes"][0]
    for key in ("cpu_fps", "cpu_ms_mean", "reference_fps", "ratio"):
        finite(row[key], key, positive=True)
    assert finite(row["max_rgb_diff_vs_reference_255"], "max RGB diff") < 1.0  # the reference, in the same run
    [lod] = res["lod"]
    finite(lod["speedup_vs_exact"], "LOD speed-up", positive=True)
    finite(lod["psnr_db_mean"], "LOD PSNR", positive=True)


def check_sim(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"] and res["pybullet_error"] is None, res.get("pybullet_error")
    engines = {r["engine"] for r in res["rows"]}
    assert engines == {"ours", "pybullet"}, engines
    for r in res["rows"]:
        finite(r["rate"], f"{r['engine']} x {r['vehicles']} rate", positive=True)
    finite(res["ratio_single"], "ratio to pybullet", positive=True)
    finite(res["agreement"]["max_velocity_diff_m_s"], "velocity agreement")


def check_vector_env(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"] and {r["n"] for r in res["rows"]} == {1, 16} and len(res["rows"]) == 6
    for r in res["rows"]:
        finite(r["sequential"], "sequential rate", positive=True)
        finite(r["vector"]["rate"], "vector rate", positive=True)
        finite(r["ratio"], "ratio to sequential", positive=True)
    finite(res["target"]["rate"], "target row rate", positive=True)


def check_verify_lerobot(out: str, tmp: Path) -> None:
    res = json.loads((tmp / "runs" / "verify_lerobot" / "report.json").read_text())
    assert res["exit"] == 0 and len(res["reports"]) == 2, res
    synthetic, native = res["reports"]
    assert synthetic["ok"] and native["ok"], [c for r in res["reports"] for c in r["checks"] if not c["ok"]]
    assert synthetic["frames_checked"] == 15  # 5 of each of the 3 episodes
    finite(synthetic["video_error"]["worst_psnr_db"], "worst PSNR", positive=True)


def check_scene_import(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"] and [r["category"] for r in res["rows"]] == ["urban"]
    row = res["rows"][0]
    for key in ("chamfer_mean_cm", "chamfer_p95_cm", "occupancy_iou", "collision_agreement",
                "derived_free_truly_colliding", "up_error_deg", "scale_error_pct", "import_s"):
        finite(row[key], key)
    assert row["up_error_deg"] < 2.0 and row["scale_error_pct"] < 2.0


def check_vln(out: str, tmp: Path) -> None:
    res = json_object(out)
    assert res["quick"] and res["steps"] == 3
    assert set(res["rows"]) == {"prompt + parse only", "transformers backend", "openai backend (local server)"}
    for name, row in res["rows"].items():
        for key in ("median_ms", "p95_ms", "steps_per_s", "ratio_to_prompt_only"):
            finite(row[key], f"{name} {key}", positive=True)


# ---------------------------------------------------------------------------------------------
# The runs


@dataclass(frozen=True)
class Quick:
    args: tuple[str, ...]
    """After ``python bench/NAME.py``: ``--quick`` and the rest. ``{tmp}``: the run's own folder;
    ``{scene}``: the module's sparse scene."""
    check: Callable[[str, Path], None]
    ros: bool = False
    """Starts rclpy nodes: gets a ROS domain of its own."""
    env: dict = field(default_factory=dict)


QUICK = {
    "action_spaces.py": Quick(("--quick",), check_action_spaces),
    "collect.py": Quick(("--quick", "--json"), check_collect),
    "dagger_rollout.py": Quick(("--quick", "--scene", "{scene}"), check_dagger_rollout),
    "eval_workers.py": Quick(("--quick", "--json"), check_eval_workers),
    "graph.py": Quick(("--quick", "--json"), check_graph, ros=True),
    "odom_round_trip.py": Quick(("--quick",), check_odom_round_trip),
    "policy.py": Quick(("--quick", "--json"), check_policy),
    "policy_experiment.py": Quick(("--quick", "--out", "{tmp}/out"), check_policy_experiment),
    "rehearsal.py": Quick(("--quick", "--scene", "{scene}", "--logs", "{tmp}/logs"), check_rehearsal, ros=True),
    "render.py": Quick(("--quick", "--json"), check_render),
    "scene_import.py": Quick(("--quick", "--json"), check_scene_import),
    "sim.py": Quick(("--quick", "--json"), check_sim),
    "vector_env.py": Quick(("--quick", "--json", "--scene", "{scene}"), check_vector_env),
    "verify_lerobot.py": Quick(("--quick", "--json", "{tmp}/report.json"), check_verify_lerobot),
    "vln.py": Quick(("--quick", "--json"), check_vln),
}
"""Every runnable bench: its quick command line and how its output is read."""

LONGEST_FIRST = ["policy_experiment.py", "graph.py", "rehearsal.py", "action_spaces.py", "dagger_rollout.py",
                 "eval_workers.py", "verify_lerobot.py", "vector_env.py"]
"""Started first, so that two workers finish together (the rest take under 10 s each)."""


@dataclass
class Run:
    command: list[str]
    returncode: int
    output: str
    """stdout then stderr."""
    stdout: str
    seconds: float

    def describe(self) -> str:
        return f"$ {' '.join(self.command)}\nexit {self.returncode} after {self.seconds:.1f} s\n{self.output[-6000:]}"


class Runner:
    """Runs the selected benches' quick modes, ``JOBS`` at a time, from the first ``result`` call on."""

    def __init__(self, names: list[str], tmp: Path, scene: Callable[[], Path]) -> None:
        self.names, self.tmp, self.scene = names, tmp, scene
        self.lock = threading.Lock()
        self.futures: dict[str, Future] = {}
        self.pool: ThreadPoolExecutor | None = None

    def result(self, name: str) -> Run:
        with self.lock:
            if self.pool is None:
                scene = self.scene()  # once, before any run wants it
                self.pool = ThreadPoolExecutor(JOBS, thread_name_prefix="bench")
                order = sorted(self.names, key=lambda n: (LONGEST_FIRST + [n]).index(n))
                for n in order:
                    self.futures[n] = self.pool.submit(self._run, n, scene)
            future = self.futures.get(name) or self.pool.submit(self._run, name, self.scene())
        return future.result()

    def _run(self, name: str, scene: Path) -> Run:
        folder = self.tmp / "runs" / name.removesuffix(".py")
        (folder / "tmp").mkdir(parents=True, exist_ok=True)
        quick = QUICK[name]
        command = [sys.executable, str(BENCH / name),
                   *(a.format(tmp=folder, scene=scene) for a in quick.args)]
        env = {**os.environ, "TMPDIR": str(folder / "tmp"), "PYTHONUNBUFFERED": "1",
               "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
               "FASTDDS_DEFAULT_PROFILES_FILE": str(REPO / "config" / "fastdds_localhost.xml"),
               "FASTRTPS_DEFAULT_PROFILES_FILE": str(REPO / "config" / "fastdds_localhost.xml"), **quick.env}
        if quick.ros:
            env["ROS_DOMAIN_ID"] = random_ros_domain()
        t0 = time.monotonic()
        try:
            done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, check=False)
            code, stdout, stderr = done.returncode, done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            code = None
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Run(command, -1 if code is None else code, stdout + "\n--- stderr\n" + stderr, stdout,
                   time.monotonic() - t0)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def runner(request, tmp_path_factory):
    """The module's runs: those of the ``test_quick`` cases selected in this session."""
    selected = [item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and getattr(item, "originalname", "") == "test_quick"
                and hasattr(item, "callspec")]
    tmp = tmp_path_factory.mktemp("benches")
    made: list[Path] = []

    def scene() -> Path:
        if not made:
            made.append(quick_scene(tmp / "scenes" / "indoor_1"))
        return made[0]

    r = Runner(selected, tmp, scene)
    yield r
    r.close()


def quick_scene(folder: Path) -> Path:
    """The sparse ``indoor_1`` of the ROS graph tests (4 Gaussians/m^2, SDF cached) with a 64x64 camera
    (the same field of view): what a rehearsal renders in real time at 50 Hz beside another bench."""
    import yaml

    sparse_indoor_scene(folder)
    spec = yaml.safe_load((folder / "scene.yaml").read_text())
    cam, scale = spec["camera"], 64 / spec["camera"]["width"]
    cam.update(width=64, height=64, fx=cam["fx"] * scale, fy=cam["fy"] * scale, cx=cam["cx"] * scale,
               cy=cam["cy"] * scale)
    (folder / "scene.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return folder


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a test waits for its run, queued behind others on a loaded machine
@pytest.mark.parametrize("name", sorted(QUICK))
def test_quick(runner, name):
    run = runner.result(name)
    print(f"bench/{name} --quick: exit {run.returncode} in {run.seconds:.1f} s")  # shown with -s or on failure
    if run.returncode == SKIPPED:
        pytest.skip(f"bench/{name} cannot run here: {run.output.strip()[-500:]}")
    assert run.returncode == 0, run.describe()
    try:
        QUICK[name].check(run.stdout, runner.tmp)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{run.describe()}") from None


# ---------------------------------------------------------------------------------------------
# Coverage


def bench_files() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py"))


def defines_quick(path: Path) -> bool:
    """Whether the script's source adds a ``--quick`` command-line option (``add_argument("--quick", ...)``)."""
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value == "--quick" for a in node.args)):
            return True
    return False


def test_every_bench_has_a_quick_run():
    """Each file under bench/ is run here (QUICK), by another test (ELSEWHERE) or not a bench (HELPERS)."""
    files = bench_files()
    listed = set(QUICK) | set(ELSEWHERE) | set(HELPERS)
    assert not set(QUICK) & set(HELPERS) and not set(ELSEWHERE) & (set(QUICK) | set(HELPERS))
    missing = [f for f in files if f not in listed]
    assert not missing, (f"bench/{', bench/'.join(missing)}: give it a --quick mode (seconds: the same code path at "
                         "tiny sizes) and add it to QUICK in test/test_benches.py, or to HELPERS with the reason "
                         "it is not a benchmark")
    stale = sorted(listed - set(files))
    assert not stale, f"test/test_benches.py names benches that are gone: {stale}"
    assert all(reason.strip() for reason in HELPERS.values())


@pytest.mark.parametrize("name", sorted(QUICK) + sorted(ELSEWHERE))
def test_bench_defines_quick(name):
    assert defines_quick(BENCH / name), f"bench/{name} has no --quick option"
    assert "--quick" in QUICK[name].args if name in QUICK else True


@pytest.mark.parametrize("name", sorted(ELSEWHERE))
def test_elsewhere_runs_the_quick_mode(name):
    """The test named in ELSEWHERE runs ``bench/NAME --quick``."""
    test_file, why = ELSEWHERE[name]
    source = (REPO / "test" / test_file).read_text()
    assert why and f'"{name}"' in source and '"--quick"' in source, f"test/{test_file} does not run bench/{name} --quick"
