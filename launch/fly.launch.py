"""``ros2 launch airplay fly.launch.py scene:=... index:=... connection:=udp:127.0.0.1:14540``

The policy on a vehicle: camera (the renderer at the vehicle's odom for a rehearsal, or a
camera driver's topic remapped in with ``camera_topic:=``), the policy node (not lockstep) and
``mavlink_bridge`` (safety supervisor + MAVLink to PX4/ArduPilot). No sim. The nodes, their
parameters and remappings, and the launch arguments come from :func:`airplay.graph.fly_graph`
and :data:`airplay.graph.FLY_ARGUMENTS`, the same description that ``airplay launch fly``
reads where only the pip ROS 2 wheels exist. The graph shuts down when the bridge (the required
node) exits: after landing, or when its flight sequence failed (then ``ros2 launch`` exits
non-zero, as it does when any node fails; :mod:`airplay.ros2_launch`).

AirVLN-R1 flies on it too: ``ros2 launch airplay fly.launch.py scene:=... index:=...
policy:=airvln_r1 vln_backend:=transformers model:=DIR`` (or ``vln_backend:=openai
endpoint:=URL``), with the instruction on the ``instruction`` topic or ``instruction:=TEXT``;
the navigator's STOP lands the vehicle (docs/vehicle.md, "AirVLN-R1 on the vehicle").

The bridge connects and checks the autopilot at start and arms only on request: ``arm:=true``,
or its lifecycle's activate transition (``airplay bridge arm``); see docs/vehicle.md.
"""

from airplay.ros2_launch import graph_launch_description


def generate_launch_description():
    return graph_launch_description("fly")
