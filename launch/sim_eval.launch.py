"""``ros2 launch airplay sim_eval.launch.py scenes:=... policy:=... episodes:=...``

The closed-loop evaluation graph (sim, renderer, policy, evaluator) where a ROS 2
distribution is installed and airplay is built with colcon. The nodes, their parameters and
remappings come from :func:`airplay.graph.sim_eval_graph`, the same description that
``airplay launch sim_eval`` reads where only the pip ROS 2 wheels exist. The graph shuts down
when the evaluator (the required node) exits.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from airplay.graph import SIM_EVAL_ARGUMENTS, sim_eval_graph


def _graph(context, *args, **kwargs):
    values = {key: LaunchConfiguration(key).perform(context) for key in SIM_EVAL_ARGUMENTS}
    actions = []
    for spec in sim_eval_graph(values):
        node = Node(
            package="airplay",
            executable=spec.executable,
            name=spec.name,
            parameters=[spec.parameters],
            remappings=list(spec.remappings),
            output="screen",
        )
        actions.append(node)
        if spec.required:
            actions.append(RegisterEventHandler(OnProcessExit(
                target_action=node,
                on_exit=[EmitEvent(event=Shutdown(reason=f"required node '{spec.name}' exited"))],
            )))
    return actions


def generate_launch_description() -> LaunchDescription:
    arguments = [DeclareLaunchArgument(key, default_value=default, description=f"sim_eval argument {key}")
                 for key, default in SIM_EVAL_ARGUMENTS.items()]
    return LaunchDescription([*arguments, OpaqueFunction(function=_graph)])
