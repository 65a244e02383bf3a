"""``ros2 launch airplay collect.launch.py scenes:=... episodes:=... out:=bags``

Expert demonstrations recorded from the live graph: the sim_eval graph with the expert
policy plus the ``recorder`` node, which writes one rosbag2 MCAP bag per episode under
``out`` (``bags/`` by default). The nodes, parameters and launch arguments come from
:func:`airplay.graph.collect_graph` and :data:`airplay.graph.COLLECT_ARGUMENTS`, the
description ``airplay launch collect`` reads too. The graph shuts down when the evaluator (the
required node) exits, or any node fails (then ``ros2 launch`` exits non-zero); the recorder
finalizes its bags on the SIGINT that ``ros2 launch`` sends (:mod:`airplay.ros2_launch`).
"""

from airplay.ros2_launch import graph_launch_description


def generate_launch_description():
    return graph_launch_description("collect")
