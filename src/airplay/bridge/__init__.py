"""Vehicle side of airplay: ROS <-> PX4/MAVLink frame conversions (:mod:`.frames`, the only
place that knows about NED/FRD), the safety supervisor between the policy and the vehicle
or simulator (:mod:`.supervisor`), and the MAVLink bridge (pymavlink, imported where used).

Everything here except the MAVLink transport is pure Python + numpy, importable without
rclpy or pymavlink (DESIGN.md sections 1, 3 and 8).
"""
