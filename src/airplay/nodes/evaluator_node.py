"""``evaluator``: drives the episodes, collects the sim's statuses, writes the results, shuts down.

Waits until the sim, renderer and policy subscribe to ``episode/command`` (>= 3 matched) and
the sim's ``episode/status`` publisher is matched (gives up after ``startup_timeout_s`` with an
error, exit code 1). Then, for each scene folder of ``scenes`` in order and ``i`` in
``range(episodes)``, publishes ``episode/command`` {"episode": k, "scene_dir", "index": i}
and waits for the sim's terminal ``episode/status`` of episode k (at most
``episode_timeout_s`` of wall time; past it the episode is recorded as ``no_command``).
If the sim dies (no ``/clock`` for ``sim_silence_s`` once an episode has started - the sim
publishes it at least every ``republish_s`` - or no ``episode/status`` publisher for 2 s) the
run stops with exit code 1, after writing the results of the finished episodes.
The results (``episodes.jsonl``, ``summary.json``, ``<scene>_trajectories.png``, meta
runtime "ros") are computed as :func:`airplay.eval.runner.evaluate_inprocess` computes
them; the table is printed; then the node shuts rclpy down (exit code 0).

Setting vln (AirVLN-R1): the episodes are the in-process VLN runner's
(:func:`airplay.vln.evaluate.vln_scene`, from ``vln_config`` / ``vln_episodes``). Before each
``episode/command`` the evaluator publishes the episode's instruction on ``instruction``
(std_msgs/String, reliable). An episode is recorded when both the sim's terminal
``episode/status`` and the policy's ``episode/policy`` report of it have arrived (the report
carries stop_reason, vln_steps, queries, format_failures, model time; see the policy node);
without a report within ``report_timeout_s`` it is recorded with the sim's status alone
(logged). The outcome is AirNav's (:func:`airplay.vln.evaluate.vln_status`: success only if
the episode ends within the radius; ``stopped`` for a STOP outside it), and the results
(``episodes.jsonl`` with persona / instruction / vln fields, ``per_persona`` and ``meta.vln`` in
``summary.json``) are written by the in-process runner's own functions
(:func:`~airplay.vln.evaluate.vln_episode_result`, :func:`~airplay.vln.evaluate.write_vln_results`).
The start-up also waits for the policy's ``instruction`` subscription and ``episode/policy``
publisher.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rosgraph_msgs.msg import Clock as ClockMsg
from std_msgs.msg import String

from airplay.nodes.common import (RELIABLE, EpisodeTasks, ParameterError, declare, episode_parameters, json_message,
                                  json_payload, run_node, scene_dirs)


class EvaluatorNode(Node):
    def __init__(self) -> None:
        super().__init__("evaluator")
        from airplay.policies import POLICY_NAMES

        p = episode_parameters(self)
        self.params = p
        self.policy_name = declare(self, "policy", "expert")
        self.checkpoint = str(declare(self, "checkpoint", ""))  # recorded in summary.json's meta
        self.execution_horizon = int(declare(self, "execution_horizon", 0))
        self.out = Path(declare(self, "out", "out/sim-eval-ros"))
        self.episode_timeout_s = float(declare(self, "episode_timeout_s", 300.0))
        self.startup_timeout_s = float(declare(self, "startup_timeout_s", 60.0))
        self.render_images = declare(self, "render_images", True)
        self.bootstrap = declare(self, "bootstrap", 1000)
        self.sim_silence_s = float(declare(self, "sim_silence_s", 5.0))
        self.report_timeout_s = float(declare(self, "report_timeout_s", 10.0))
        if self.policy_name not in POLICY_NAMES:
            raise ParameterError(f"parameter 'policy' must be one of {', '.join(POLICY_NAMES)}, "
                                 f"got {self.policy_name!r}")
        for name in ("episode_timeout_s", "startup_timeout_s", "sim_silence_s", "report_timeout_s"):
            if not getattr(self, name) > 0:
                raise ParameterError(f"parameter '{name}' must be > 0, got {getattr(self, name)!r}")
        if not isinstance(self.bootstrap, int) or self.bootstrap < 0:
            raise ParameterError(f"parameter 'bootstrap' must be an integer >= 0, got {self.bootstrap!r}")
        self.scenes = scene_dirs(p["scenes"])
        self.tasks = EpisodeTasks.from_parameters(p)
        self.vln = p["setting"] == "vln"
        if self.vln and self.policy_name != "airvln_r1":
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
            try:  # now, not in the timed run (the other nodes load it before they subscribe)
                self.tasks.load(self.plan[0][0])
            except Exception as exc:
                raise ParameterError(f"parameter 'scenes' ({self.plan[0][0]}): {exc}") from None
        self.reports: dict[int, dict] = {}   # vln: the policy's report per episode
        self.ended = None                    # vln: (status, steps, trajectory, wall time) waiting for a report
        self.exit_code = 0
        self.started = False
        self.k = -1
        self.sent_at = 0.0
        self.t0 = time.monotonic()
        self.outcomes: list[tuple] = []  # scene_dir, index, status, steps, trajectory, policy report (vln)
        self.command_pub = self.create_publisher(String, "episode/command", RELIABLE)
        self.status_sub = self.create_subscription(String, "episode/status", self.on_status, RELIABLE)
        if self.vln:
            self.instruction_pub = self.create_publisher(String, "instruction", RELIABLE)
            self.report_sub = self.create_subscription(String, "episode/policy", self.on_report, RELIABLE)
        self.live = False  # the current episode has started: the sim must keep publishing /clock
        self.heard = time.monotonic()
        self.create_subscription(ClockMsg, "/clock", self.on_clock, 10)
        self.create_timer(0.05, self.on_timer, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def on_timer(self) -> None:
        now = time.monotonic()
        if not self.started:
            vln_ready = not self.vln or (self.instruction_pub.get_subscription_count() >= 1
                                         and self.report_sub.get_publisher_count() >= 1)
            if (self.command_pub.get_subscription_count() >= 3 and self.status_sub.get_publisher_count() >= 1
                    and vln_ready):
                self.started = True
                self.get_logger().info(f"graph ready after {now - self.t0:.1f} s; {len(self.plan)} episodes")
                self.t_start = self.sim_seen = now
                self.next_episode()
            elif now - self.t0 > self.startup_timeout_s:
                self.get_logger().error(
                    f"the graph did not come up within {self.startup_timeout_s:.0f} s: episode/command has "
                    f"{self.command_pub.get_subscription_count()} subscribers (need sim, renderer, policy) and "
                    f"episode/status {self.status_sub.get_publisher_count()} publishers (need sim)"
                    + (f", instruction {self.instruction_pub.get_subscription_count()} subscribers and "
                       f"episode/policy {self.report_sub.get_publisher_count()} publishers (need policy)"
                       if self.vln else ""))
                self.stop(1)
            return
        silent = self.live and now - self.heard > self.sim_silence_s
        if self.k < len(self.plan) and (self.status_sub.get_publisher_count() == 0 or silent):
            if silent or now - self.sim_seen > 2.0:
                self.get_logger().error(f"the sim left the graph during episode {self.k} (silent for "
                                        f"{now - self.heard:.1f} s); stopping the run")
                if self.outcomes:
                    self.write()
                self.stop(1)
            return
        self.sim_seen = now
        if self.ended is not None and now - self.ended[3] > self.report_timeout_s:
            self.get_logger().error(f"episode {self.k}: no episode/policy report from the policy within "
                                    f"{self.report_timeout_s} s; recorded with the sim's status alone")
            self.record(*self.ended[:3], {})
            return
        if self.k < len(self.plan) and now - self.sent_at > self.episode_timeout_s:
            self.get_logger().error(f"episode {self.k}: no status from the sim within {self.episode_timeout_s} s; "
                                    "recorded as no_command")
            scene_dir, index = self.plan[self.k]
            _, tasks = self.tasks.load(scene_dir)
            self.record("no_command", 0, np.asarray([tasks[index].start_position], np.float64),
                        self.reports.get(self.k, {}))

    def next_episode(self) -> None:
        self.k += 1
        if self.k >= len(self.plan):
            self.write()
            self.stop(0)
            return
        scene_dir, index = self.plan[self.k]
        self.tasks.load(scene_dir)
        self.live = False
        self.ended = None
        self.sent_at = time.monotonic()
        if self.vln:  # before the command: the policy acts only once it has the instruction
            self.instruction_pub.publish(String(data=self.tasks.vln.episodes[index].instruction))
        self.command_pub.publish(json_message({"episode": self.k, "scene_dir": scene_dir, "index": index}))

    def on_clock(self, msg) -> None:
        self.heard = time.monotonic()

    def on_status(self, msg: String) -> None:
        status = json_payload(msg)
        self.heard = time.monotonic()
        if status.get("episode") == self.k and status.get("status") == "started":
            self.live = True
        if status.get("episode") != self.k or status.get("status") == "started" or self.k >= len(self.plan):
            return
        ended = (str(status["status"]), int(status["steps"]), np.asarray(status["trajectory"], np.float64))
        if not self.vln:
            self.record(*ended)
        elif self.k in self.reports:
            self.record(*ended, self.reports[self.k])
        elif self.ended is None:
            self.ended = (*ended, time.monotonic())  # wait for the policy's report

    def on_report(self, msg: String) -> None:
        try:
            report = json_payload(msg)
            episode = int(report["episode"])
        except (ValueError, KeyError, TypeError) as exc:
            self.get_logger().error(f"bad episode/policy {msg.data[:200]!r}: {exc}")
            return
        self.reports.setdefault(episode, report)
        if episode == self.k and self.ended is not None:
            self.record(*self.ended[:3], report)

    def record(self, status: str, steps: int, trajectory: np.ndarray, info: dict | None = None) -> None:
        scene_dir, index = self.plan[self.k]
        self.ended = None
        self.outcomes.append((scene_dir, index, status, steps, trajectory, info or {}))
        self.get_logger().info(f"episode {self.k} ({Path(scene_dir).name} #{index}): {status}, {steps} steps")
        self.next_episode()

    def write(self) -> None:
        from airplay.eval.aggregate import aggregate
        from airplay.eval.results import format_table, write_results
        from airplay.eval.runner import EvalConfig, plot_scene, results_meta, task_result

        p = self.params
        cfg = EvalConfig(scenes=[Path(s) for s in self.scenes], policy=self.policy_name, setting=p["setting"],
                         episodes=p["episodes"], seed=p["seed"], render_images=bool(self.render_images),
                         bootstrap=self.bootstrap, checkpoint=self.checkpoint,
                         execution_horizon=self.execution_horizon)
        elapsed = time.monotonic() - self.t_start
        if self.vln:
            return self.write_vln(cfg, elapsed)
        results, total_steps, world = [], 0, None
        for scene_dir in dict.fromkeys(s for s, *_ in self.outcomes):
            world, tasks = self.tasks.load(scene_dir)
            rows = [o for o in self.outcomes if o[0] == scene_dir]
            for _, index, status, steps, trajectory, _ in rows:
                total_steps += steps
                results.append(task_result(world, tasks[index], cfg, trajectory, status))
            plot_scene(self.out / f"{world.name}_trajectories.png", world, [tasks[o[1]] for o in rows],
                        [o[4] for o in rows], [o[2] for o in rows], cfg)
        summary = aggregate(results, success_radius_m=world.protocol.success_radius_m, bootstrap=cfg.bootstrap,
                            seed=cfg.seed)
        # The graph has no separate set-up phase to exclude: flying time is the wall time of the run.
        meta = results_meta(cfg, world, "ros", total_steps, elapsed, elapsed)
        write_results(self.out, results, summary, meta)
        print(format_table(summary), flush=True)
        print(f"\n{total_steps} control steps through the ROS graph in {elapsed:.1f} s = "
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
            for _, index, status, steps, trajectory, info in rows:
                total_steps += steps
                model_s += float(info.get("model_time_s", 0.0))
                last = info or last
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
