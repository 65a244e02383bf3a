"""The onnxruntime backend of the learned policies: an exported policy (:mod:`airplay.policies.onnx_format`)
behind the same contract as the torch one.

:class:`OnnxPolicy` keeps what :class:`~airplay.policies.learned.LearnedPolicy` keeps per episode
(the observation history, the adapter's queue or ensemble, DP's noise generator seeded with the
config's ``seed`` at each ``reset``) and runs the graphs in onnxruntime on one CPU thread by
default (as the torch path flies, :mod:`airplay.threads`). The preprocessing is the torch path's
own code (:class:`~airplay.policies.observation.ObservationHistory`: the image resize, the state
features), so both backends see the same inputs; normalization and DP's DDIM loop are numpy here,
from ``onnx.json``. DP's initial noise is drawn as torch draws it (``torch.randn`` from the
generator), so the two backends sample the same chunk up to the graphs' rounding. Commands equal
torch's within the tolerance the export was checked to (``onnx.json`` ``check``).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from airplay.policies.base import Policy
from airplay.policies.observation import ACTION, STATE, STATE_FEATURES, ObservationHistory, state_features
from airplay.policies.onnx_format import INPUT_NAMES, OnnxExportError, graph_file, read_sidecar

DEFAULT_THREADS = 1
"""onnxruntime's intra-op threads of a policy: one core, as the torch policies fly."""


def ort_session(path: Path, threads: int = DEFAULT_THREADS):
    """An onnxruntime CPU session of the graph file ``path`` on ``threads`` intra-op threads
    (sequential execution); OnnxExportError names the file where onnxruntime refuses it."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise OnnxExportError(f"{path}: the onnxruntime backend needs the onnxruntime package "
                              "(pip install 'airplay[onnx]')") from None
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(threads)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as err:  # noqa: BLE001  (onnxruntime raises its own types: InvalidProtobuf, Fail, ...)
        raise OnnxExportError(f"{path}: onnxruntime cannot load it ({type(err).__name__}: {err})") from None


def ddim_step(model_out: np.ndarray, t: int, t_prev: int, x: np.ndarray, alphas_cumprod: np.ndarray,
              prediction_type: str, clip: float = 1.0) -> np.ndarray:
    """One deterministic DDIM step (eta = 0) in numpy float32, the maths of
    :meth:`airplay.policies.diffusion.DDIMSampler.step`."""
    a_t = float(alphas_cumprod[t])
    a_prev = float(alphas_cumprod[t_prev]) if t_prev >= 0 else 1.0
    x0 = (x - math.sqrt(1 - a_t) * model_out) / math.sqrt(a_t) if prediction_type == "epsilon" else model_out
    x0 = np.clip(x0, -clip, clip)
    eps = (x - math.sqrt(a_t) * x0) / math.sqrt(1 - a_t)
    return (math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev) * eps).astype(np.float32, copy=False)


class OnnxPolicy(Policy):
    """A learned policy run by onnxruntime from its export folder (or a checkpoint folder exported
    into ``CHECKPOINT/onnx``). ``threads``: onnxruntime intra-op threads. ``config_changes``
    override execution fields (``execution_horizon``, ``adapter``) as those of
    :func:`~airplay.policies.checkpoint.load_policy` do.
    ``meta``: a sidecar not yet on disk (the export's own check passes it)."""

    backend = "onnxruntime"

    def __init__(self, folder: str | Path, threads: int = DEFAULT_THREADS, meta: dict | None = None,
                 **config_changes) -> None:
        from airplay.policies.checkpoint import policy_class

        folder, meta = (Path(folder), meta) if meta is not None else read_sidecar(folder)
        cls = policy_class(meta["type"])
        try:
            config = cls.config_class.from_dict(meta["config"])
        except ValueError as err:
            raise OnnxExportError(f"{folder / 'onnx.json'}: field 'config': {err}") from None
        if config_changes:
            config = config.replace(**config_changes)
        super().__init__(config)
        self.name = meta["type"]
        self.folder, self.meta = folder, meta
        self.state_dim = STATE_FEATURES[config.state_features]
        self.history = ObservationHistory(config.n_obs_steps, config.image_size, config.goal)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.sessions = {}
        for name, entry in meta["graphs"].items():
            path = graph_file(folder, meta, name)
            session = ort_session(path, threads)
            names = sorted(i.name for i in session.get_inputs())
            if names != sorted(i["name"] for i in entry["inputs"]):
                raise OnnxExportError(f"{path}: inputs {names} are not those {folder / 'onnx.json'} names "
                                      f"({sorted(i['name'] for i in entry['inputs'])}): a file of another export")
            self.sessions[name] = session
        self.normalization = {key: (np.asarray(v["center"], np.float32), np.asarray(v["scale"], np.float32))
                              for key, v in meta["normalization"].items()}
        sampling = meta.get("sampling") or {}
        self.alphas_cumprod = np.asarray(sampling.get("alphas_cumprod", ()), np.float32)
        self.timesteps = [int(t) for t in sampling.get("timesteps", ())]
        self._row_generators: list[torch.Generator] | None = None

    # -- the policy contract ---------------------------------------------------------------
    def reset(self, task=None) -> None:
        Policy.reset(self, task)
        self.history.reset()
        self.generator.manual_seed(self.config.seed)

    def observe(self, obs: dict) -> None:
        self.history.append(obs)

    def predict_action_chunk(self, obs: dict) -> np.ndarray:
        if not len(self.history):
            self.observe(obs)
        return self.predict_batch(self.history.batch("cpu"))[0]

    # -- inference -------------------------------------------------------------------------
    def graph_inputs(self, batch: dict) -> dict[str, np.ndarray]:
        """A raw batch (recorded 13-value states, images in [0, 1]; torch tensors or arrays) -> the
        normalized float32 inputs of the graphs, by input name."""
        wanted = {i["name"] for entry in self.meta["graphs"].values() for i in entry["inputs"]}
        inputs = {}
        for key, name in INPUT_NAMES.items():
            if name not in wanted:
                continue
            x = batch[key]
            if key == STATE:
                x = state_features(torch.as_tensor(x, dtype=torch.float32), self.config.state_features)
            x = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
            x = x.astype(np.float32, copy=False)
            if key in self.normalization:
                center, scale = self.normalization[key]
                x = (x - center) / scale
            inputs[name] = np.ascontiguousarray(x)
        return inputs

    def noise(self, b: int, *shape: int) -> np.ndarray:
        """(b, *shape) inference noise drawn as :meth:`LearnedPolicy.noise` draws it (torch's generator)."""
        if self._row_generators is None:
            return torch.randn(b, *shape, generator=self.generator).numpy()
        return torch.cat([torch.randn(1, *shape, generator=g) for g in self._row_generators]).numpy()

    def predict_batch(self, batch: dict, generators: list[torch.Generator] | None = None) -> np.ndarray:
        """Unnormalized (B, K, 4) float32 commands (m/s, rad/s) for a batch of raw observations;
        ``generators``: DP's noise of row b from ``generators[b]`` (default: the policy's own)."""
        inputs = self.graph_inputs(batch)
        b = inputs["image"].shape[0]
        if generators is not None and len(generators) != b:
            raise ValueError(f"generators: {len(generators)} for a batch of {b}")
        if "policy" in self.sessions:
            out = self.sessions["policy"].run(["actions"], inputs)[0]
        else:
            out = self._sample(inputs, b, generators)
        center, scale = self.normalization[ACTION]
        return (out * scale + center).astype(np.float32, copy=False)

    def _sample(self, inputs: dict, b: int, generators) -> np.ndarray:
        """DP: the observation's condition once, then the DDIM loop over the denoiser."""
        cond = self.sessions["condition"].run(["condition"], inputs)[0]
        self._row_generators = generators
        try:
            x = self.noise(b, self.config.chunk_size, 4)
        finally:
            self._row_generators = None
        denoiser = self.sessions["denoiser"]
        for i, t in enumerate(self.timesteps):
            t_prev = self.timesteps[i + 1] if i + 1 < len(self.timesteps) else -1
            out = denoiser.run(["model_output"], {"sample": x, "timestep": np.full((b,), t, np.int64),
                                                  "condition": cond})[0]
            x = ddim_step(out, t, t_prev, x, self.alphas_cumprod, self.config.prediction_type)
        return x


def load_onnx_policy(folder: str | Path, name: str | None = None, threads: int = DEFAULT_THREADS,
                     **config_changes) -> OnnxPolicy:
    """The exported policy of ``folder`` (an export folder, or a checkpoint exported into
    ``CHECKPOINT/onnx``); ``name``: the policy it must be (ValueError otherwise)."""
    policy = OnnxPolicy(folder, threads=threads, **config_changes)
    if name is not None and policy.name != name:
        raise ValueError(f"ONNX export {policy.folder} holds a {policy.name!r} policy, not {name!r}")
    return policy

