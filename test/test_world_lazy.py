"""World and Scene load their parts on first use: a process that never renders never reads the
splat, one that never plans never builds the grid or the BVH; each part is built once (also
under threads) and shared by replace()d Worlds; the checks of an eager load all still run."""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers.malformed_scenes import CASES, far_mesh
from helpers.scene_factory import write_tiny_scene

import airplay.scene.scene as scene_module
from airplay.scene import Scene, SceneError
from airplay.scene.camera import PinholeCamera, map_from_base, viewmat_from_pose
from airplay.scene.lazy import Lazy
from airplay.sim.sdf import SignedDistanceField
from airplay.tasks.navigable import NavigableGrid
from airplay.world.world import PARTS, World

NOT_A_PLY = b"GIF89a not a ply"


@pytest.fixture(scope="module")
def indoor(indoor_1, tmp_path_factory) -> tuple[Path, Path]:
    """(scene folder, cache folder): the synthetic indoor scene of seed 1 at 4 Gaussians/m^2,
    with its SDF in the cache folder (built once here; the copies below hit it: the key is the mesh)."""
    cache = tmp_path_factory.mktemp("lazy") / "cache"
    World.load(indoor_1, cache_dir=cache).sdf
    return indoor_1, cache


def copy_scene(indoor, tmp_path: Path) -> Path:
    """A copy of the indoor scene folder that a test may break."""
    return Path(shutil.copytree(indoor[0], tmp_path / "indoor_1"))


def a_free_point(world: World) -> np.ndarray:
    """(3,) map point (m) of a free cell of the planning grid."""
    cells = np.argwhere(world.grid.free)
    return world.grid.to_world(cells[len(cells) // 2])


def test_world_load_reads_only_scene_yaml(indoor, tmp_path):
    folder = copy_scene(indoor, tmp_path)
    world = World.load(folder, cache_dir=indoor[1])
    assert world.built_parts() == frozenset()
    assert world.name == "indoor_1" and world.scene.spec.camera.intrinsics.width > 0


def test_a_world_that_never_renders_never_reads_the_splat(indoor, tmp_path):
    folder = copy_scene(indoor, tmp_path)
    world = World.load(folder, cache_dir=indoor[1])
    (folder / "splat.ply").write_bytes(NOT_A_PLY)  # read after this point: the error below
    p = a_free_point(world)
    assert world.checker.collided(p[None]).tolist() == [False]
    assert world.sdf.query(p[None])[0] > world.vehicle.radius_m
    hits, faces = world.caster.first_hits(p[None], np.array([[1.0, 0.0, 0.0]]))
    assert faces[0] >= 0 and hits[0, 0] > p[0]  # the room's wall
    cam, mount = world.scene.spec.camera.intrinsics, world.scene.spec.camera.mount
    z = world.depth.depth(viewmat_from_pose(map_from_base(*p, 0.0), mount), cam.K, cam.width, cam.height)
    assert z.shape == (cam.height, cam.width) and np.isfinite(z).any()
    assert world.built_parts() == {"mesh", *PARTS}
    with pytest.raises(SceneError, match="not a PLY") as info:
        world.scene.gaussians
    assert info.value.path == folder / "splat.ply"
    with pytest.raises(SceneError, match="splat.ply"):
        world.camera_images(p, 0.0)


def test_a_world_that_only_renders_builds_no_grid_sdf_or_bvh(indoor, tmp_path):
    folder = copy_scene(indoor, tmp_path)
    cache = tmp_path / "cache"
    world = World.load(folder, cache_dir=cache)  # an SDF would be built here (no cache yet); none is
    rgb, depth = world.camera_images(np.array([5.0, 7.0, 1.5]), 0.3, backend="cpu")
    assert rgb.shape[2] == 3 and depth.shape[2] == 1 and rgb.std() > 0
    assert world.built_parts() == {"gaussians", "mesh", "depth"}
    assert list(cache.glob("sdf-*")) == []


def test_the_mesh_is_read_only_when_collision_geometry_is_wanted(indoor, tmp_path):
    folder = copy_scene(indoor, tmp_path)
    world = World.load(folder, cache_dir=indoor[1])
    (folder / "collision.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\n")  # no end_header
    with pytest.raises(SceneError, match="collision.ply"):
        world.sdf
    with pytest.raises(SceneError, match="collision.ply"):
        world.scene.gaussians  # the overlap check needs the mesh: the same error
    assert world.built_parts() == frozenset()


def test_parts_are_built_once_under_threads(indoor, tmp_path, monkeypatch):
    """Eight threads ask for every part at once; each is built (each file read) exactly once."""
    folder = copy_scene(indoor, tmp_path)
    calls = {"splat": 0, "mesh": 0, "sdf": 0, "grid": 0}
    lock = threading.Lock()

    def counted(name, function):
        def wrapper(*args, **kwargs):
            with lock:
                calls[name] += 1
            threading.Event().wait(0.05)  # widen the window in which a second build could start
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(scene_module, "load_gaussians", counted("splat", scene_module.load_gaussians))
    monkeypatch.setattr(scene_module, "load_collision_mesh", counted("mesh", scene_module.load_collision_mesh))
    monkeypatch.setattr(SignedDistanceField, "for_scene", counted("sdf", SignedDistanceField.for_scene))
    monkeypatch.setattr(NavigableGrid, "for_scene", counted("grid", NavigableGrid.for_scene))
    world = World.load(folder, cache_dir=indoor[1])
    names = ["gaussians", "mesh", *PARTS]
    barrier = threading.Barrier(8)
    seen: list[dict] = []

    def touch(order: list[str]) -> None:
        barrier.wait()
        got = {name: getattr(world.scene if name in ("gaussians", "mesh") else world, name) for name in order}
        with lock:
            seen.append(got)

    threads = [threading.Thread(target=touch, args=(names[i % len(names):] + names[:i % len(names)],))
               for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(seen) == 8
    assert calls == {"splat": 1, "mesh": 1, "sdf": 1, "grid": 1}
    for name in names:
        assert len({id(got[name]) for got in seen}) == 1, name
    assert world.built_parts() == set(names)


def test_replaced_worlds_share_parts_built_or_not(indoor, tmp_path, monkeypatch):
    folder = copy_scene(indoor, tmp_path)
    world = World.load(folder, cache_dir=indoor[1])
    grid, sdf = world.grid, world.sdf
    builds = []
    for cls in (SignedDistanceField, NavigableGrid):
        original = cls.for_scene
        monkeypatch.setattr(cls, "for_scene", lambda *a, _f=original, **k: builds.append(1) or _f(*a, **k))
    # as airplay.vln.evaluate does: another success radius, the same structures
    zero = replace(world, protocol=replace(world.protocol, success_radius_m=0.0))
    assert zero.grid is grid and zero.sdf is sdf and zero.checker is world.checker
    assert zero.protocol.success_radius_m == 0.0 and world.protocol.success_radius_m > 0.0
    # as airplay.data.collect_flight.world_with_camera does: another camera, the same files and structures
    spec = world.scene.spec
    small = replace(spec, camera=replace(spec.camera, intrinsics=PinholeCamera(32, 32, 16.0, 16.0, 16.0, 16.0)))
    other = replace(world, scene=replace(world.scene, spec=small))
    assert other.built_parts() == world.built_parts() == {"mesh", "sdf", "grid", "checker"}
    rgb, _ = other.camera_images(a_free_point(world), 0.0, backend="cpu")
    assert rgb.shape == (32, 32, 3)
    assert world.built_parts() == {"mesh", "gaussians", "sdf", "grid", "checker", "depth"}  # built via `other`
    assert other.scene.gaussians is world.scene.gaussians and other.depth is world.depth
    assert other.lod_hierarchy() is world.lod_hierarchy()  # one hierarchy per splat, as before
    assert builds == []


def test_the_overlap_error_still_names_the_splat(tmp_path):
    folder = write_tiny_scene(tmp_path / "apart")
    far_mesh(folder)
    world = World.load(folder, cache_dir=tmp_path / "cache")  # scene.yaml is fine: no error yet
    assert world.scene.mesh.bounds[0][0] > 400  # the mesh alone reads fine
    with pytest.raises(SceneError, match="do not overlap") as info:
        world.scene.gaussians
    assert info.value.path == folder / "splat.ply"
    with pytest.raises(SceneError, match="do not overlap"):
        world.camera_images(np.array([0.0, 0.0, 1.0]), 0.0)
    with pytest.raises(SceneError, match="do not overlap"):
        Scene.load(folder)  # eager, as `airplay scene check` uses it


@pytest.fixture(scope="module")
def valid_tiny(tmp_path_factory) -> Path:
    return write_tiny_scene(tmp_path_factory.mktemp("valid") / "scene")


def test_scene_load_is_eager_and_open_is_lazy(valid_tiny):
    assert Scene.load(valid_tiny).loaded_parts() == {"gaussians", "mesh"}
    opened = Scene.open(valid_tiny)
    assert opened.loaded_parts() == frozenset()
    assert len(opened.gaussians) == 400 and opened.loaded_parts() == {"gaussians", "mesh"}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_an_opened_scene_runs_every_check_of_a_loaded_one(case, valid_tiny, tmp_path):
    """Every malformed scene of test_scene_validation: Scene.open refuses what scene.yaml shows
    (its fields, missing files); the rest it refuses when the splat is first read, with
    the same error as Scene.load."""
    name, breaker, bad_file, words = case
    folder = Path(shutil.copytree(valid_tiny, tmp_path / "scene"))
    breaker(folder)
    with pytest.raises(SceneError) as eager:
        Scene.load(folder)
    seen_in_yaml = bad_file == "scene.yaml" or words == "file not found"
    if seen_in_yaml:
        with pytest.raises(SceneError) as lazy:
            Scene.open(folder)
    else:
        scene = Scene.open(folder)
        with pytest.raises(SceneError) as lazy:
            scene.gaussians
    assert str(lazy.value) == str(eager.value)
    assert bad_file in str(lazy.value) and words in str(lazy.value)


def test_lazy_builds_once_retries_after_a_failure_and_drops_its_builder():
    attempts = []

    def build():
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("not yet")
        return object()

    lazy = Lazy(build)
    with pytest.raises(OSError):
        lazy.get()
    assert not lazy.built
    value = lazy.get()
    assert lazy.built and lazy.get() is value and len(attempts) == 2
    assert lazy._build is None
    held = Lazy.of("x")
    assert held.built and held.get() == "x"
