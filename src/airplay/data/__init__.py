"""Demonstrations: rosbag2 (MCAP storage) episode bags, collection, and dataset export.

Bag layout (one bag folder per episode; rosbag2 metadata version 9, as ``ros2 bag`` on Jazzy)::

    OUT/<scene_name>/<task_id>/          task_id = {scene}-{setting}-{seed}-{k}
        metadata.yaml                    written last: present = finalized
        <task_id>_0.mcap                 _1, _2 ... after a size split

``airplay collect`` publishes each folder atomically (written as
``OUT/<scene>/.<task_id>.partial/``, renamed when finalized); the recorder node writes
straight into its output folder. Topics (absolute names, sim time in integer ns, log time
= header stamp; step k of an episode at start + k * 20 ms):

=========================  ==============================  ==========================================
topic                      type                            content
=========================  ==============================  ==========================================
/camera/image_raw          sensor_msgs/msg/Image           rgb8, one per observation
/camera/depth/image_raw    sensor_msgs/msg/Image           32FC1 metres (only when depth is recorded)
/camera/camera_info        sensor_msgs/msg/CameraInfo      one per observation
/odom                      nav_msgs/msg/Odometry           REP-105: position map ENU, quat xyzw;
                                                           twist in base_link (body velocity, body
                                                           rates); bag_format 1: velocity MAP
/cmd_vel                   geometry_msgs/msg/TwistStamped  the command for the observation with the
                                                           same stamp (heading-frame vx vy vz m/s,
                                                           angular.z yaw rate rad/s); none for the
                                                           terminal observation
/goal_pose                 geometry_msgs/msg/PoseStamped   once, at the first stamp (map ENU, goal yaw)
/goal_image                sensor_msgs/msg/Image           once, imagegoal only
/episode/status            std_msgs/msg/String             JSON "started" and the terminal status
/episode/metadata          std_msgs/msg/String             JSON, once at the last stamp (also in
                                                           metadata.yaml custom_data "airplay.episode")
=========================  ==============================  ==========================================

Modules: :mod:`~airplay.data.messages` (CDR builders/decoders with rosbags' Jazzy typestore),
:mod:`~airplay.data.bag` (``BagWriter``, ``write_episode_bag``, ``read_episode``,
``iter_episode_bags``; implemented in ``bag_writer`` and ``bag_reader``),
:mod:`~airplay.data.episode_recorder` (the recorder's episode cut), ``airplay collect``
(:mod:`~airplay.data.collect`: the run; ``collect_plan``, ``collect_flight``,
``collect_workers``), the LeRobot v3.0 datasets (:mod:`~airplay.data.keys`, the
:mod:`~airplay.data.lerobot` package, :mod:`~airplay.data.export`, :mod:`~airplay.data.stats`).
Nothing here needs rclpy; the recorder node (:mod:`airplay.nodes.recorder_node`) wraps
``BagWriter``.
"""
