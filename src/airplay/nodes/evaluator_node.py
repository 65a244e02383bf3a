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
        if self.policy_name not in POLICY_NAMES:
            raise ParameterError(f"parameter 'policy' must be one of {', '.join(POLICY_NAMES)}, "
                                 f"got {self.policy_name!r}")
        for name in ("episode_timeout_s", "startup_timeout_s", "sim_silence_s"):
            if not getattr(self, name) > 0:
                raise ParameterError(f"parameter '{name}' must be > 0, got {getattr(self, name)!r}")
        if not isinstance(self.bootstrap, int) or self.bootstrap < 0:
            raise ParameterError(f"parameter 'bootstrap' must be an integer >= 0, got {self.bootstrap!r}")
        self.scenes = scene_dirs(p["scenes"])
        self.plan = [(str(s), i) for s in self.scenes for i in range(p["episodes"])]
        self.tasks = EpisodeTasks(p["episodes"], p["seed"], p["setting"])
        self.exit_code = 0
        self.started = False
        self.k = -1
        self.sent_at = 0.0
        self.t0 = time.monotonic()
        self.outcomes: list[tuple[str, int, str, int, np.ndarray]] = []  # scene_dir, index, status, steps, trajectory
        self.command_pub = self.create_publisher(String, "episode/command", RELIABLE)
        self.status_sub = self.create_subscription(String, "episode/status", self.on_status, RELIABLE)
        self.live = False  # the current episode has started: the sim must keep publishing /clock
        self.heard = time.monotonic()
        self.create_subscription(ClockMsg, "/clock", self.on_clock, 10)
        self.create_timer(0.05, self.on_timer, clock=Clock(clock_type=ClockType.STEADY_TIME))

    def on_timer(self) -> None:
        now = time.monotonic()
        if not self.started:
            if self.command_pub.get_subscription_count() >= 3 and self.status_sub.get_publisher_count() >= 1:
                self.started = True
                self.get_logger().info(f"graph ready after {now - self.t0:.1f} s; {len(self.plan)} episodes")
                self.t_start = self.sim_seen = now
                self.next_episode()
            elif now - self.t0 > self.startup_timeout_s:
                self.get_logger().error(
                    f"the graph did not come up within {self.startup_timeout_s:.0f} s: episode/command has "
                    f"{self.command_pub.get_subscription_count()} subscribers (need sim, renderer, policy) and "
                    f"episode/status {self.status_sub.get_publisher_count()} publishers (need sim)")
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
        if self.k < len(self.plan) and now - self.sent_at > self.episode_timeout_s:
            self.get_logger().error(f"episode {self.k}: no status from the sim within {self.episode_timeout_s} s; "
                                    "recorded as no_command")
            scene_dir, index = self.plan[self.k]
            _, tasks = self.tasks.load(scene_dir)
            self.record("no_command", 0, np.asarray([tasks[index].start_position], np.float64))

    def next_episode(self) -> None:
        self.k += 1
        if self.k >= len(self.plan):
            self.write()
            self.stop(0)
            return
        scene_dir, index = self.plan[self.k]
        self.tasks.load(scene_dir)
        self.live = False
        self.sent_at = time.monotonic()
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
        self.record(str(status["status"]), int(status["steps"]), np.asarray(status["trajectory"], np.float64))

    def record(self, status: str, steps: int, trajectory: np.ndarray) -> None:
        scene_dir, index = self.plan[self.k]
        self.outcomes.append((scene_dir, index, status, steps, trajectory))
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
        results, total_steps, world = [], 0, None
        for scene_dir in dict.fromkeys(s for s, *_ in self.outcomes):
            world, tasks = self.tasks.load(scene_dir)
            rows = [o for o in self.outcomes if o[0] == scene_dir]
            for _, index, status, steps, trajectory in rows:
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

    def stop(self, code: int) -> None:
        import rclpy

        self.exit_code = code
        self.k = len(self.plan)
        rclpy.try_shutdown()


def main(args=None) -> int:
    return run_node(EvaluatorNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
