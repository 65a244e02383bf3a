"""config/foxglove_layout.json, the Foxglove layout for the recorded MCAP bags: valid JSON whose
mosaic names exactly its panels, and whose topics are the ones our bags hold (the bag layout of
airplay.data.messages, the recorder node's defaults, and an episode bag as written)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airplay.data.messages import TOPICS

LAYOUT = Path(__file__).resolve().parents[1] / "config" / "foxglove_layout.json"


def _panels(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    assert set(node) >= {"first", "second", "direction"} and node["direction"] in ("row", "column"), node
    return _panels(node["first"]) + _panels(node["second"])


def layout_topics(layout: dict) -> set[str]:
    """Every topic a panel of ``layout`` reads: image and calibration topics, 3D topics, the topic
    part of plot paths and raw-message paths."""
    topics = set()
    for panel_id, config in layout["configById"].items():
        kind = panel_id.split("!")[0]
        if kind == "Image":
            topics |= {v for k, v in config["imageMode"].items() if k in ("imageTopic", "calibrationTopic")}
        elif kind == "3D":
            topics |= set(config["topics"])
        elif kind == "Plot":
            topics |= {p["value"].split(".")[0] for p in config["paths"]}
        elif kind == "RawMessages":
            topics.add(config["topicPath"].split(".")[0])
        else:
            pytest.fail(f"{LAYOUT}: panel {panel_id!r} of a kind this test does not know")
    return topics


def test_layout_panels_and_topics_are_the_bags():
    layout = json.loads(LAYOUT.read_text())
    assert sorted(_panels(layout["layout"])) == sorted(layout["configById"])
    topics = layout_topics(layout)
    assert topics == set(TOPICS)  # every bag topic has its panel, and no panel reads another topic
    rclpy = pytest.importorskip("rclpy", reason="the recorder node needs rclpy")
    assert rclpy
    from airplay.data.bag_writer import EPISODE_METADATA_TOPIC
    from airplay.nodes.recorder_node import DEFAULT_TOPICS

    # what the recorder node writes by default, with record_depth:=true and the metadata it adds
    assert topics == {*DEFAULT_TOPICS, "/camera/depth/image_raw", EPISODE_METADATA_TOPIC}


def test_an_episode_bag_holds_every_layout_topic(tmp_path):
    from helpers.episodes import META, synthetic_episode

    from airplay.data.bag import write_episode_bag
    from airplay.data.bag_reader import iter_bag_messages

    _, records = synthetic_episode(3)
    path = write_episode_bag(tmp_path, "sc", META["task_id"], records, metadata=META)
    written = {topic for topic, *_ in iter_bag_messages(path)}
    assert layout_topics(json.loads(LAYOUT.read_text())) == written
