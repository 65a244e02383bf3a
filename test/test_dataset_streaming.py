"""Training frames streamed from the frame cache (``ChunkDataset(memory_mb=...)``, ``airplay dagger
--frames-memory-gb``): the cache is written episode by episode, and batches read partly or wholly
from it are the batches of the all-in-memory dataset."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from airplay.data.lerobot import LeRobotWriter
from airplay.policies.dataset import ChunkDataset, load_lerobot_episodes

SIZE = 16
LENGTHS = (7, 12, 5, 9)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("streaming") / "demos"
    rng = np.random.default_rng(0)
    with LeRobotWriter(root, image_shape=(24, 24)) as writer:
        for t in LENGTHS:
            writer.add_episode(rng.integers(0, 255, (t, 24, 24, 3), dtype=np.uint8),
                               rng.normal(size=(t, 13)).astype(np.float32), rng.normal(size=(t, 4)).astype(np.float32),
                               goal=rng.normal(size=(t, 3)).astype(np.float32))
    return root


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("AIRPLAY_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "streaming_cache"))


def test_the_frame_cache_is_the_decoded_frames_and_says_where_they_lie(dataset):
    decoded, _ = load_lerobot_episodes(dataset, SIZE, cache=False)
    first, _ = load_lerobot_episodes(dataset, SIZE)  # writes the cache
    again, _ = load_lerobot_episodes(dataset, SIZE)  # reads it
    for a, b, c in zip(decoded, first, again):
        np.testing.assert_array_equal(a.rgb, b.rgb)
        np.testing.assert_array_equal(a.rgb, c.rgb)
        assert a.rgb_file is None and c.rgb_file is not None
        path, offset = c.rgb_file
        with open(path, "rb") as f:
            f.seek(offset)
            frame = np.frombuffer(f.read(SIZE * SIZE * 3), np.uint8).reshape(SIZE, SIZE, 3)
        np.testing.assert_array_equal(frame, a.rgb[0])


@pytest.mark.parametrize("frames_in_memory", [0, 15, 33])
def test_batches_read_from_disk_are_the_in_memory_batches(dataset, frames_in_memory):
    episodes, _ = load_lerobot_episodes(dataset, SIZE)
    everything = ChunkDataset(episodes, SIZE, n_obs_steps=2, chunk_size=3, goal="point")
    streamed = ChunkDataset(episodes, SIZE, n_obs_steps=2, chunk_size=3, goal="point",
                            memory_mb=frames_in_memory * SIZE * SIZE * 3 / 2 ** 20)
    assert everything.frames_on_disk == 0
    assert len(streamed.images) <= frames_in_memory and streamed.frames_on_disk == sum(LENGTHS) - len(streamed.images)
    index = torch.as_tensor(np.random.default_rng(1).integers(0, sum(LENGTHS), 64))
    for copy in (streamed, pickle.loads(pickle.dumps(streamed))):  # file descriptors reopen after a pickle
        a, b = everything.batch(index), copy.batch(index)
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), key


def test_the_dagger_round_records_its_peak_resident_memory():
    from airplay.policies.dagger import _peak_rss_mb, _reset_peak_rss

    _reset_peak_rss()
    peak = _peak_rss_mb()
    assert peak is None or peak > 0
