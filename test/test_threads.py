"""airplay.threads and ``airplay eval --threads``: the default count and the flag's while the
episodes fly (seen by the policy itself), the previous counts afterwards, the same results whatever
the count, and a clear error for a bad one."""

from __future__ import annotations

import json

import numba
import pytest

from airplay.cli import main
from airplay.threads import check_threads, compute_threads

THREAD_SPY = '''
"""The expert, noting the numba thread count it sees at every step."""
import numba

from airplay.policies.expert import ExpertNavigator

SEEN = set()


class Spy(ExpertNavigator):
    def select_action(self, obs):
        SEEN.add(numba.get_num_threads())
        return super().select_action(obs)


def make(world):
    return Spy(world)
'''


@pytest.fixture(scope="module")
def scenes(tiny_scenes):
    return tiny_scenes


@pytest.fixture
def spy(tmp_path, monkeypatch, scenes):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(scenes.parent / "cache"))
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "thread_spy.py").write_text(THREAD_SPY)
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    import importlib

    import thread_spy

    importlib.reload(thread_spy)
    return thread_spy


def _eval(scenes, out, *extra):
    return main(["eval", "--scenes", str(scenes), "--episodes", "2", "--seed", "3", "--out", str(out),
                 "--policy", "thread_spy:make", "--bootstrap", "0", "--no-progress", *extra])


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs a numba pool of 2 threads")
def test_eval_threads_default_and_flag_are_what_the_policy_sees(scenes, spy, tmp_path):
    """--no-images (like a learned policy): one thread by default; the experts' images: the renderer
    keeps numba's count; --threads N: N. The previous count comes back after each run."""
    before = numba.get_num_threads()
    numba.set_num_threads(2)
    seen = {}
    try:
        for name, extra in (("state-only", ("--no-images",)), ("images", ()), ("images-1", ("--threads", "1")),
                            ("state-only-2", ("--no-images", "--threads", "2"))):
            spy.SEEN.clear()
            assert _eval(scenes, tmp_path / name, *extra) == 0
            seen[name] = set(spy.SEEN)
            assert numba.get_num_threads() == 2, "the previous count comes back after the run"
    finally:
        numba.set_num_threads(before)
    assert seen == {"state-only": {1}, "images": {2}, "images-1": {1}, "state-only-2": {2}}
    # images rendered on 1 or 2 threads: the same flights
    one = [json.loads(line) for line in (tmp_path / "images-1" / "episodes.jsonl").read_text().splitlines()]
    two = [json.loads(line) for line in (tmp_path / "images" / "episodes.jsonl").read_text().splitlines()]
    for a, b in zip(one, two, strict=True):
        for key in ("task_id", "status", "steps", "path_length_m", "final_distance_m"):
            assert a[key] == b[key], key


def test_bad_thread_counts_are_refused(scenes, tmp_path, capsys):
    assert _eval(scenes, tmp_path / "bad", "--threads", "0") == 2
    assert "--threads must be >= 1" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            check_threads(bad)


def test_compute_threads_restores_numba_and_torch_counts():
    torch = pytest.importorskip("torch")
    numba_before, torch_before = numba.get_num_threads(), torch.get_num_threads()
    with compute_threads(1, torch_too=True):
        assert numba.get_num_threads() == 1 and torch.get_num_threads() == 1
    assert numba.get_num_threads() == numba_before and torch.get_num_threads() == torch_before
    with compute_threads(None):  # None: unchanged
        assert numba.get_num_threads() == numba_before
