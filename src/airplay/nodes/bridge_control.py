"""``airplay bridge state|arm|land|estop``: the operator's side of the ``mavlink_bridge`` lifecycle
node, for machines without the ``ros2`` CLI (the pip ROS 2 wheels only).

- ``state``: the node's lifecycle state (unconfigured, inactive, active, ...) and its flight
  phase (``vehicle/phase``), the vehicle's armed flag and mode.
- ``arm``: the lifecycle's *activate* transition (``/mavlink_bridge/change_state``): the explicit
  request to arm and fly, carried out once the pre-arm checks pass.
- ``land``: the ``land`` service (std_srvs/Trigger); ``estop``: the ``estop`` service (land now,
  latched).

With ROS 2 installed the same is ``ros2 service call /mavlink_bridge/change_state
lifecycle_msgs/srv/ChangeState "{transition: {label: activate}}"`` and ``ros2 service call /land
std_srvs/srv/Trigger``. DDS stays on this machine as in ``airplay launch`` (the loopback profile
of config/, ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``) unless the environment says otherwise.
rclpy is imported when a command runs, not when the CLI starts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ACTIONS = ("state", "arm", "land", "estop")


def _call(node, client, request, timeout_s: float, what: str):
    import rclpy

    if not client.wait_for_service(timeout_sec=timeout_s):
        raise TimeoutError(f"no answer from {client.srv_name} within {timeout_s:g} s ({what}): is the fly graph "
                           "running, with the same ROS_DOMAIN_ID?")
    future = client.call_async(request)
    rclpy.spin_until_future_complete(node, future, timeout_sec=timeout_s)
    if not future.done():
        raise TimeoutError(f"{client.srv_name} did not answer within {timeout_s:g} s ({what})")
    return future.result()


def _latest(node, msg_type, topic: str, wait_s: float):
    """The newest message on ``topic`` within ``wait_s`` (the bridge republishes its status every 0.5 s)."""
    import rclpy

    from airplay.nodes.common import RELIABLE

    got = []
    node.create_subscription(msg_type, topic, got.append, RELIABLE)
    deadline = time.monotonic() + wait_s
    while not got and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    return got[-1].data if got else None


def run(action: str, node_name: str = "mavlink_bridge", timeout_s: float = 10.0) -> int:
    """Carry out ``action``; print the result; 0 on success, 1 when refused or unanswered."""
    import rclpy
    from lifecycle_msgs.srv import ChangeState, GetState
    from std_msgs.msg import Bool, String
    from std_srvs.srv import Trigger

    from airplay.launcher import graph_environment

    for key, value in graph_environment({}).items():
        if key.startswith(("ROS_", "FASTDDS_", "FASTRTPS_", "RMW_")):
            os.environ.setdefault(key, value)
    rclpy.init()
    node = rclpy.create_node("airplay_bridge_control")
    try:
        if action == "state":
            state = _call(node, node.create_client(GetState, f"/{node_name}/get_state"), GetState.Request(),
                          timeout_s, "get the lifecycle state").current_state.label
            phase = _latest(node, String, "vehicle/phase", 2.0)
            armed = _latest(node, Bool, "vehicle/armed", 1.0)
            mode = _latest(node, String, "vehicle/mode", 1.0)
            print(f"{node_name}: lifecycle {state}, phase {phase or '?'}, "
                  f"{'?' if armed is None else 'ARMED' if armed else 'disarmed'}, mode {mode or '?'}")
            return 0
        if action == "arm":
            request = ChangeState.Request()
            request.transition.label = "activate"
            ok = _call(node, node.create_client(ChangeState, f"/{node_name}/change_state"), request, timeout_s,
                       "the activate transition").success
            print(f"{node_name}: " + ("activated: arming once the pre-arm checks pass" if ok
                                      else "activate refused (already active, not configured, or the flight "
                                           "has ended)"))
            return 0 if ok else 1
        response = _call(node, node.create_client(Trigger, action), Trigger.Request(), timeout_s, action)
        print(f"{node_name}: {action}: {'ok' if response.success else 'refused'}: {response.message}")
        return 0 if response.success else 1
    except TimeoutError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def _cmd_bridge(args: argparse.Namespace) -> int:
    return run(args.action, args.node, args.timeout)


def register(sub) -> None:
    """Add ``airplay bridge`` to the CLI's sub-parsers."""
    p = sub.add_parser("bridge", help="ask the mavlink_bridge node: state, arm, land, estop",
                       description=__doc__.split("\n\n")[0].replace("``", "") + " (see docs/vehicle.md)")
    p.add_argument("action", choices=ACTIONS, help="state: lifecycle state and flight phase; arm: activate "
                   "(arm and fly once ready); land; estop")
    p.add_argument("--node", default="mavlink_bridge", help="the bridge node's name (default mavlink_bridge)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the node to answer")
    p.set_defaults(func=_cmd_bridge)
