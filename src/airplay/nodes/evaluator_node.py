"""``evaluator``: drives the episodes, collects the sim's statuses, writes the results, shuts down.

It samples each scene's tasks (the only node that does: it loads the scene's planning grid, not
its splat) and sends each episode's task itself to the graph. It waits until the sim, renderer
and policy subscribe to ``episode/command`` (>= 3 matched; the nodes subscribe only once they
have loaded their part of the first scene and run it once, see :mod:`airplay.world.warmup`) and
the sim's ``episode/status`` publisher is matched, saying every 10 s whom it still waits for
(``startup_timeout_s`` > 0 gives up after that long, exit code 1; default 0: no limit, since a
cold numba cache on a loaded machine can take minutes). Then, for each scene folder of
``scenes`` in order and ``i`` in ``range(episodes)``, it publishes ``episode/command``
(:class:`airplay.world.lockstep.EpisodeCommand`: episode k, scene_dir, index i, the task, the
success radius) and waits for the sim's terminal ``episode/status`` of episode k, however long
it takes: no wall-clock limit ends an episode of a slow graph. Each finished episode is logged
with the run's progress (episodes done, control steps per second) and published on
``episode/progress`` (std_msgs/String JSON: episode, done, episodes, scene_dir, index, status,
steps; reliable). With ``viewer:=true`` the start-up also waits for a subscriber of
``episode/progress`` (the viewer node, :mod:`airplay.nodes.viewer_node`), so that the live view
has every episode; the viewer is no member of the run (its leaving stops nothing).

A node that leaves the graph (its process ended: DDS removes it at once on a clean exit, after
the participant lease for a killed process) is what ends things early; the evaluator follows the
graph's nodes by name through rclpy's graph API, whatever the RMW. The sim, or the renderer,
leaving stops the run with exit code 1 after writing the results of the finished episodes; the
policy leaving ends its episodes as ``no_command`` (the sim decides that) and the run goes on.
Another graph in the same ROS domain (a second publisher of ``episode/command``,
``episode/status`` or ``cmd_vel``, at start-up or during the run) stops the
run the same way, saying so: lockstep matches a command to its observation by the stamp, every
graph's sim time starts at 0, and the other graph's messages would change the episodes.

The results (``episodes.jsonl``, ``summary.json``, ``<scene>_trajectories.png``, meta runtime
"ros") are computed as :func:`airplay.eval.runner.evaluate_inprocess` computes them, with the
``error`` of episodes the policy's failure ended; the table is printed with where the results
are; then the node shuts rclpy down (exit code 0).

Setting vln (AirVLN-R1): the episodes are the in-process VLN runner's
(:func:`airplay.vln.evaluate.vln_scene`, from ``vln_config`` / ``vln_episodes``); each command
carries the episode's instruction (also published on ``instruction``, std_msgs/String,
reliable, before the command), a goal-free task and a zero success radius. An episode is
recorded when both the sim's terminal ``episode/status`` and the policy's ``episode/policy``
report of it have arrived (the report carries stop_reason, vln_steps, queries,
format_failures, model time; see the policy node); when the policy has left the graph, with
the sim's status alone (logged). The outcome is AirNav's (:func:`airplay.vln.evaluate.vln_status`:
success only if the episode ends within the radius; ``stopped`` for a STOP outside it), and the
results (``episodes.jsonl`` with persona / instruction / vln fields, ``per_persona`` and
``meta.vln`` in ``summary.json``) are written by the in-process runner's own functions
(:func:`~airplay.vln.evaluate.vln_episode_result`, :func:`~airplay.vln.evaluate.write_vln_results`).
The start-up also waits for the policy's ``episode/policy`` publisher.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from std_msgs.msg import String

from airplay.node_schemas import EVALUATOR
from airplay.nodes.common import (EPISODE_STATUS, RELIABLE, EpisodeTasks, ParameterError, episode_parameters,
                                  json_message, json_payload, parse_wind, run_node, scene_dirs)
from airplay.nodes.params import declare_schema

WAITING_LOG_S = 10.0
"""While the graph comes up, whom the evaluator waits for is logged this often (wall s)."""
MEMBERSHIP_CHECK_S = 0.5
"""How often (wall s) the evaluator looks whether a node has left the graph."""
LEAVE_GRACE_S = 1.0
"""How long (wall s) the evaluator waits, after a node it needs left the graph, before it stops the
run with an error: a Ctrl-C reaches every process of the graph at once, and a node that exits
first must not turn this process's own clean stop (its SIGINT handled a moment later, under load)
into a failure."""


class EvaluatorNode(Node):
    def __init__(self) -> None:
        super().__init__("evaluator")
        from airplay.policies import POLICY_NAMES, is_policy_name, reads_vln_options

        values = declare_schema(self, EVALUATOR,
                                {"startup_timeout_s": lambda v: setattr(self, "startup_timeout_s", v)})
        p = episode_parameters(values)
        self.params = p
        self.policy_name = values["policy"]
        self.checkpoint = values["checkpoint"]  # recorded in summary.json's meta
        self.execution_horizon = values["execution_horizon"]
        self.policy_budget_ms = values["policy_budget_ms"]  # recorded in summary.json's meta
        self.out = Path(values["out"])
        self.startup_timeout_s = values["startup_timeout_s"]
        self.render_images = values["render_images"]
        self.bootstrap = values["bootstrap"]
        self.wind = values["wind"]  # recorded in summary.json's meta (the sim applies it)
        parse_wind(self.wind)
        if not is_policy_name(self.policy_name):
            raise ParameterError(f"parameter 'policy' must be one of {', '.join(POLICY_NAMES)} or module:factory, "
                                 f"got {self.policy_name!r}")
        self.scenes = scene_dirs(p["scenes"])
        self.tasks = EpisodeTasks.from_parameters(p)
        self.vln = p["setting"] == "vln"
        if self.vln and not reads_vln_options(self.policy_name):
            raise ParameterError(f"parameter 'policy' must be airvln_r1 in the vln setting, got {self.policy_name!r}")
        if self.vln:  # an episode file may hold fewer episodes for a scene
            self.plan = []
            for s in self.scenes:
                try:
                    self.plan += [(str(s), i) for i in range(len(self.tasks.load(str(s))[1]))]
                except ValueError as exc:  # an unreadable episode file or VLN configuration, sampling
                    raise ParameterError(f"parameter 'scenes' ({s}) in the vln setting: {exc}") from None
            if not self.plan:
                raise ParameterError("parameter 'vln_episodes': no episodes for these scenes")
        else:
            self.plan = [(str(s), i) for s in self.scenes for i in range(p["episodes"])]
            try:  # now, not in the timed run
                self.tasks.load(self.plan[0][0])
            except Exception as exc:
                raise ParameterError(f"parameter 'scenes' ({self.plan[0][0]}): {exc}") from None
        self.reports: dict[int, dict] = {}   # vln: the policy's report per episode
        self.ended = None                    # vln: (status, steps, trajectory, error) waiting for a report
        self.exit_code = 0
        self.started = False
        self.k = -1
        self.t0 = time.monotonic()
        self.waiting_logged = self.t0
        self.members: dict[tuple[str, str], str] = {}  # (namespace, name) of episode/command's subscribers -> role
        self.left: set[tuple[str, str]] = set()
        self.membership_checked = 0.0
        self.leaving: tuple[float, str] | None = None  # (when, why): a needed node left; the run stops after the grace
        self.total_steps = 0
        self.outcomes: list[tuple] = []  # scene_dir, index, status, steps, trajectory, error, policy report (vln)
        self.command_pub = self.create_publisher(String, "episode/command", RELIABLE)
        self.viewer = values["viewer"]
        self.progress_pub = self.create_publisher(String, "episode/progress", RELIABLE)
        self.status_sub = self.create_subscription(String, "episode/status", self.on_status, EPISODE_STATUS)
        self.report_sub = self.create_subscription(String, "episode/policy", self.on_report, RELIABLE)
        if self.vln:
            self.instruction_pub = self.create_publisher(String, "instruction", RELIABLE)
        self.create_timer(0.05, self.on_timer, clock=Clock(clock_type=ClockType.STEADY_TIME))

    # -- the graph -------------------------------------------------------------------------
    def _missing(self) -> list[str]:
        """What the graph still lacks before the first episode (empty: ready)."""
        missing = []
        if self.command_pub.get_subscription_count() < 3:
            missing.append(f"episode/command has {self.command_pub.get_subscription_count()} subscribers "
                           "(need sim, renderer, policy)")
        if self.status_sub.get_publisher_count() < 1:
            missing.append("episode/status has 0 publishers (need sim)")
        unnamed = self._unnamed_members()
        if unnamed:
            missing.append(f"{unnamed} subscriber(s) of episode/command not named by the graph yet")
        if self.vln and self.report_sub.get_publisher_count() < 1:
            missing.append("episode/policy has 0 publishers (need policy)")
        if self.viewer and self.progress_pub.get_subscription_count() < 1:
            missing.append("episode/progress has 0 subscribers (need viewer)")
        return missing

    def _endpoints(self, topic: str, publishers: bool) -> list[tuple[str, str]]:
        """The endpoints of ``topic`` in the ROS graph (rclpy's graph API, whatever the RMW): one
        (node namespace, node name) per endpoint, the name "" while the RMW has not told it yet
        (node names arrive on their own, after the endpoints)."""
        name = self.resolve_topic_name(topic)
        infos = self.get_publishers_info_by_topic(name) if publishers else self.get_subscriptions_info_by_topic(name)
        return [(i.node_namespace, "" if "_UNKNOWN_" in i.node_name else i.node_name) for i in infos]

    def _unnamed_members(self) -> int:
        """How many of episode/command's subscribers the graph does not name yet."""
        return sum(1 for _, name in self._endpoints("episode/command", publishers=False) if not name)

    def _record_members(self) -> None:
        """The graph's nodes as it starts: the subscribers of episode/command, by node, with the sim
        (it publishes episode/status) and the policy (cmd_vel, episode/policy) told apart."""
        sims = set(self._endpoints("episode/status", publishers=True))
        policies = set(self._endpoints("cmd_vel", publishers=True) + self._endpoints("episode/policy", publishers=True))
        for node in self._endpoints("episode/command", publishers=False):
            self.members[node] = "sim" if node in sims else "policy" if node in policies else "node"

    def _other_graph(self) -> str | None:
        """What shows that another graph shares this ROS domain (None: nothing does). Lockstep
        ties a command to its observation by the stamp alone, and every graph's sim time starts
        at 0, so another graph's evaluator, sim or policy would start, end or step this run's
        episodes: a second publisher of episode/command, episode/status or cmd_vel (each has
        one in a graph)."""
        for topic, role in (("episode/command", "evaluators"), ("episode/status", "sims"), ("cmd_vel", "policies")):
            endpoints = self._endpoints(topic, publishers=True)
            if len(endpoints) > 1:
                names = sorted(set(n for _, n in endpoints if n)) or ["(names not known yet)"]
                return (f"{len(endpoints)} publishers of {topic} ({', '.join(names)}): {role} of another graph "
                        f"share ROS domain {os.environ.get('ROS_DOMAIN_ID', '0')}, and their messages would "
                        "change this run's episodes; give each graph a ROS_DOMAIN_ID of its own")
        return None

    def _check_members(self) -> bool:
        """False (and the run stopped) when the sim or another node the run needs has left the
        graph, or another graph shares the domain (:meth:`_other_graph`); a policy that left is
        logged, and the sim ends its episodes as no_command."""
        other = self._other_graph()
        if other is not None:
            self._abort(f"during episode {self.k}: {other}")
            return False
        if self.leaving is not None:
            return False
        if self.status_sub.get_publisher_count() == 0:
            self._left(f"the sim left the graph during episode {self.k} (episode/status has no publisher)")
            return False
        present = set(self._endpoints("episode/command", publishers=False))
        for node, role in self.members.items():
            if node in present or node in self.left:
                continue
            self.left.add(node)
            name = node[1]
            if role == "policy":
                self.get_logger().error(f"the policy ({name}) left the graph during episode {self.k}; the sim ends "
                                        "its episodes as no_command")
            else:
                self._left(f"the {role} ({name}) left the graph during episode {self.k}")
                return False
        return True

    def _left(self, reason: str) -> None:
        """A node the run needs has left: the run stops with ``reason`` after :data:`LEAVE_GRACE_S`
        (unless this process's own stop signal comes first: a Ctrl-C of the whole graph)."""
        self.leaving = (time.monotonic(), reason)
        self.get_logger().warning(f"{reason}; stopping the run in {LEAVE_GRACE_S:.1f} s unless this is a shutdown")

    def _policy_present(self) -> bool:
        return not any(role == "policy" for member, role in self.members.items() if member in self.left)

    def _abort(self, reason: str) -> None:
        self.get_logger().error(f"{reason}; stopping the run")
        if self.outcomes:
            self.write()
        self.stop(1)

    def on_timer(self) -> None:
        now = time.monotonic()
        if not self.started:
            missing = self._missing()
            if not missing:
                other = self._other_graph()
                if other is not None:
                    self._abort(other)
                    return
                self.started = True
                self._record_members()
                self.get_logger().info(f"graph ready after {now - self.t0:.1f} s; {len(self.plan)} episodes")
                self.t_start = now
                self.next_episode()
            elif self.startup_timeout_s > 0 and now - self.t0 > self.startup_timeout_s:
                self.get_logger().error(f"the graph did not come up within {self.startup_timeout_s:.0f} s: "
                                        + "; ".join(missing))
                self.stop(1)
            elif now - self.waiting_logged >= WAITING_LOG_S:
                self.waiting_logged = now
                self.get_logger().info(f"waiting {now - self.t0:.0f} s for the graph: " + "; ".join(missing))
            return
        if self.leaving is not None:
            if now - self.leaving[0] >= LEAVE_GRACE_S and self.k < len(self.plan):
                self._abort(self.leaving[1])
            return
        if self.k >= len(self.plan) or now - self.membership_checked < MEMBERSHIP_CHECK_S:
            return
        self.membership_checked = now
        if self._check_members() and self.ended is not None and not self._policy_present():
            self.get_logger().error(f"episode {self.k}: the policy left before reporting; recorded with the sim's "
                                    "status alone")
            self.record(*self.ended, {})

    # -- episodes --------------------------------------------------------------------------
    def _command(self, scene_dir: str, index: int):
        """Episode k's :class:`~airplay.world.lockstep.EpisodeCommand`."""
        from airplay.world.lockstep import EpisodeCommand

        world, tasks = self.tasks.load(scene_dir)
        if self.vln:  # goal-free, no success on entering the radius (AirNav decides at the end)
            return EpisodeCommand(self.k, scene_dir, index, tasks[index], 0.0,
                                  self.tasks.vln.episodes[index].instruction)
        return EpisodeCommand(self.k, scene_dir, index, tasks[index], world.protocol.success_radius_m)

    def next_episode(self) -> None:
        self.k += 1
        if self.k >= len(self.plan):
            self.write()
            self.stop(0)
            return
        self.ended = None
        command = self._command(*self.plan[self.k])
        if self.vln:  # for a policy that listens to the topic; the command carries it too
            self.instruction_pub.publish(String(data=command.instruction))
        self.command_pub.publish(json_message(command.to_payload()))

    def on_status(self, msg: String) -> None:
        try:
            status = json_payload(msg)
            if status.get("episode") != self.k or status.get("status") == "started" or self.k >= len(self.plan):
                return
            ended = (str(status["status"]), int(status["steps"]), np.asarray(status["trajectory"], np.float64),
                     status.get("error"))
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/status {msg.data[:200]!r}: {exc}")
            return
        if not self.vln:
            self.record(*ended)
        elif self.k in self.reports:
            self.record(*ended, self.reports[self.k])
        elif not self._policy_present():
            self.record(*ended, {})
        else:
            self.ended = ended  # wait for the policy's report

    def on_report(self, msg: String) -> None:
        try:
            report = json_payload(msg)
            episode = int(report["episode"])
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/policy {msg.data[:200]!r}: {exc}")
            return
        if not self.vln:
            return  # the sim ends the episode on it and says why in its status
        self.reports.setdefault(episode, report)
        if episode == self.k and self.ended is not None:
            self.record(*self.ended, report)

    def record(self, status: str, steps: int, trajectory: np.ndarray, error: str | None = None,
               info: dict | None = None) -> None:
        scene_dir, index = self.plan[self.k]
        self.ended = None
        self.outcomes.append((scene_dir, index, status, steps, trajectory, error, info or {}))
        self.total_steps += steps
        elapsed = time.monotonic() - self.t_start
        self.get_logger().info(f"episode {self.k + 1}/{len(self.plan)} ({Path(scene_dir).name} #{index}): {status}, "
                               f"{steps} steps" + (f" ({error})" if error else "")
                               + f" | {self.total_steps} steps in {elapsed:.0f} s = "
                               f"{self.total_steps / max(elapsed, 1e-9):.0f} steps/s")
        self.progress_pub.publish(json_message({"episode": self.k, "done": self.k + 1, "episodes": len(self.plan),
                                                "scene_dir": scene_dir, "index": index, "status": status,
                                                "steps": steps}))
        self.next_episode()

    # -- results ---------------------------------------------------------------------------
    def write(self) -> None:
        from airplay.eval.aggregate import aggregate
        from airplay.eval.results import format_table, write_results
        from airplay.eval.runner import EvalConfig, plot_scene, results_meta, task_result

        p = self.params
        cfg = EvalConfig(scenes=[Path(s) for s in self.scenes], policy=self.policy_name, setting=p["setting"],
                         episodes=p["episodes"], seed=p["seed"], render_images=bool(self.render_images),
                         bootstrap=self.bootstrap, checkpoint=self.checkpoint,
                         execution_horizon=self.execution_horizon, policy_budget_ms=float(self.policy_budget_ms),
                         wind=self.wind)
        elapsed = time.monotonic() - self.t_start
        if self.vln:
            return self.write_vln(cfg, elapsed)
        results, total_steps, world = [], 0, None
        for scene_dir in dict.fromkeys(s for s, *_ in self.outcomes):
            world, tasks = self.tasks.load(scene_dir)
            rows = [o for o in self.outcomes if o[0] == scene_dir]
            for _, index, status, steps, trajectory, error, _ in rows:
                total_steps += steps
                results.append(task_result(world, tasks[index], cfg, trajectory, status, error))
            plot_scene(self.out / f"{world.name}_trajectories.png", world, [tasks[o[1]] for o in rows],
                       [o[4] for o in rows], [o[2] for o in rows], cfg)
        summary = aggregate(results, success_radius_m=world.protocol.success_radius_m, bootstrap=cfg.bootstrap,
                            seed=cfg.seed)
        # The graph has no separate set-up phase to exclude: flying time is the wall time of the run.
        meta = results_meta(cfg, world, "ros", total_steps, elapsed, elapsed)
        write_results(self.out, results, summary, meta)
        print(format_table(summary), flush=True)
        print(f"\n{len(results)} episodes, {total_steps} control steps through the ROS graph in {elapsed:.1f} s = "
              f"{total_steps / max(elapsed, 1e-9):.0f} steps/s. Results in {self.out}/", flush=True)

    def write_vln(self, cfg, elapsed: float) -> None:
        """The VLN results, by the in-process VLN runner's functions."""
        from airplay.eval.runner import plot_scene
        from airplay.vln.evaluate import vln_episode_result, write_vln_results

        results, total_steps, model_s, last = [], 0, 0.0, {}
        for scene_dir in dict.fromkeys(s for s, *_ in self.outcomes):
            world, tasks = self.tasks.load(scene_dir)
            vs = self.tasks.vln
            rows = [o for o in self.outcomes if o[0] == scene_dir]
            for _, index, status, steps, trajectory, error, info in rows:
                total_steps += steps
                model_s += float(info.get("model_time_s", 0.0))
                last = info or last
                if error is not None:
                    info = {**info, "error": error}
                results.append(vln_episode_result(world, vs.episodes[index], cfg, trajectory, status, info,
                                                  vs.radius_m))
            plot_scene(self.out / f"{world.name}_trajectories.png", world, [tasks[o[1]] for o in rows],
                       [o[4] for o in rows], [r.status for r in results[-len(rows):]], cfg)
        write_vln_results(self.out, cfg, results, vs, "ros", total_steps, elapsed, elapsed, model_s,
                          backend=str(last.get("backend", "")), model=str(last.get("model", "")),
                          history_offsets=last.get("history_offsets", ()),
                          episodes_file=self.params.get("vln_episodes"))
        print(f"{total_steps} control steps through the ROS graph in {elapsed:.1f} s.", flush=True)

    def stop(self, code: int) -> None:
        import rclpy

        self.exit_code = code
        self.k = len(self.plan)
        rclpy.try_shutdown()


def main(args=None) -> int:
    return run_node(EvaluatorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
