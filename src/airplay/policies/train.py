"""The training loop shared by every learned policy (one loop, no per-baseline copies).

Layout of an output folder ``OUT``:

* ``OUT/config.json``, ``OUT/model.safetensors`` - the final policy (``--checkpoint OUT``).
* ``OUT/checkpoints/step_NNNNNNNN/`` - periodic checkpoints with ``training_state.*`` to
  resume; the newest complete one is resumed from (folders are renamed into place).
* ``OUT/train_log.csv`` - step, loss, learning rate, samples/s and the policy's loss terms.

AdamW with a linear warm-up then cosine decay from the peak learning rate; gradient norm
clipping; the batch sampler, dropout and noise all follow ``seed`` (resumed exactly).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
import time
from pathlib import Path

import torch

from airplay.policies.checkpoint import (STATE_FILE, STATE_JSON, policy_class, save_json, save_policy,
                                         save_tensors)
from airplay.policies.dataset import ChunkDataset

TABLE9 = {
    "act": {"steps": 34_650, "batch_size": 32, "lr": 1e-5},
    "dp": {"steps": 54_450, "batch_size": 32, "lr": 1e-4},
    "cnn_bc": {"steps": 5_280, "batch_size": 256, "lr": 3e-4},
}
"""AirPlayground Table 9: updates, batch size and peak learning rate per policy."""


@dataclasses.dataclass
class TrainConfig:
    """How to train. steps: optimizer updates; lr: peak learning rate; warmup_steps: linear
    warm-up (default: 5 % of steps, at most 500); grad_clip: max gradient L2 norm;
    save_every / log_every: in updates (0 = only at the end); keep: periodic checkpoints kept."""

    policy: str
    steps: int
    batch_size: int
    lr: float
    weight_decay: float = 1e-4
    warmup_steps: int | None = None
    grad_clip: float = 10.0
    seed: int = 0
    device: str = "cpu"
    save_every: int = 1000
    log_every: int = 50
    keep: int = 2

    @classmethod
    def for_policy(cls, policy: str, **overrides) -> "TrainConfig":
        """Table 9 defaults for ``policy``, with the non-None ``overrides``."""
        if policy not in TABLE9:
            raise ValueError(f"unknown policy {policy!r}; trainable: {', '.join(TABLE9)}")
        values = {**TABLE9[policy], **{k: v for k, v in overrides.items() if v is not None}}
        return cls(policy=policy, **values)

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"train field '{name}' must be an integer >= 1, got {getattr(self, name)!r}")
        if not self.lr > 0:
            raise ValueError(f"train field 'lr' must be > 0, got {self.lr!r}")
        if self.warmup_steps is None:
            self.warmup_steps = min(500, self.steps // 20)

    def lr_factor(self, step: int) -> float:
        """Multiplier of the peak learning rate at update ``step`` (0-based)."""
        if step < self.warmup_steps:
            return (step + 1) / (self.warmup_steps + 1)
        done = (step - self.warmup_steps) / max(1, self.steps - self.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, done)))


def build_policy(kind: str, dataset: ChunkDataset | None = None, **fields):
    """A fresh policy of type ``kind`` with config ``fields``; with ``dataset``, its
    normalization statistics are set from it."""
    cls = policy_class(kind)
    policy = cls(cls.config_class(**fields))
    if dataset is not None:
        policy.set_normalization(dataset.stats(), dataset.state)
    return policy


def _checkpoints(out: Path) -> list[Path]:
    folder = out / "checkpoints"
    return sorted(p for p in folder.glob("step_*") if (p / STATE_JSON).is_file()) if folder.is_dir() else []


def save_training_checkpoint(out: Path, policy, optimizer, step: int, sampler: torch.Generator,
                             cfg: TrainConfig) -> Path:
    """``out/checkpoints/step_NNNNNNNN`` (written aside, then renamed); older ones pruned to ``keep``."""
    final = out / "checkpoints" / f"step_{step:08d}"
    tmp = final.with_name(f".{final.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    save_policy(policy, tmp)
    opt = optimizer.state_dict()
    tensors = {f"optimizer.{pid}.{key}": value for pid, state in opt["state"].items()
               for key, value in state.items() if torch.is_tensor(value)}
    tensors["rng.torch"] = torch.get_rng_state()
    tensors["rng.sampler"] = sampler.get_state()
    save_tensors(tmp / STATE_FILE, tensors)
    save_json(tmp / STATE_JSON, {"step": step, "param_groups": opt["param_groups"], "train": dataclasses.asdict(cfg)})
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in _checkpoints(out)[:-cfg.keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _resume(folder: Path, policy, optimizer, sampler: torch.Generator) -> int:
    from safetensors.torch import load_file

    policy.load_state_dict(load_file(str(folder / "model.safetensors")))
    state = json.loads((folder / STATE_JSON).read_text())
    tensors = load_file(str(folder / STATE_FILE))
    opt_state: dict[int, dict] = {}
    for name, value in tensors.items():
        if name.startswith("optimizer."):
            _, pid, key = name.split(".", 2)
            opt_state.setdefault(int(pid), {})[key] = value
    optimizer.load_state_dict({"state": opt_state, "param_groups": state["param_groups"]})
    torch.set_rng_state(tensors["rng.torch"])
    sampler.set_state(tensors["rng.sampler"])
    return int(state["step"])


LOG_FIELDS = ("step", "loss", "lr", "samples_per_s")


def train(policy, dataset: ChunkDataset, cfg: TrainConfig, out: str | Path, progress: bool = True) -> list[float]:
    """Train ``policy`` on ``dataset``; resume from ``out``'s newest checkpoint if any.
    Returns the loss of every update run by this call."""
    from tqdm import tqdm

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    sampler = torch.Generator().manual_seed(cfg.seed)
    policy.to(cfg.device).train()
    optimizer = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    start = 0
    found = _checkpoints(out)
    if found:
        start = _resume(found[-1], policy, optimizer, sampler)
        policy.to(cfg.device)
    losses: list[float] = []
    log_path = out / "train_log.csv"
    new_log = not log_path.exists() or start == 0
    if not new_log:  # drop the lines logged after the checkpoint resumed from
        lines = log_path.read_text().splitlines(keepends=True)
        keep = lines[:1] + [line for line in lines[1:] if int(line.split(",", 1)[0]) <= start]
        log_path.write_text("".join(keep))
    log = open(log_path, "w" if new_log else "a", newline="")
    writer = None
    bar = tqdm(total=cfg.steps, initial=start, unit="upd", disable=not progress, dynamic_ncols=True,
               desc=f"train {cfg.policy}")
    t_last, n_last = time.perf_counter(), 0
    try:
        for step in range(start, cfg.steps):
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * cfg.lr_factor(step)
            index = torch.randint(0, len(dataset), (cfg.batch_size,), generator=sampler)
            loss, info = policy(dataset.batch(index, cfg.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
            optimizer.step()
            losses.append(float(loss.detach()))
            n_last += cfg.batch_size
            done = step + 1
            if cfg.log_every and (done % cfg.log_every == 0 or done == cfg.steps):
                now = time.perf_counter()
                row = {"step": done, "loss": losses[-1], "lr": optimizer.param_groups[0]["lr"],
                       "samples_per_s": n_last / max(now - t_last, 1e-9), **info}
                t_last, n_last = now, 0
                if writer is None:
                    writer = csv.DictWriter(log, fieldnames=list(row))
                    if new_log:
                        writer.writeheader()
                writer.writerow(row)
                log.flush()
                bar.set_postfix(loss=f"{losses[-1]:.4f}", samples_s=f"{row['samples_per_s']:.0f}")
            bar.update(1)
            if cfg.save_every and done % cfg.save_every == 0 and done < cfg.steps:
                save_training_checkpoint(out, policy, optimizer, done, sampler, cfg)
        if start < cfg.steps or not (out / "model.safetensors").exists():
            save_training_checkpoint(out, policy, optimizer, cfg.steps, sampler, cfg)
            save_policy(policy.eval(), out)
    finally:
        bar.close()
        log.close()
    return losses
