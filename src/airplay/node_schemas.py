"""The parameters of the sim, renderer, policy, evaluator, recorder and viewer nodes, one schema each.

Each node declares exactly its schema's parameters (``airplay.nodes.params``), and the graphs
(:mod:`airplay.graph`) take their launch arguments' defaults and descriptions from here. The
mavlink_bridge node's schema is :data:`airplay.bridge.parameters.BRIDGE_SCHEMA`. The checks
here are each value's own (type, range, choices); what needs more (a policy name, a checkpoint
folder, the VLN options' files) the node checks when it starts. No rclpy here.

Units: seconds, milliseconds, hertz as the names say; scene and output paths relative to the
node's working folder.
"""

from __future__ import annotations

from airplay.node_params import NodeSchema, Param
from airplay.policy_names import LEARNED_POLICY_NAMES, POLICY_NAMES, VLN_POLICY_NAMES

SETTINGS = ("pointgoal", "imagegoal", "goalfree", "vln")
"""Task settings: the task sampler's, and vln (AirVLN-R1's episodes)."""

RENDER_BACKENDS = ("auto", "cpu", "gsplat")

POLICY_BACKENDS = ("torch", "onnxruntime")
"""What runs a learned policy (cnn_bc, act, dp): torch from the checkpoint, or onnxruntime from its
ONNX export (``airplay export --onnx``; :mod:`airplay.policies.onnx_runtime`)."""

EPISODE = NodeSchema("episode", (
    Param("scenes", "scenes", "scene folders, comma-separated, or a folder of scenes; relative paths are taken "
                              "from each node's working folder", nonempty=True),
    Param("episodes", 10, "episodes per scene", min=1),
    Param("seed", 0, "seed of the task sampling", min=0),
    Param("setting", "pointgoal", f"task setting: pointgoal, imagegoal, goalfree, or vln (with policy:="
                                  f"{' or '.join(VLN_POLICY_NAMES)})", choices=SETTINGS),
    Param("vln_config", "", "setting:=vln: a YAML file used instead of config/vln.yaml"),
    Param("vln_episodes", "", "setting:=vln: an episode file (airplay's, or AirNav/CityNav-style) used instead of "
                              "sampling"),
))
"""What every node of a graph knows: which episodes (the VLN ones: vln_config, vln_episodes)."""

LOCKSTEP = Param("lockstep", True, "true: the sim advances a step only once the command for its latest observation "
                                   "has come (results independent of timing); false: real time, as on a vehicle")
RENDER_IMAGES = Param("render_images", True, "render RGB and depth every step (false: nothing is rendered; for "
                                             "policies that read no camera)")
POLICY = Param("policy", "expert", f"the policy flown: {', '.join(POLICY_NAMES)} ({', '.join(VLN_POLICY_NAMES)} "
                                   "with setting:=vln), or module:factory", nonempty=True)
CHECKPOINT = Param("checkpoint", "", f"checkpoint folder of a learned policy ({', '.join(LEARNED_POLICY_NAMES)}; "
                                     "what its training wrote, e.g. airplay train --out)")
EXECUTION_HORIZON = Param("execution_horizon", 0, "controls executed per predicted chunk (0: the policy's own)",
                          min=0)
POLICY_BACKEND = Param("policy_backend", "torch", "what runs a learned policy (cnn_bc, act, dp): torch, or "
                                                "onnxruntime (one thread) from the checkpoint's ONNX export (airplay "
                                                "export --onnx; checkpoint: the export folder, or a checkpoint folder "
                                                "exported into CHECKPOINT/onnx)", choices=POLICY_BACKENDS)
POLICY_BUDGET_MS = Param("policy_budget_ms", 0.0, "per-step compute budget of the policy in its own CPU time, ms; a "
                                                  "step over it ends the episode as over_budget (0: none)",
                         unit="ms", min=0.0, finite=True)
WIND = Param("wind", "", "external velocity disturbance acting on the vehicle: wind=VX:VY[:VZ],gust=STD,"
                        "gust_tau=S,drag_tau=S,impulse=VX:VY[:VZ]@STEP (map ENU m/s; airplay.sim.disturbance; "
                        "empty: none)")

SIM = EPISODE.with_params(
    "sim",
    LOCKSTEP,
    WIND,
    Param("republish_s", 0.5, "lockstep: the latest observation is published again after this long without a "
                              "command, s of wall time", unit="s", above=0.0, finite=True, dynamic=True),
    Param("clock_rate_hz", 10.0, "/clock messages per second of sim time (0: one every 20 ms step); odom carries "
                                 "every step's stamp", unit="Hz", min=0.0, finite=True),
)

RENDERER = EPISODE.with_params(
    "renderer",
    LOCKSTEP,
    Param("render_backend", "auto", "renderer backend: auto, cpu or gsplat (CUDA)", choices=RENDER_BACKENDS),
    RENDER_IMAGES,
)

VLN_BACKEND = (
    Param("vln_backend", "transformers", "setting:=vln: AirVLN-R1's model backend, transformers (model:=DIR) or "
                                         "openai (endpoint:=URL)", choices=("transformers", "openai")),
    Param("model", "", "vln_backend:=transformers: local Qwen2.5-VL folder (e.g. the AirVLN-R1 weights)"),
    Param("endpoint", "", "vln_backend:=openai: API base of an OpenAI-compatible server, e.g. "
                          "http://127.0.0.1:8000/v1"),
    Param("served_model", "", "vln_backend:=openai: the model name (empty: the server's first)"),
    Param("device", "cpu", "vln_backend:=transformers: cpu or cuda[:N]"),
    Param("max_new_tokens", 64, "setting:=vln: tokens per model answer", min=1),
    Param("image_size", "", "setting:=vln: W,H to resize the views sent to the model (empty: as rendered)"),
    Param("history_offsets", "", "setting:=vln: history views, steps back, e.g. -7,-4,-2,-1 (empty: that default)"),
)
"""The policy node's AirVLN-R1 backend options (airplay.vln.options checks them together)."""

POLICY_NODE = EPISODE.with_params(
    "policy",
    LOCKSTEP, POLICY, CHECKPOINT, POLICY_BACKEND, EXECUTION_HORIZON, POLICY_BUDGET_MS,
    *VLN_BACKEND,
    Param("vehicle", False, "policy:=airvln_r1 on a vehicle (no evaluator: the node takes the instruction itself)"),
    Param("instruction", "", "vehicle: the instruction to fly (empty: the operator's on the instruction topic)"),
    Param("episode_instruction", False, "vehicle rehearsal: the VLN episode's instruction for (scene, index) when "
                                        "none has come"),
)

EVALUATOR = EPISODE.with_params(
    "evaluator",
    POLICY, CHECKPOINT, EXECUTION_HORIZON, POLICY_BUDGET_MS, WIND,
    Param("out", "out/sim-eval-ros", "results folder (episodes.jsonl, summary.json, plots), relative to the "
                                     "evaluator's working folder", nonempty=True),
    Param("startup_timeout_s", 0.0, "give up (exit 1) when the graph has not come up after this long, s of wall "
                                    "time (0: no limit)", unit="s", min=0.0, finite=True, dynamic=True),
    RENDER_IMAGES,
    Param("bootstrap", 1000, "bootstrap resamples of the confidence intervals in summary.json", min=0),
    Param("viewer", False, "the graph has a viewer node: the first episode waits until it subscribes to "
                           "episode/progress"),
)

RECORDER = EPISODE.with_params(
    "recorder",
    Param("out", "bags", "the recorder's bags, one per episode: OUT/<scene>/<task_id>/", nonempty=True),
    Param("topics", "", "the recorder's topics, comma-separated absolute names (empty: its defaults)"),
    Param("record_depth", False, "record the depth images as well as RGB"),
    Param("split", "episode", "episode: one bag per episode; none: one bag for the whole run",
          choices=("episode", "none")),
    Param("max_bytes", 0, "split a bag's files at this many bytes (0: never)", unit="B", min=0),
    LOCKSTEP,
    Param("flush_interval_s", 0.5, "the bag is flushed to disk at least this often, s of wall time (a SIGKILL "
                                   "loses at most about this much)", unit="s", above=0.0, finite=True),
    Param("grace_s", 1.0, "wall time the recorder waits for an episode's last messages after its end, s",
          unit="s", min=0.0, finite=True),
)

VIEWER = EPISODE.with_params(
    "viewer",
    LOCKSTEP,
    RENDER_IMAGES,
    Param("out", "", "write the live view to this rerun recording (.rrd; empty: none)"),
    Param("connect", "", "stream the live view to the rerun gRPC server at this URL, e.g. "
                         "rerun+http://127.0.0.1:9876/proxy (empty: none)"),
    Param("web_port", 9090, "port of rerun's web viewer on 127.0.0.1, served by the node when out and connect "
                            "are both empty", min=1, max=65535),
    Param("grpc_port", 9876, "port of the rerun gRPC server on 127.0.0.1 that the web viewer reads, with "
                             "web_port", min=1, max=65535),
    Param("points", 100_000, "at most this many splat points drawn per scene (0: the collision mesh only)", min=0),
    Param("vehicle", False, "on a vehicle (the fly graph): the task from the bridge's (scene_dir, index) as the "
                            "policy derives it, and the vehicle's phases and the supervisor's interventions logged"),
)

SCHEMAS = {s.node: s for s in (SIM, RENDERER, POLICY_NODE, EVALUATOR, RECORDER, VIEWER)}
"""Node name -> its schema (the mavlink_bridge's is in airplay.bridge.parameters)."""
