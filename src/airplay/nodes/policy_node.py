"""``policy``: observation (state + camera [+ goal]) -> ``cmd_vel``, stamped with the observation's stamp.

The node is one of two kinds, picked from its parameters (airplay.node_schemas.POLICY_NODE)
around one core:

* :mod:`airplay.nodes.policy_core` (both kinds): the policy made from the parameters (``policy``,
  ``checkpoint``, ``execution_horizon``, ``policy_backend`` torch | onnxruntime, AirVLN-R1's
  backend), made for the first scene and warmed up before the node joins the graph; the live
  episode and its task; the observation; ``cmd_vel`` and the reports on ``episode/policy``.
* :mod:`airplay.nodes.policy_lockstep`, the lockstep node: sim_eval's policy (in lockstep or
  beside a real-time sim) and the fly graph's for every policy but AirVLN-R1. One command per
  observation whose state and images are all in, matched to the sim's steps by stamp, the policy
  called under ``policy_budget_ms``.
* :mod:`airplay.nodes.policy_vehicle`, the vehicle node: ``policy:=airvln_r1 vehicle:=true`` (the
  fly graph's AirVLN-R1). No evaluator, no lockstep: one command per ``odom`` from the bridge with
  the newest camera image, the instruction from the operator, the parameter or the VLN episode,
  and the end of the mission on the navigator's STOP.

Both subscribe to ``episode/command`` (std_msgs/String JSON, reliable: a new scene's policy is
made ahead of its episode) last, once everything else is ready: it is the evaluator's sign that
the node has joined the graph.
"""

from __future__ import annotations

from rclpy.node import Node
from std_msgs.msg import String

from airplay.node_schemas import POLICY_NODE
from airplay.nodes.common import RELIABLE, run_node
from airplay.nodes.params import declare_schema
from airplay.nodes.policy_core import PolicyCore
from airplay.nodes.policy_lockstep import LockstepPolicy
from airplay.nodes.policy_vehicle import VehiclePolicy


class PolicyNode(Node):
    """The ``policy`` node (module docstring): ``core`` and the part of its kind, ``kind``
    (:class:`~airplay.nodes.policy_vehicle.VehiclePolicy` for AirVLN-R1 on a vehicle, else
    :class:`~airplay.nodes.policy_lockstep.LockstepPolicy`)."""

    def __init__(self) -> None:
        super().__init__("policy")
        values = declare_schema(self, POLICY_NODE)
        self.core = PolicyCore(self, values)
        if self.core.on_vehicle:
            self.kind = VehiclePolicy(self, self.core, values["instruction"], values["episode_instruction"])
        else:
            self.kind = LockstepPolicy(self, self.core, values["policy_budget_ms"])
        self.create_subscription(String, "episode/command", self.core.on_episode_command, RELIABLE)  # last: ready

    def destroy_node(self) -> None:
        self.kind.close()
        super().destroy_node()


def main(args=None) -> int:
    return run_node(PolicyNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
