"""`airplay collect`: expert flights -> episode bags, resumable, over a process pool and Ray."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from airplay.cli import main
from airplay.data.bag import iter_episode_bags, read_episode
from airplay.data.collect import collect
from airplay.data.collect_flight import world_with_camera
from airplay.data.collect_plan import LEDGER, SUMMARY, CollectConfig, CollectError, FlightJob, read_ledger
from airplay.policies import make_policy
from helpers.scene_factory import scene_yaml_dict, write_tiny_scene

SIZE = (32, 24)  # rendered width x height: small, so that the tests stay fast
ARGS = ["--per-scene", "3", "--seed", "3", "--image-size", f"{SIZE[0]}x{SIZE[1]}", "--depth", "--no-progress"]


pytestmark = pytest.mark.slow  # the module's fixtures make scenes and collect (~60 s)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    """Two tiny scenes (a 4 m cube in a 12 m square), one seen and one unseen."""
    root = tmp_path_factory.mktemp("collect_scenes")
    for name, split in (("cube_a", "seen"), ("cube_b", "unseen")):
        folder = write_tiny_scene(root / name, seed=1 if split == "seen" else 2)
        (folder / "scene.yaml").write_text(yaml.safe_dump(scene_yaml_dict(name=name, split=split), sort_keys=False))
    return root


@pytest.fixture(scope="module")
def reference(scenes, tmp_path_factory):
    """An uninterrupted in-process collection of both scenes (printed output, folder)."""
    out = tmp_path_factory.mktemp("collect_ref") / "bags"
    assert main(["collect", "--scenes", str(scenes), *ARGS, str(out)]) == 0
    return out


def actions_by_task(out: Path) -> dict[str, np.ndarray]:
    return {bag.name: read_episode(bag).action for bag in iter_episode_bags([out])}


def test_collect_writes_one_complete_bag_per_flight(scenes, reference, capsys):
    from airplay.world.env import AirPlayEnv
    from airplay.world import World
    from airplay.tasks.sampler import sample_tasks

    ledger = read_ledger(reference)
    assert len(ledger) == 6 and len((reference / LEDGER).read_text().splitlines()) == 6
    summary = json.loads((reference / SUMMARY).read_text())
    assert summary["splits"] == {"seen": ["cube_a"], "unseen": ["cube_b"]}
    assert summary["total"]["written"] + summary["total"]["rejected"] == 6
    assert summary["run"]["flown"] == 6 and summary["run"]["flights_per_s"] > 0
    bags = iter_episode_bags([reference])
    assert len(bags) == summary["total"]["written"] >= 5  # the expert rarely fails
    assert summary["total"]["frames"] == sum(r["frames"] for r in ledger.values() if r["written"])
    assert not list(reference.glob("*/.*.partial"))

    for scene in ("cube_a", "cube_b"):
        world = world_with_camera(World.load(scenes / scene), SIZE)
        tasks = sample_tasks(world.scene, world.grid, 3, 3, "pointgoal", world.protocol)
        for task in tasks:
            bag = reference / scene / task.task_id
            if not ledger[task.task_id]["written"]:
                assert not bag.exists()
                continue
            assert (bag / "metadata.yaml").is_file() and (bag / f"{task.task_id}_0.mcap").is_file()
            ep = read_episode(bag)
            steps = ep.metadata["steps"]
            assert ep.metadata["split"] == ("seen" if scene == "cube_a" else "unseen")
            assert ep.metadata["task_id"] == task.task_id and ep.metadata["source"] == "airplay collect"
            assert ep.metadata["success"] == (ep.metadata["status"] == "success")
            assert ep.rgb.shape == (steps, SIZE[1], SIZE[0], 3) and ep.rgb.dtype == np.uint8
            assert ep.depth.shape == (steps, SIZE[1], SIZE[0]) and ep.depth.dtype == np.float32
            assert ep.state.shape == (steps, 13) and ep.action.shape == (steps, 4)
            assert np.array_equal(ep.stamps_ns, np.arange(steps) * 20_000_000)
            np.testing.assert_allclose(ep.goal_position, task.goal_position)
            # What was recorded is what the environment does: replaying the recorded commands
            # from the task's start gives the recorded states, step for step.
            env = AirPlayEnv(world, "pointgoal", tasks=[task], render_images=False)
            env.reset(options={"task": task})
            for k in range(steps):
                np.testing.assert_allclose(ep.state[k], np.concatenate(
                    [env.vehicle.position[0], env.vehicle.quat_xyzw[0], env.vehicle.velocity[0],
                     env.vehicle.angular_velocity_body[0]]), atol=1e-9)
                _, _, _, _, info = env.step(ep.action[k])
            assert info["status"] == ep.metadata["status"]
            rgb, depth = world.camera_images(task.start_position, task.start_yaw, "cpu", depth=True)
            assert np.array_equal(ep.rgb[0], rgb) and np.array_equal(ep.depth[0], depth[..., 0])


def test_kill_mid_run_then_resume_gives_the_uninterrupted_set(scenes, reference, tmp_path):
    out = tmp_path / "bags"
    cmd = [sys.executable, "-m", "airplay.cli", "collect", "--scenes", str(scenes), *ARGS, "--workers", "2", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not list(out.glob("*/*/metadata.yaml")):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no bag published within 120 s"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the collector and its workers, mid-run
        proc.wait()
    before = {p.parent.name for p in out.glob("*/*/metadata.yaml")}
    assert 1 <= len(before) < 6
    # A writer killed while writing leaves a hidden partial folder; plant one for certain.
    stale = out / "cube_b" / ".cube_b-pointgoal-3-2.partial"
    stale.mkdir(parents=True, exist_ok=True)
    (stale / "cube_b-pointgoal-3-2_0.mcap").write_bytes(b"\x89MCAP0\r\n")

    summary = collect(CollectConfig(scenes=(scenes / "cube_a", scenes / "cube_b"), per_scene=3, out=out, seed=3,
                                    depth=True, image_size=SIZE), progress=False, make_expert=make_policy)
    assert summary["run"]["skipped_done"] >= len(before) and summary["run"]["removed_partials"] >= 1
    assert not list(out.glob("*/.*.partial"))
    lines = [json.loads(line)["task_id"] for line in (out / LEDGER).read_text().splitlines()]
    assert sorted(lines) == sorted(set(lines)) and len(lines) == 6  # no duplicates
    mine, ref = actions_by_task(out), actions_by_task(reference)
    assert sorted(mine) == sorted(ref)
    for task_id, actions in ref.items():
        assert np.array_equal(mine[task_id], actions), task_id  # same seed, same recorded actions

    # A rerun with everything done flies nothing; one with another camera size is refused.
    again = collect(CollectConfig(scenes=(scenes / "cube_a", scenes / "cube_b"), per_scene=3, out=out, seed=3,
                                  depth=True, image_size=SIZE), progress=False, make_expert=make_policy)
    assert again["run"]["flown"] == 0 and again["run"]["skipped_done"] == 6
    with pytest.raises(CollectError, match=r"collection.json: field 'image_size'"):
        collect(CollectConfig(scenes=(scenes / "cube_a",), per_scene=3, out=out, seed=3, depth=True,
                              image_size=(16, 16)), progress=False, make_expert=make_policy)


def test_failed_flights_are_rejected_and_counted(scenes, tmp_path, capsys):
    protocol = yaml.safe_load((Path(__file__).resolve().parents[1] / "config/protocol.yaml").read_text())
    protocol["time_limit"] = {"base_s": 0.5, "per_astar_m_s": 0.0}  # too short to arrive: every flight times out
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(protocol))
    base = ["collect", "--scenes", str(scenes / "cube_a"), "--per-scene", "2", "--seed", "3", "--image-size", "16x16",
            "--protocol", str(path), "--no-progress"]
    assert main([*base, str(tmp_path / "rejected")]) == 0
    printed = capsys.readouterr().out
    assert "timeout 2" in printed and "cube_a" in printed
    summary = json.loads((tmp_path / "rejected" / SUMMARY).read_text())
    assert summary["scenes"]["cube_a"]["rejected_by_reason"] == {"timeout": 2}
    assert summary["total"]["written"] == 0 and not iter_episode_bags([tmp_path / "rejected"])
    # Rejections are final: a rerun does not fly them again.
    rerun = collect(CollectConfig(scenes=(scenes / "cube_a",), per_scene=2, out=tmp_path / "rejected", seed=3,
                                  image_size=(16, 16), protocol=path), progress=False, make_expert=make_policy)
    assert rerun["run"]["flown"] == 0

    assert main([*base, "--keep-failures", str(tmp_path / "kept")]) == 0
    bags = iter_episode_bags([tmp_path / "kept"])
    assert len(bags) == 2
    ep = read_episode(bags[0])
    assert ep.metadata["status"] == "timeout" and ep.metadata["success"] is False
    assert len(ep.action) == ep.metadata["steps"] == 25  # 0.5 s at 50 Hz


def test_bad_input_is_refused_with_a_clear_error(scenes, tmp_path, capsys):
    assert main(["collect", "--scenes", str(scenes), "--per-scene", "-1", "--no-progress", str(tmp_path / "x")]) == 2
    assert "--per-scene must be >= 0" in capsys.readouterr().err
    (tmp_path / "y" / "cube_a" / "cube_a-pointgoal-0-0").mkdir(parents=True)
    assert main(["collect", "--scenes", str(scenes / "cube_a"), "--per-scene", "1", "--no-progress",
                 str(tmp_path / "y")]) == 2
    assert "is not a complete bag (no metadata.yaml)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["collect", "--scenes", str(scenes), "--image-size", "64", str(tmp_path / "z")])


def test_ray_local_runs_the_same_flights(scenes, reference, tmp_path):
    cfg = CollectConfig(scenes=(scenes / "cube_a",), per_scene=3, out=tmp_path / "ray", seed=3, depth=True,
                        image_size=SIZE, workers=2, ray_address="local")
    summary = collect(cfg, progress=False, make_expert=make_policy)
    assert summary["run"]["engine"] == "ray (local)" and summary["run"]["ray_nodes"] == ["127.0.0.1"]
    assert summary["run"]["flown"] == 3
    mine = actions_by_task(tmp_path / "ray")
    ref = {k: v for k, v in actions_by_task(reference).items() if k.startswith("cube_a-")}
    assert sorted(mine) == sorted(ref)
    for task_id, actions in ref.items():
        assert np.array_equal(mine[task_id], actions), task_id
    assert replace(cfg, ray_address=None).fixed() == cfg.fixed()


def test_worker_warm_up_leaves_no_pose_cell_and_changes_no_image(scenes, reference):
    """A worker's scene state renders one frame (loading the renderer's kernels) and computes the
    expert's wall penalty with the scene load; it empties the pose-cell cache after that frame, and
    the images of a flight are those of its poses alone: the recorded first frame of every task is
    the frame rendered at its start pose."""
    from airplay.data import collect_flight as c
    from airplay.render.lod.cells import _cell_cache

    c._CACHE.clear()
    job = FlightJob(scene_dir=str(scenes / "cube_a"), scene="cube_a", split="seen", index=0, task_id="",
                    per_scene=3, setting="pointgoal", seed=3, out="", depth=True, image_size=SIZE,
                    keep_failures=False, render_backend="cpu", threads=1, protocol=None, make_expert=make_policy)
    world, tasks, env, policy = c._scene_state(job)
    assert len(_cell_cache()) == 0 and policy.expert._penalty is not None
    for task in tasks:
        recorded = read_episode(reference / "cube_a" / task.task_id).rgb[0]
        assert np.array_equal(recorded, world.camera_images(task.start_position, task.start_yaw, "cpu",
                                                            depth=False)[0]), task.task_id
    c._CACHE.clear()
