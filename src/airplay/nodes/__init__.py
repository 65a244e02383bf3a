"""The ROS 2 nodes (rclpy): thin wrappers over the core (DESIGN.md section 4).

``sim_node`` (node "sim"), ``renderer_node`` ("renderer"), ``policy_node`` ("policy"),
``evaluator_node`` ("evaluator"); ``common`` holds QoS profiles and message conversions.
Each module's ``main(args)`` runs its node; ``start`` imports one with stop signals handled from the
first line, as both launchers do: ``python -m airplay.nodes.start airplay.nodes.sim_node --ros-args -p key:=value``.
"""
