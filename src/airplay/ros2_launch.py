"""The ``ros2 launch`` side of airplay's graphs, written once for ``launch/*.launch.py``.

Each launch file returns ``graph_launch_description(<graph name>)`` (a name of
:data:`airplay.graph.GRAPHS`: ``sim_eval``, ``collect``, ``fly``), which declares the
graph's launch arguments (default and description of each, what ``--show-args`` prints) and,
when launched, does what ``airplay launch`` (:mod:`airplay.launcher`) does for the same graph:

* a ``key:=value`` on the command line that the graph does not accept is an error naming the
  key and listing the accepted ones, before any node starts (where this launch file is the one
  ``ros2 launch`` was given; included from another launch file, the command line belongs to
  that file, and keys that no launch file of the run declares are only warned about);
* a launch argument the graph cannot use (``episodes:=ten``) is an error before any node starts
  (``launch-prefix:=``/``launch-prefix-filter:=``, which ``ros2 launch`` adds for its own
  options, are accepted);
* the graph stops when its required node exits, or when any node exits with a non-zero code,
  and ``ros2 launch`` then exits 1, with the node and its code in the error message.

``ros2 launch`` exits non-zero only when an exception is raised while it processes the launch
(``LaunchService.run()`` returns 1); a node's exit code does not reach it otherwise. So a
refused argument and a failed node are raised as :class:`GraphLaunchError` from the launch's
own processing. Exits during shutdown (after the required node ended, on Ctrl-C) do not change
the outcome, as with ``airplay launch``: they are logged.

The launch (``launch``, ``launch_ros``) imports are inside the functions: this module imports
without them.
"""

from __future__ import annotations

import os
from typing import Callable

from airplay.graph import (EXTRA_ROS2_LAUNCH_ARGUMENTS, GRAPHS, GraphArgumentError, LaunchArgument, NodeSpec,
                           unknown_argument_message)

LOGGER_NAME = "airplay"


class GraphLaunchError(RuntimeError):
    """Raised inside ``ros2 launch`` to stop it with exit code 1: a refused launch argument or
    a node that exited with a non-zero code. The message says which."""


Builder = Callable[[dict], list]


def graph_launch_description(graph: str):
    """The LaunchDescription of the graph named ``graph`` in :data:`airplay.graph.GRAPHS` (its
    builder, e.g. :func:`airplay.graph.sim_eval_graph`, and its
    :class:`~airplay.graph.LaunchArgument` table): the arguments declared with default and
    description, then the nodes (module docstring). An unknown name is a KeyError listing the
    graphs."""
    if graph not in GRAPHS:
        raise KeyError(f"unknown graph {graph!r}; graphs: {', '.join(sorted(GRAPHS))}")
    builder, arguments = GRAPHS[graph]
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction

    description = LaunchDescription([
        DeclareLaunchArgument(key, default_value=argument.default, description=argument.description)
        for key, argument in arguments.items()
    ])
    description.add_action(OpaqueFunction(function=_start_graph, args=[builder, arguments, description]))
    return description


def _start_graph(context, builder: Builder, arguments: dict[str, LaunchArgument], description) -> list:
    """The OpaqueFunction of :func:`graph_launch_description`: check the command line and the
    arguments, then return the nodes and their exit handlers."""
    check_command_line(context, set(arguments), description)
    values = {key: context.launch_configurations.get(key, argument.default) for key, argument in arguments.items()}
    try:
        nodes = builder(values)
    except GraphArgumentError as exc:
        raise GraphLaunchError(str(exc)) from None
    actions = []
    for spec in nodes:
        actions.extend(node_actions(spec))
    return actions


# -- the command line ---------------------------------------------------------------------------
def command_line_keys(argv) -> list[str]:
    """The keys of the ``key:=value`` tokens in ``argv`` (a LaunchContext's argv), in order."""
    return [token.split(":=", 1)[0] for token in argv if isinstance(token, str) and ":=" in token]


def check_command_line(context, accepted: set[str], description) -> None:
    """Refuse the command line's ``key:=value`` tokens whose key is not in ``accepted``
    (GraphLaunchError), where ``description`` is the launch the command line is for (the file
    ``ros2 launch`` was given, or the launch service's root). Included from another launch file,
    warn about keys that no launch argument declared in the run accepts; where the run's root
    is not known (included from an event handler), check nothing."""
    keys = [k for k in command_line_keys(context.argv) if k not in EXTRA_ROS2_LAUNCH_ARGUMENTS]
    if not keys:
        return
    root = root_description(context)
    if root is not None and _is_top_level(context, root, description):
        unknown = [k for k in keys if k not in accepted]
        if unknown:
            raise GraphLaunchError(unknown_argument_message(unknown[0], accepted)
                                   + (f" (also unknown: {', '.join(unknown[1:])})" if unknown[1:] else ""))
        return
    declared = set(accepted) | _declared_in(root)
    unknown = [k for k in keys if k not in declared]
    if unknown and root is not None:
        _logger().warning(f"launch arguments {', '.join(unknown)} are declared by no launch file of this run "
                          f"(misspelled?); this graph's are: {', '.join(sorted(accepted))}")


def root_description(context):
    """The LaunchDescription the launch service was given (for ``ros2 launch FILE``: an include
    of FILE), while it is being visited; None where that is not known (in a later event).

    The launch service includes its root description through an IncludeLaunchDescription
    event, and the handler of that event visits the whole include tree with the event in
    ``context.locals.event``.
    """
    from launch.events import IncludeLaunchDescription

    event = context.get_locals_as_dict().get("event")
    return event.launch_description if isinstance(event, IncludeLaunchDescription) else None


def _is_top_level(context, root, description) -> bool:
    """This launch description is the root, or the one file the root includes (``ros2 launch``)."""
    from launch.actions import IncludeLaunchDescription

    if root is description:
        return True
    includes = [e for e in root.entities if isinstance(e, IncludeLaunchDescription)]
    here = context.get_locals_as_dict().get("current_launch_file_path")
    if len(includes) != 1 or not here:
        return False
    return _same_file(includes[0].launch_description_source.location, here)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _declared_in(root) -> set[str]:
    """Names of the launch arguments declared anywhere in ``root``'s tree that launch can see
    without a context (includes given by a plain path)."""
    if root is None:
        return set()
    try:
        return {argument.name for argument, _ in root.get_launch_arguments_with_include_launch_description_actions()}
    except Exception:  # an include launch cannot resolve without a context: only what it saw
        return set()


# -- the nodes and their exits ------------------------------------------------------------------
def node_actions(spec: NodeSpec) -> list:
    """The launch_ros Node of ``spec`` and its exit handler (:func:`on_node_exit`)."""
    from launch.actions import RegisterEventHandler
    from launch.event_handlers import OnProcessExit
    from launch_ros.actions import Node

    grace = {} if spec.stop_grace_s is None else {"sigterm_timeout": str(spec.stop_grace_s),
                                                   "sigkill_timeout": str(spec.stop_grace_s)}
    node = Node(package="airplay", executable=spec.executable, name=spec.name, parameters=[spec.parameters],
                remappings=list(spec.remappings), output="screen", **grace)
    handler = OnProcessExit(target_action=node, on_exit=lambda event, context: on_node_exit(spec, event, context))
    return [node, RegisterEventHandler(handler)]


def on_node_exit(spec: NodeSpec, event, context):
    """A node exited: a non-zero code stops the graph and fails the launch (GraphLaunchError);
    the required node's code 0 stops the graph (Shutdown). While the graph is already stopping
    an exit is only logged."""
    from launch.actions import EmitEvent
    from launch.events import Shutdown

    code = event.returncode
    what = _describe(code)
    if context.is_shutdown:
        if code != 0:
            _logger().warning(f"node {spec.name} exited with {what} while the graph was stopping")
        return None
    if code != 0:
        kind = "required node" if spec.required else "node"
        raise GraphLaunchError(f"{kind} {spec.name} exited with {what}; stopping the graph")
    if spec.required:
        _logger().info(f"required node {spec.name} exited (code 0); stopping the graph")
        return EmitEvent(event=Shutdown(reason=f"required node {spec.name} exited"))
    return None


def _describe(code: int) -> str:
    """``code 2``, or ``signal SIGKILL`` for a negative return code."""
    if code is not None and code < 0:
        import signal

        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def _logger():
    import launch.logging

    return launch.logging.get_logger(LOGGER_NAME)
