"""``airplay eval --workers / --ray / --resume``: the same files as one uninterrupted process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airplay.cli import main
from airplay.eval.runner import RUN_FIELDS

EPISODES, SEED = 4, 3


@pytest.fixture(scope="module")
def scenes(tiny_scenes):
    """The tiny cube scene (tasks fly around a 4 m cube), its SDF cached."""
    return tiny_scenes


@pytest.fixture(autouse=True)
def _cache(scenes, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(scenes.parent / "cache"))


def _eval(scenes, out, *extra, episodes=EPISODES, seed=SEED):
    return main(["eval", "--scenes", str(scenes), "--episodes", str(episodes), "--seed", str(seed), "--out", str(out),
                 "--no-images", "--bootstrap", "50", "--no-progress", *extra])


@pytest.fixture(scope="module")
def reference(scenes, tmp_path_factory):
    """One uninterrupted run in this process."""
    out = tmp_path_factory.mktemp("reference") / "one"
    os.environ["AIRPLAY_CACHE_DIR"] = str(scenes.parent / "cache")
    assert _eval(scenes, out) == 0
    return out


def _summary_without_run_fields(out: Path) -> dict:
    doc = json.loads((out / "summary.json").read_text())
    for key in RUN_FIELDS:
        doc["meta"].pop(key)
    return doc


def assert_same_results(out: Path, reference: Path) -> None:
    assert (out / "episodes.jsonl").read_bytes() == (reference / "episodes.jsonl").read_bytes()
    assert _summary_without_run_fields(out) == _summary_without_run_fields(reference)
    assert (out / "tiny_trajectories.png").read_bytes() == (reference / "tiny_trajectories.png").read_bytes()
    mine = sorted(p.relative_to(out) for p in (out / "trajectories").rglob("*.npy"))
    assert mine == sorted(p.relative_to(reference) for p in (reference / "trajectories").rglob("*.npy"))
    assert len(mine) == EPISODES
    for p in mine:
        assert (out / p).read_bytes() == (reference / p).read_bytes()


def test_two_workers_write_what_one_process_writes(scenes, reference, tmp_path):
    lines = (reference / "episodes.jsonl").read_text().splitlines()
    assert [json.loads(line)["task_id"] for line in lines] == [f"tiny-pointgoal-{SEED}-{k}" for k in range(EPISODES)]
    assert _eval(scenes, tmp_path / "two", "--workers", "2") == 0
    assert_same_results(tmp_path / "two", reference)
    meta = json.loads((tmp_path / "two" / "summary.json").read_text())["meta"]
    assert meta["execution"] == {"engine": "process pool (2 workers)", "workers": 2, "resumed_episodes": 0}


def test_resume_drops_a_torn_line_and_flies_the_rest(scenes, reference, tmp_path, capsys):
    out = tmp_path / "partial"
    assert _eval(scenes, out, episodes=2) == 0  # a shorter run: the first 2 tasks
    ref_lines = (reference / "episodes.jsonl").read_bytes().splitlines(keepends=True)
    with open(out / "episodes.jsonl", "ab") as f:  # a repeated line, then one killed mid-write
        f.write(ref_lines[1])
        f.write(ref_lines[2][:40])
    (out / "summary.json").unlink()
    capsys.readouterr()
    assert _eval(scenes, out, "--resume") == 0
    printed = capsys.readouterr().out
    assert "2 of 4 episodes already flown (1 torn last line dropped); 2 to fly" in printed
    assert_same_results(out, reference)
    assert json.loads((out / "summary.json").read_text())["meta"]["execution"]["resumed_episodes"] == 2

    # A finished run resumed flies nothing and writes the same files.
    assert _eval(scenes, out, "--resume", "--workers", "2") == 0
    assert "4 of 4 episodes already flown; 0 to fly" in capsys.readouterr().out
    assert_same_results(out, reference)


def test_resume_refuses_other_settings_naming_file_and_field(scenes, reference, tmp_path, capsys):
    out = tmp_path / "other"
    shutil.copytree(reference, out)
    assert _eval(scenes, out, "--resume", seed=SEED + 1) == 2
    err = capsys.readouterr().err
    assert str(out / "eval_config.json") in err and "field 'seed' is 3 there but 4 in this run" in err
    assert _eval(scenes, out, "--resume", "--policy", "random") == 2
    assert "field 'policy'" in capsys.readouterr().err
    # Without eval_config.json (results of another writer): summary.json's meta, then each line.
    (out / "eval_config.json").unlink()
    assert _eval(scenes, out, "--resume", seed=SEED + 1) == 2
    assert "summary.json: field 'meta.seed'" in capsys.readouterr().err
    (out / "summary.json").unlink()
    assert _eval(scenes, out, "--resume", "--policy", "random") == 2
    assert f"{out / 'episodes.jsonl'}:1: field 'policy' is 'expert' there but 'random'" in capsys.readouterr().err
    assert _eval(scenes, out, "--resume", episodes=2) == 2
    assert "task 'tiny-pointgoal-3-2' is not among this run's 2 tasks" in capsys.readouterr().err
    assert (out / "episodes.jsonl").read_bytes() == (reference / "episodes.jsonl").read_bytes()  # untouched


def test_bad_scale_arguments_are_named(scenes, tmp_path, capsys, monkeypatch):
    assert _eval(scenes, tmp_path / "o", "--workers", "0") == 2
    assert "--workers must be an integer >= 1" in capsys.readouterr().err
    assert _eval(scenes, tmp_path / "o", "--workers", "2", "--runtime", "ros") == 2
    assert "--workers: not available for --runtime ros" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    assert _eval(scenes, tmp_path / "o", "--ray", "local") == 2
    assert "--ray needs the ray package" in capsys.readouterr().err


SLEEPY_POLICY = '''
"""The expert, sleeping 2 ms per step: episodes long enough to be killed in the middle of a run."""
import time

from airplay.policies.expert import ExpertNavigator


class Sleepy(ExpertNavigator):
    def select_action(self, obs):
        time.sleep(0.002)
        return super().select_action(obs)


def make(world):
    return Sleepy(world)
'''


@pytest.mark.slow
def test_a_killed_pool_run_resumes_to_the_uninterrupted_files(scenes, tmp_path, monkeypatch):
    """SIGKILL a 2-worker run (its process group) once 2 episodes are written; --resume then
    gives the files of one uninterrupted in-process run."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "sleepy_policy.py").write_text(SLEEPY_POLICY)
    monkeypatch.syspath_prepend(str(plugins))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")])}
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    episodes = 6
    args = ["--policy", "sleepy_policy:make"]
    reference = tmp_path / "reference"
    assert _eval(scenes, reference, *args, episodes=episodes) == 0
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "airplay.cli", "eval", "--scenes", str(scenes), "--episodes", str(episodes),
           "--seed", str(SEED), "--out", str(out), "--no-images", "--bootstrap", "50", "--no-progress",
           "--workers", "2", *args]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        journal = out / "episodes.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            if journal.is_file() and journal.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    lines = journal.read_bytes().count(b"\n")
    assert 2 <= lines < episodes and not (out / "summary.json").exists(), lines
    assert _eval(scenes, out, "--resume", "--workers", "2", *args, episodes=episodes) == 0
    ref_summary = reference
    assert (out / "episodes.jsonl").read_bytes() == (ref_summary / "episodes.jsonl").read_bytes()
    assert _summary_without_run_fields(out) == _summary_without_run_fields(reference)
    assert json.loads((out / "summary.json").read_text())["meta"]["execution"]["resumed_episodes"] == lines


@pytest.mark.slow
def test_ray_local_writes_what_one_process_writes(scenes, reference, tmp_path):
    pytest.importorskip("ray")
    assert _eval(scenes, tmp_path / "ray", "--ray", "local", "--workers", "2") == 0
    assert_same_results(tmp_path / "ray", reference)
