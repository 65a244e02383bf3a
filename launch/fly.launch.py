"""``ros2 launch airplay fly.launch.py scene:=... index:=... connection:=udp:127.0.0.1:14540``

The policy on a vehicle: camera (the renderer at the vehicle's odom for a rehearsal, or a
camera driver's topic remapped in with ``camera_topic:=``), the policy node (not lockstep) and
``mavlink_bridge`` (safety supervisor + MAVLink to PX4/ArduPilot). No sim. The nodes, their
parameters and remappings come from :func:`airplay.graph.fly_graph`, the same description that
``airplay launch fly`` reads where only the pip ROS 2 wheels exist. The graph shuts down when
the bridge (the required node) exits: after landing, or when its flight sequence failed.

AirVLN-R1 flies on it too: ``ros2 launch airplay fly.launch.py scene:=... index:=...
policy:=airvln_r1 vln_backend:=transformers model:=DIR`` (or ``vln_backend:=openai
endpoint:=URL``), with the instruction on the ``instruction`` topic or ``instruction:=TEXT``;
the navigator's STOP lands the vehicle (README "A real drone", "AirVLN-R1 on the vehicle").
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, EmitEvent, OpaqueFunction, RegisterEventHandler
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from airplay.graph import FLY_ARGUMENTS, fly_graph


def _graph(context, *args, **kwargs):
    values = {key: LaunchConfiguration(key).perform(context) for key in FLY_ARGUMENTS}
    actions = []
    for spec in fly_graph(values):
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
    arguments = [DeclareLaunchArgument(key, default_value=default, description=f"fly argument {key}")
                 for key, default in FLY_ARGUMENTS.items()]
    return LaunchDescription([*arguments, OpaqueFunction(function=_graph)])
