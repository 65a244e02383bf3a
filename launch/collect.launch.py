"""``ros2 launch airplay collect.launch.py scenes:=... episodes:=... out:=bags``

Expert demonstrations recorded from the live graph: the sim_eval graph with the expert
policy plus the ``recorder`` node, which writes one rosbag2 MCAP bag per episode under
``out`` (``bags/`` by default). The nodes and parameters come from
:func:`airplay.graph.collect_graph`, the description ``airplay launch collect`` reads too.
The graph shuts down when the evaluator (the required node) exits; the recorder then
finalizes its bags on the SIGINT that ``ros2 launch`` sends.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from airplay.graph import COLLECT_ARGUMENTS, collect_graph


def _graph(context, *args, **kwargs):
    values = {key: LaunchConfiguration(key).perform(context) for key in COLLECT_ARGUMENTS}
    actions = []
    for spec in collect_graph(values):
        node = Node(package="airplay", executable=spec.executable, name=spec.name, parameters=[spec.parameters],
                    remappings=list(spec.remappings), output="screen")
        actions.append(node)
        if spec.required:
            actions.append(RegisterEventHandler(OnProcessExit(
                target_action=node,
                on_exit=[EmitEvent(event=Shutdown(reason=f"required node '{spec.name}' exited"))],
            )))
    return actions


def generate_launch_description() -> LaunchDescription:
    arguments = [DeclareLaunchArgument(key, default_value=default, description=f"collect argument {key}")
                 for key, default in COLLECT_ARGUMENTS.items()]
    return LaunchDescription([*arguments, OpaqueFunction(function=_graph)])
