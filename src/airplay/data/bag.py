"""rosbag2 MCAP episode bags: the writer (:mod:`airplay.data.bag_writer`) and the reader
(:mod:`airplay.data.bag_reader`) under one name.
"""

from airplay.data.bag_reader import (BagError, Episode, iter_bag_messages, iter_episode_bags, mcap_files,
                                     read_bag_messages, read_episode, read_metadata_yaml)
from airplay.data.bag_writer import (CUSTOM_DATA_KEY, EPISODE_METADATA_TOPIC, QOS_RELIABLE, QOS_SENSOR_DATA,
                                     BagWriter, episode_bag_path, qos_profile, write_episode_bag)

__all__ = ["BagError", "BagWriter", "CUSTOM_DATA_KEY", "EPISODE_METADATA_TOPIC", "Episode", "QOS_RELIABLE",
           "QOS_SENSOR_DATA", "episode_bag_path", "iter_bag_messages", "iter_episode_bags", "mcap_files",
           "qos_profile", "read_bag_messages", "read_episode", "read_metadata_yaml", "write_episode_bag"]
