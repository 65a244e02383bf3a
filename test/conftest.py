"""Test-wide settings: DDS confined to loopback for every rclpy process the tests start; the
scenes several modules fly, built once per session (``indoor_1``, ``indoor_2`` with ``scene_cache``,
``tiny_scenes``). A test that changes its scene folder builds its own."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
REAL_DATA = REPO.parent / "shared" / "data" / "real"

# Set before any test imports rclpy; subprocesses inherit them.
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(REPO / "config" / "fastdds_localhost.xml")
os.environ["FASTRTPS_DEFAULT_PROFILES_FILE"] = os.environ["FASTDDS_DEFAULT_PROFILES_FILE"]  # what Fast DDS 2.x reads
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


# A SITL module's first test waits for its fixture to fly every scenario of the group (PX4's
# 10 took 316 s with two busy loops beside them), hence a limit above the default 600 s.
SITL_TIMEOUT_S = 1800


# Whole modules over ~5 s a test that carry no pytestmark of their own: the bridge's tests fly
# the rehearsal vehicle in wall-clock time (4-9 s a test on 2 loaded cores).
SLOW_MODULES = {"test_mavlink_link.py", "test_mavlink_node.py"}


def pytest_collection_modifyitems(config, items):
    """Markers that follow from what a test uses: ``ros`` for a test taking ``own_ros_domain``
    (it starts a graph over DDS), ``slow`` for the tests of ``SLOW_MODULES``, and a per-test
    timeout of ``SITL_TIMEOUT_S`` for ``sitl``."""
    for item in items:
        if item.path.name in SLOW_MODULES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if "own_ros_domain" in getattr(item, "fixturenames", ()) and item.get_closest_marker("ros") is None:
            item.add_marker(pytest.mark.ros)
        if item.get_closest_marker("sitl") is not None and item.get_closest_marker("timeout") is None:
            if config.pluginmanager.hasplugin("timeout"):
                item.add_marker(pytest.mark.timeout(SITL_TIMEOUT_S))


SITL_UDP_PORTS = (14540, 14550, 19410)
"""UDP ports the SITL tests bind on 127.0.0.1: PX4's offboard and GCS links and SIH's true state."""


def dds_ports(domain: int) -> range:
    """The UDP ports Fast DDS may bind for ROS_DOMAIN_ID ``domain``: the RTPS well-known ports
    7400 + 250 x domain (discovery multicast) up to the next domain's block (unicast discovery and
    user traffic at offsets 10 and 11 plus 2 per participant)."""
    return range(7400 + 250 * domain, 7400 + 250 * (domain + 1))


def random_ros_domain() -> str:
    """A ROS_DOMAIN_ID for one graph: 1..101, the range ROS 2 documents as safe on Linux
    (higher ids can collide with the kernel's ephemeral ports), less the domains whose DDS ports
    hold a SITL port (28: 14540 and 14550; 48: 19410, where DDS's first participant binds
    19410 and 19411 and PX4's truth listener then cannot)."""
    import random

    allowed = [d for d in range(1, 102) if not any(port in dds_ports(d) for port in SITL_UDP_PORTS)]
    return str(random.SystemRandom().choice(allowed))


def unshare_permitted() -> bool:
    """Whether this process may make a network namespace with its loopback up (root, or user
    namespaces allowed): ``unshare -n bash -c 'ip link set lo up'``."""
    try:
        res = subprocess.run(["unshare", "-n", "bash", "-c", "ip link set lo up"], check=False, capture_output=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return res.returncode == 0


@contextmanager
def busy_loops(n: int) -> Iterator[int]:
    """``n`` busy processes (``while True: pass``) for the block: a loaded machine. Yields ``n``."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for proc in loops:
            proc.kill()
            proc.wait(timeout=10)


def descendants(pid: int) -> list[int]:
    """The ids of ``pid``'s child processes, and theirs (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a reaper (containers without init)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def sparse_indoor_scene(folder: Path) -> Path:
    """The synthetic indoor scene of seed 1 at 4 Gaussians/m^2 in ``folder`` (named indoor_1),
    with its disk-cached SDF built, so that the processes a test starts do not all build it."""
    from airplay.scene.synthetic import make_scene
    from airplay.world import World

    make_scene("indoor", 1, folder, gaussians_per_m2=4, name="indoor_1")
    World.load(folder).sdf  # builds the disk-cached SDF (World.load alone reads only scene.yaml)
    return folder


def stop_process_trees(procs, nodes: set[int], sig: int = signal.SIGINT, wait_s: float = 10.0) -> None:
    """Stop a graph: send ``sig`` to each running process of ``procs`` (None entries are
    skipped) after adding its descendants to ``nodes``, kill any that has not exited within
    ``wait_s``, then SIGKILL every id in ``nodes`` still alive (nodes a launcher left behind)."""
    procs = [p for p in procs if p is not None]
    for proc in procs:
        if proc.poll() is None:
            nodes.update(descendants(proc.pid))
            proc.send_signal(sig)
    for proc in procs:
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    for pid in nodes:  # anything left of the graph, by id
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def indoor_1(tmp_path_factory) -> Path:
    """:func:`sparse_indoor_scene` built once per test session (the folder ``indoor_1``, alone in
    its parent, its SDF in airplay's cache where the processes a test starts find it). Shared by
    every module that flies this scene: read it, never change it (a test that edits its scene
    folder builds its own)."""
    return sparse_indoor_scene(tmp_path_factory.mktemp("scenes") / "indoor_1")


@pytest.fixture(scope="session")
def scene_cache(tmp_path_factory) -> Path:
    """One cache folder (SDFs, level-of-detail trees) for the session's shared scenes: pass it as
    ``World.load(..., cache_dir=scene_cache)``; a field at a given resolution is built once per session."""
    return tmp_path_factory.mktemp("scene-cache")


@pytest.fixture(scope="session")
def indoor_2(tmp_path_factory) -> Path:
    """The synthetic indoor scene of seed 2 at 4 Gaussians/m^2 (folder ``indoor``), built once per
    test session; load it with ``cache_dir=scene_cache``. Read it, never change it."""
    from airplay.scene.synthetic import make_scene

    folder = tmp_path_factory.mktemp("indoor-2") / "indoor"
    make_scene("indoor", 2, folder, gaussians_per_m2=4)
    return folder


@pytest.fixture(scope="session")
def tiny_scenes(tmp_path_factory) -> Path:
    """A scenes folder holding the tiny cube scene alone (``tiny``, test/helpers/scene_factory.py),
    built once per test session; the modules that use it put airplay's cache beside it
    (``tiny_scenes.parent / "cache"``), so its SDF is built once too. Read it, never change it."""
    from helpers.scene_factory import write_tiny_scene

    root = tmp_path_factory.mktemp("tiny-scenes")
    write_tiny_scene(root / "scenes" / "tiny")
    return root / "scenes"


@pytest.fixture
def own_ros_domain(monkeypatch):
    """A ROS domain of our own for one test: other graphs may run on this machine's loopback
    at the same time. Modules that start graphs use it for every test with
    ``pytestmark = pytest.mark.usefixtures("own_ros_domain")``."""
    monkeypatch.setenv("ROS_DOMAIN_ID", random_ros_domain())


@pytest.fixture
def real_data() -> Path:
    """../shared/data/real, or skip with the reason."""
    if not REAL_DATA.is_dir():
        pytest.skip(f"real 3DGS samples not present at {REAL_DATA} (see ../shared/data/real/README.md)")
    return REAL_DATA


@pytest.fixture(scope="session")
def tiny_vl_model(request, tmp_path_factory) -> Path:
    """The tiny fine-tuned Qwen2.5-VL of the VLN tests (test/helpers/vln_tiny.py), built once, cached on disk
    in pytest's cache; in this session's temporary folder where the cache is off (``-p
    no:cacheprovider``: the second pytest of ``make test``, which runs beside the first)."""
    pytest.importorskip("transformers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from helpers.vln_tiny import tiny_vl_model as build

    cache = getattr(request.config, "cache", None)
    folder = cache.mkdir("airplay-tiny-vl") if cache is not None else tmp_path_factory.mktemp("airplay-tiny-vl")
    return build(folder)
