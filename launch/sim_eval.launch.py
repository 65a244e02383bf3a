"""``ros2 launch airplay sim_eval.launch.py scenes:=... policy:=... episodes:=...``

The closed-loop evaluation graph (sim, renderer, policy, evaluator) where a ROS 2
distribution is installed and airplay is built with colcon. The nodes, their parameters and
remappings, and the launch arguments (``--show-args``) come from
:func:`airplay.graph.sim_eval_graph` and :data:`airplay.graph.SIM_EVAL_ARGUMENTS`, the
description that ``airplay launch sim_eval`` reads too; :func:`airplay.ros2_launch.graph_launch_description`
refuses unknown arguments, stops the graph when the evaluator (the required node) exits or any
node fails, and then exits non-zero on a failure.
"""

from airplay.ros2_launch import graph_launch_description


def generate_launch_description():
    return graph_launch_description("sim_eval")
