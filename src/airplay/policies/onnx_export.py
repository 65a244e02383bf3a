"""Export a learned policy's checkpoint to ONNX and check it against torch (``airplay export --onnx``).

The layout of what is written is :mod:`airplay.policies.onnx_format`'s. The exporter is torch's
TorchScript-based one (``torch.onnx.export(..., dynamo=False)``), chosen deliberately: it ships
with torch 2.14 and needs no further package, while the torch.export-based default needs
``onnxscript``; it traces the eval-mode forward (ACT's latent 0, DP's networks without the
sampling loop), with the batch dimension dynamic. Opset :data:`~airplay.policies.onnx_format.OPSET`.

After writing the graphs under temporary names, the export runs the onnxruntime backend
(:class:`~airplay.policies.onnx_runtime.OnnxPolicy`) and torch (``predict_batch``) on the same
observations (:data:`~airplay.policies.onnx_format.CHECK_OBSERVATIONS`; one at a time, then all as
one batch; DP with the same seeded noise per observation) and measures the largest absolute
difference of the unnormalized commands (m/s, rad/s). Above the tolerance
(:data:`~airplay.policies.onnx_format.TOLERANCE`, or the caller's) the export is refused and the
temporary files removed; otherwise the graphs are renamed into place and ``onnx.json`` written
last, each file atomically.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from airplay.policies.checkpoint import load_policy, save_json
from airplay.policies.observation import ACTION, ACTION_DIM, GOAL, GOAL_DIM, GOAL_IMAGE, IMAGE, STATE, STATE_DIM
from airplay.policies.onnx_format import (
    CHECK_OBSERVATIONS,
    DEFAULT_SUBFOLDER,
    EXPORTABLE,
    FORMAT,
    FORMAT_VERSION,
    INPUT_NAMES,
    OPSET,
    SIDECAR,
    TOLERANCE,
    OnnxExportError,
    sha256,
)

INPUT_DOC = {"image": "camera frames, float32 in [0, 1], (batch, T, 3, S, S), the current one last",
             "state": "state features (config state_features), normalized, (batch, T, D)",
             "goal": "goal minus position in the heading frame (m), normalized, (batch, T, 3)",
             "goal_image": "the view at the goal, float32 in [0, 1], (batch, 3, S, S)",
             "sample": "DP: the noisy normalized chunk, (batch, K, 4)",
             "timestep": "DP: the diffusion step of each row, int64 (batch,)",
             "condition": "DP: the observation encoding condition.onnx gives, (batch, C)"}


class _Part(nn.Module):
    """One exported graph of ``policy``: ``chunk`` (generate), ``condition`` (DP's encoder) or
    ``denoiser`` (DP's U-Net), taking its inputs positionally in ``keys`` order."""

    def __init__(self, policy: nn.Module, part: str, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.policy, self.part, self.keys = policy, part, keys

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        if self.part == "denoiser":
            return self.policy.unet(*inputs)
        batch = dict(zip(self.keys, inputs))
        return self.policy.generate(batch) if self.part == "chunk" else self.policy._condition(batch)


def observation_keys(policy) -> tuple[str, ...]:
    """The batch keys the policy's graphs read, in input order."""
    c = policy.config
    keys = [IMAGE] + ([STATE] if policy.state_dim else [])
    keys += [GOAL] if c.goal == "point" else [GOAL_IMAGE] if c.goal == "image" else []
    return tuple(keys)


def check_batch(policy, n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``n`` raw observations as a batch (:mod:`airplay.policies.observation`): camera frames (even
    rows uniform noise, odd rows smooth gradients with a dark blob, both quantized to 8 bits), level
    states with small velocities, goals drawn from the goal statistics."""
    c = policy.config
    rng = np.random.default_rng(seed)
    s, t = c.image_size, c.n_obs_steps

    def frames(count: int) -> np.ndarray:
        out = rng.integers(0, 256, (count, 3, s, s)).astype(np.float32)
        yy, xx = np.mgrid[0:s, 0:s] / max(s - 1, 1)
        for i in range(1, count, 2):
            cy, cx, r = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.05, 0.3)
            blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
            base = rng.uniform(0, 1, 3)[:, None, None] * (0.5 + 0.5 * yy)[None] + 0.3 * xx[None]
            out[i] = np.round(255 * np.clip(base - 0.8 * blob[None], 0, 1))
        return out / 255.0

    images = frames(n * t).reshape(n, t, 3, s, s)
    state = np.zeros((n, t, STATE_DIM), np.float32)
    yaw = rng.uniform(-np.pi, np.pi, (n, t))
    state[..., 0:3] = rng.uniform(-5, 5, (n, t, 3))
    state[..., 5], state[..., 6] = np.sin(yaw / 2), np.cos(yaw / 2)
    state[..., 7:10] = rng.normal(0, 0.5, (n, t, 3))
    state[..., 12] = rng.normal(0, 0.3, (n, t))
    batch = {IMAGE: torch.as_tensor(images, dtype=torch.float32), STATE: torch.as_tensor(state)}
    if c.goal == "point":
        stats = policy.normalizer.stats[GOAL.replace(".", "__")]
        goal = stats.center.numpy() + stats.scale.numpy() * rng.normal(size=(n, t, GOAL_DIM))
        batch[GOAL] = torch.as_tensor(goal, dtype=torch.float32)
    elif c.goal == "image":
        batch[GOAL_IMAGE] = torch.as_tensor(frames(n), dtype=torch.float32)
    return batch


def _example_inputs(policy, batch: dict) -> dict[str, torch.Tensor]:
    return {INPUT_NAMES[k]: v for k, v in policy.model_inputs({k: batch[k][:1] for k in batch}).items()
            if k in INPUT_NAMES}


def _io(names, tensors, dims) -> list[dict]:
    return [{"name": n, "dtype": str(t.dtype).replace("torch.", ""),
             "shape": ["batch", *list(t.shape[1:])], "doc": INPUT_DOC.get(n, dims.get(n, ""))}
            for n, t in zip(names, tensors)]


def _export_graph(module: nn.Module, args: tuple, names: list[str], outputs: list[str], path: Path, opset: int) -> None:
    dynamic = {n: {0: "batch"} for n in [*names, *outputs]}
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the transformers' fused eval kernels have no ONNX form
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice, tracer notes on shapes
            torch.onnx.export(module.eval(), args, str(path), dynamo=False, input_names=names, output_names=outputs,
                              opset_version=opset, dynamic_axes=dynamic, do_constant_folding=True)
    except Exception as err:  # noqa: BLE001  (torch.onnx raises its own types: UnsupportedOperatorError, ...)
        final = path.parent / path.name.split(".partial")[0].lstrip(".")
        raise OnnxExportError(f"{final}: torch.onnx cannot export it ({type(err).__name__}: {err})") from None
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


def _graphs(policy, batch: dict) -> list[tuple]:
    """(graph name, module, example args, input names, output names, output docs) of each graph."""
    keys = observation_keys(policy)
    inputs = _example_inputs(policy, batch)
    names = [INPUT_NAMES[k] for k in keys]
    args = tuple(inputs[n] for n in names)
    if policy.name != "dp":
        return [("policy", _Part(policy, "chunk", keys), args, names, ["actions"],
                 {"actions": "the normalized chunk of commands, (batch, K, 4)"})]
    cond = policy._condition(dict(zip(keys, args)))
    k = policy.config.chunk_size
    den_args = (torch.zeros(1, k, ACTION_DIM), torch.full((1,), policy.config.num_train_timesteps - 1,
                                                          dtype=torch.long), cond)
    return [("condition", _Part(policy, "condition", keys), args, names, ["condition"],
             {"condition": "the observation encoding, (batch, C)"}),
            ("denoiser", _Part(policy, "denoiser", keys), den_args, ["sample", "timestep", "condition"],
             ["model_output"], {"model_output": f"the predicted {policy.config.prediction_type}, (batch, K, 4)"})]


def _sidecar(policy, graphs: dict, checkpoint: Path, opset: int, tolerance: float) -> dict:
    import airplay

    normalization = {}
    for key, stats in zip(policy.normalizer.keys, policy.normalizer.stats.values()):
        if key == STATE and not policy.state_dim:
            continue
        normalization[key] = {"mode": stats.mode, "center": [float(v) for v in stats.center],
                              "scale": [float(v) for v in stats.scale],
                              "applies": "x_model = (x - center) / scale" if key != ACTION else
                              "command = actions * scale + center (m/s, rad/s)"}
    c = policy.config
    meta = {"format": FORMAT, "version": FORMAT_VERSION, "type": policy.name, "config": c.to_dict(),
            "opset": opset, "exporter": "torch.onnx.export (TorchScript-based, dynamo=False)",
            "torch": torch.__version__, "airplay_version": airplay.__version__,
            "source": {"checkpoint": str(checkpoint), "model_sha256": sha256(checkpoint / "model.safetensors")},
            "graphs": graphs, "normalization": normalization,
            "preprocessing": {"image": f"uint8 HxWx3 camera frame -> bilinear antialiased resize to {c.image_size}x"
                                       f"{c.image_size}, rounded, /255 (airplay.policies.observation.resize_images)",
                              "history": f"the last {c.n_obs_steps} observation(s), the first of an episode "
                                         "repeated to fill it",
                              "state_features": c.state_features},
            "check": {"tolerance": tolerance, "units": "largest absolute difference of unnormalized commands, "
                                                       "m/s and rad/s"}}
    if policy.name == "dp":
        steps = policy.sampler.timesteps(c.num_inference_steps)
        meta["sampling"] = {"scheduler": "DDIM (eta 0), squared-cosine schedule, trailing steps",
                            "alphas_cumprod": [float(v) for v in policy.sampler.ac], "timesteps": steps,
                            "prediction_type": c.prediction_type, "clip": 1.0,
                            "noise": f"torch.randn(B, {c.chunk_size}, 4) from torch.Generator().manual_seed("
                                     f"{c.seed}) at each reset, drawn per chunk"}
    return meta


def _generators(seeds: list[int]) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(1000 + s) for s in seeds]


def compare(policy, onnx_policy, batch: dict) -> float:
    """Largest absolute difference (m/s, rad/s) of torch's and onnxruntime's commands on ``batch``:
    each row alone, then all rows as one batch; DP's noise seeded per row alike in both."""
    n = next(iter(batch.values())).shape[0]
    worst = 0.0
    rows = [({k: v[i:i + 1] for k, v in batch.items()}, [i]) for i in range(n)] + [(batch, list(range(n)))]
    for part, seeds in rows:
        ref = policy.predict_batch(part, _generators(seeds), exact=False).float().numpy()
        got = onnx_policy.predict_batch(part, _generators(seeds))
        if got.shape != ref.shape:
            raise OnnxExportError(f"onnxruntime gives commands of shape {got.shape}, torch {ref.shape}")
        worst = max(worst, float(np.abs(got.astype(np.float64) - ref).max()))
    return worst


def export_onnx(checkpoint: str | Path, out: str | Path | None = None, tolerance: float | None = None,
                opset: int = OPSET, observations: int = CHECK_OBSERVATIONS, log=print) -> dict:
    """Export the checkpoint folder ``checkpoint`` to ``out`` (default ``CHECKPOINT/onnx``) and check
    it (module docstring); the written ``onnx.json`` as a dict. OnnxExportError (or
    :class:`~airplay.policies.checkpoint.CheckpointError`) names the file and what is wrong;
    nothing is left half-written."""
    from airplay.policies.onnx_runtime import OnnxPolicy

    checkpoint = Path(checkpoint)
    policy = load_policy(checkpoint)
    if policy.name not in EXPORTABLE:
        raise OnnxExportError(f"{checkpoint / 'config.json'}: a {policy.name!r} policy; ONNX export is for "
                              f"{', '.join(EXPORTABLE)}")
    tolerance = TOLERANCE[policy.name] if tolerance is None else float(tolerance)
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0 (m/s, rad/s), got {tolerance!r}")
    out = Path(out) if out is not None else checkpoint / DEFAULT_SUBFOLDER
    out.mkdir(parents=True, exist_ok=True)
    batch = check_batch(policy, observations)
    tag = f".partial-{os.getpid()}"
    temps: list[Path] = []
    try:
        graphs = {}
        t0 = time.perf_counter()
        for name, module, args, names, outputs, out_docs in _graphs(policy, batch):
            path = out / f".{name}.onnx{tag}"
            temps.append(path)
            _export_graph(module, args, names, outputs, path, opset)
            with torch.no_grad():
                result = module(*args)
            graphs[name] = {"file": path.name, "sha256": sha256(path), "inputs": _io(names, args, {}),
                            "outputs": _io(outputs, [result], out_docs)}
        export_s = time.perf_counter() - t0
        meta = _sidecar(policy, graphs, checkpoint, opset, tolerance)
        try:
            onnx_policy = OnnxPolicy(out, meta=meta)
        except OnnxExportError as err:
            raise OnnxExportError(f"the exported graphs do not load: {err}") from None
        error = compare(policy, onnx_policy, batch)
        log(f"{policy.name}: onnxruntime vs torch on {observations} observations (each alone and as one batch): "
            f"max abs error {error:.3g} (tolerance {tolerance:g}; m/s, rad/s)")
        if not error <= tolerance:
            raise OnnxExportError(f"{out}: onnxruntime's commands differ from torch's by {error:.3g} > tolerance "
                                  f"{tolerance:g} (m/s, rad/s); nothing written")
        meta["check"].update(max_abs_error=error, observations=observations, export_s=round(export_s, 2))
        for name, entry in graphs.items():
            final = out / f"{name}.onnx"
            os.replace(out / entry["file"], final)
            entry["file"] = final.name
        temps = []
        save_json(out / SIDECAR, meta)
        return meta
    finally:
        for path in temps:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
