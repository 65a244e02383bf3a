"""Offline errors against closed-loop outcomes over a set of checkpoints (AirPlayground's analysis).

``airplay offline-vs-closed`` pairs, per checkpoint, its offline result (``airplay eval-offline
--out JSON``: ADE, FDE, P95, yaw error, corner FDE, ... on held-out demonstrations) with its
closed-loop evaluation folder (``airplay eval --out``: ``summary.json``), or runs both for
``--checkpoints`` (into ``OUT/runs/<name>/offline.json`` and ``OUT/runs/<name>/eval/``; a rerun
reuses what is there: the offline JSON when its checkpoint, dataset and settings match, the
evaluation through ``airplay eval --resume``). It then relates every offline figure to the
closed-loop SR and CR across the checkpoints with Spearman's rank correlation (average ranks
for ties) and a 95 % percentile bootstrap interval over the checkpoints
(:func:`airplay.eval.offline.spearman_bootstrap`; with few checkpoints the interval is wide,
and rho is undefined where either side is constant). Writes into ``--out``:

- ``relate.json``: the rows (one per checkpoint: its files, offline figures, SR and CR with
  their intervals) and ``correlations[offline_key][sr|cr] = {"rho", "ci95", "n"}``;
- ``relate.csv``: the rows; ``correlations.csv``: one row per (offline figure, closed-loop figure);
- ``scatter.png``: ADE, FDE, P95, yaw error and corner FDE (rows) against SR and CR (columns),
  one labelled point per checkpoint with the closed-loop 95 % interval as an error bar, rho and
  its interval in each panel's title.

A useful offline error has rho < 0 against SR (lower error, more successes) and > 0 against CR.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

OFFLINE_KEYS = {"ade_cm": "ADE cm", "fde_cm": "FDE cm", "p95_cm": "P95 cm", "yaw_err_deg": "yaw err deg",
                "corner_fde_cm": "corner FDE cm", "motion_dir_err_deg": "motion dir deg", "dtw_cm": "DTW cm",
                "lateral_dir_err_pct": "lat dir err %", "yaw_dir_err_pct": "yaw dir err %",
                "copycat_skill_ade": "skill ADE"}
"""Offline figures related: the overall metrics of :mod:`airplay.eval.offline` and the ADE skill
against the copycat baseline (``baselines.copycat.skill.ade``)."""
SCATTER_KEYS = ("ade_cm", "fde_cm", "p95_cm", "yaw_err_deg", "corner_fde_cm")
CLOSED_KEYS = {"sr": "SR", "cr": "CR"}
RELATE_JSON, RELATE_CSV, CORRELATIONS_CSV, SCATTER_PNG = "relate.json", "relate.csv", "correlations.csv", "scatter.png"


def _read_json(path: Path, what: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ValueError(f"{path}: cannot read the {what} ({err.strerror})") from None
    except ValueError as err:
        raise ValueError(f"{path}: not JSON ({err}); expected the {what}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected the {what} (a JSON object)")
    return doc


def _row(off_path: str, eval_path: str) -> dict:
    """One checkpoint's figures from its offline JSON and closed-loop folder (or summary.json)."""
    from airplay.eval.results import SUMMARY_FILE
    from airplay.policies.checkpoint import checkpoint_label

    off = _read_json(Path(off_path), "offline result of airplay eval-offline --out")
    summary_file = Path(eval_path) / SUMMARY_FILE if Path(eval_path).is_dir() else Path(eval_path)
    summary = _read_json(summary_file, "closed-loop summary.json of airplay eval --out")
    overall = off.get("overall")
    if not isinstance(overall, dict) or "ade_cm" not in overall:
        raise ValueError(f"{off_path}: not an eval-offline result (no overall.ade_cm)")
    if not isinstance(summary.get("overall"), dict) or "sr" not in summary["overall"]:
        raise ValueError(f"{summary_file}: not a closed-loop summary (no overall.sr)")
    off_meta, eval_meta = off.get("meta", {}), summary.get("meta", {})
    a, b = off_meta.get("checkpoint"), eval_meta.get("checkpoint")
    if a and b and Path(a).resolve() != Path(b).resolve():
        raise ValueError(f"{off_path} (meta.checkpoint {a}) and {summary_file} (meta.checkpoint {b}) are results of "
                         "different checkpoints; pair each checkpoint's own results")
    ckpt = a or b or ""
    row = {"name": checkpoint_label(ckpt) if ckpt else Path(off_path).stem, "checkpoint": ckpt,
           "offline": str(off_path), "eval": str(eval_path), "policy": off_meta.get("policy") or eval_meta.get("policy", ""),
           "rollout": off_meta.get("rollout", "reobserve")}
    for key in OFFLINE_KEYS:
        value = (off.get("baselines", {}).get("copycat", {}).get("skill", {}).get("ade") if key == "copycat_skill_ade"
                 else overall.get(key))
        row[key] = None if value is None else float(value)
    for key in CLOSED_KEYS:
        entry = summary["overall"].get(key) or {}
        row[key] = entry.get("mean")
        row[f"{key}_ci95"] = entry.get("ci95")
    row["episodes"] = summary.get("episodes")
    return row


def relate(pairs: list[tuple[str, str]], bootstrap: int = 1000, seed: int = 0) -> dict:
    """Spearman's rho with bootstrap intervals between every offline figure and SR / CR over the
    checkpoints of ``pairs`` ((offline JSON, eval folder or summary.json), at least 3).
    ``{"rows": [...], "correlations": {offline_key: {"sr"|"cr": {"rho", "ci95", "n"}}}, "meta"}``
    (undefined values None). ValueError names a bad file."""
    import numpy as np

    from airplay.eval import offline

    if bootstrap < 0:
        raise ValueError(f"--bootstrap must be >= 0, got {bootstrap}")
    if len(pairs) < 3:
        raise ValueError(f"need at least 3 checkpoints (offline result, eval folder) for a rank correlation, "
                         f"got {len(pairs)}")
    rows = [_row(str(a), str(b)) for a, b in pairs]
    rollouts = sorted({r["rollout"] for r in rows})
    if len(rollouts) > 1:
        raise ValueError(f"the offline results mix rollouts ({', '.join(rollouts)}); relate one kind at a time")
    names = [r["name"] for r in rows]
    for i, r in enumerate(rows):  # unique labels for the plot and the CSV
        if names.count(r["name"]) > 1:
            r["name"] = f"{r['name']}#{names[:i + 1].count(r['name'])}"

    def column(key):
        return np.array([np.nan if r[key] is None else float(r[key]) for r in rows])

    correlations = {ok: {ck: offline.spearman_bootstrap(column(ok), column(ck), bootstrap, seed)
                         for ck in CLOSED_KEYS} for ok in OFFLINE_KEYS}
    meta = {"checkpoints": len(rows), "rollout": rollouts[0], "bootstrap": int(bootstrap), "bootstrap_seed": int(seed),
            "ci": "95% percentile bootstrap over the checkpoints (replicates with an undefined rho left out)",
            "rho": "Spearman (average ranks for ties)",
            "offline": "overall figures of airplay eval-offline (scenes weighted equally); copycat_skill_ade = "
                       "1 - ADE / copycat ADE",
            "closed_loop": "overall SR and CR of airplay eval (scenes weighted equally) with their 95% intervals"}
    return _nan_to_none({"rows": rows, "correlations": correlations, "meta": meta})


def _nan_to_none(x):
    if isinstance(x, dict):
        return {k: _nan_to_none(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_nan_to_none(v) for v in x]
    return None if isinstance(x, float) and math.isnan(x) else x


def _f(v, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def format_relate(result: dict) -> str:
    """The checkpoints' figures, then rho [95 % CI] of each offline figure against SR and CR."""
    rows = result["rows"]
    width = max([10] + [len(r["name"]) + 2 for r in rows])
    head = f"{'checkpoint':<{width}}" + "".join(f"{OFFLINE_KEYS[k]:>15}" for k in SCATTER_KEYS) + \
        f"{'skill ADE':>11}{'SR %':>8}{'CR %':>8}"
    lines = [head]
    for r in rows:
        lines.append(f"{r['name']:<{width}}" + "".join(f"{_f(r[k], '.2f'):>15}" for k in SCATTER_KEYS)
                     + f"{_f(r['copycat_skill_ade'], '+.2f'):>11}"
                     + f"{_f(None if r['sr'] is None else 100 * r['sr'], '.1f'):>8}"
                     + f"{_f(None if r['cr'] is None else 100 * r['cr'], '.1f'):>8}")
    m = result["meta"]
    lines.append(f"\nSpearman rho [95% CI, bootstrap over the {m['checkpoints']} checkpoints, {m['bootstrap']} "
                 f"replicates]; offline rollout {m['rollout']}:")
    lines.append(f"{'':<16}" + "".join(f"{name:>24}" for name in CLOSED_KEYS.values()))
    for ok, label in OFFLINE_KEYS.items():
        cells = ""
        for ck in CLOSED_KEYS:
            c = result["correlations"][ok][ck]
            text = f"{_f(c['rho'], '+.2f')} [{_f(c['ci95'][0], '+.2f')}, {_f(c['ci95'][1], '+.2f')}]"
            cells += f"{text:>24}"
        lines.append(f"{label:<16}{cells}")
    lines.append("A useful offline error has rho < 0 against SR (lower error, more successes) and > 0 against CR.")
    return "\n".join(lines)


def write_relate(out_dir: Path, result: dict) -> list[Path]:
    """``relate.json``, ``relate.csv``, ``correlations.csv`` and ``scatter.png`` into ``out_dir``."""
    from airplay.eval.results import _write_atomic

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_atomic(out_dir / RELATE_JSON, json.dumps(result, indent=2, allow_nan=False) + "\n")
    buf = io.StringIO()
    columns = ["name", "checkpoint", "policy", "offline", "eval", *OFFLINE_KEYS, "sr", "sr_ci95_low", "sr_ci95_high",
               "cr", "cr_ci95_low", "cr_ci95_high", "episodes"]
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for r in result["rows"]:
        flat = dict(r)
        for key in CLOSED_KEYS:
            lo, hi = r.get(f"{key}_ci95") or (None, None)
            flat[f"{key}_ci95_low"], flat[f"{key}_ci95_high"] = lo, hi
        writer.writerow(["" if flat.get(c) is None else flat[c] for c in columns])
    _write_atomic(out_dir / RELATE_CSV, buf.getvalue())
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["offline", "closed_loop", "rho", "ci95_low", "ci95_high", "n"])
    for ok, entry in result["correlations"].items():
        for ck, c in entry.items():
            writer.writerow([ok, ck, *("" if v is None else v for v in (c["rho"], *c["ci95"])), c["n"]])
    _write_atomic(out_dir / CORRELATIONS_CSV, buf.getvalue())
    plot_scatter(out_dir / SCATTER_PNG, result)
    return [out_dir / name for name in (RELATE_JSON, RELATE_CSV, CORRELATIONS_CSV, SCATTER_PNG)]


def plot_scatter(path: Path, result: dict) -> None:
    """Offline figures of :data:`SCATTER_KEYS` (rows) against SR and CR (columns), in %."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    fig, axes = plt.subplots(len(SCATTER_KEYS), len(CLOSED_KEYS), figsize=(9, 2.8 * len(SCATTER_KEYS)),
                             squeeze=False)
    for i, ok in enumerate(SCATTER_KEYS):
        for j, ck in enumerate(CLOSED_KEYS):
            ax = axes[i][j]
            pts = [(r[ok], r[ck], r.get(f"{ck}_ci95"), r["name"]) for r in rows
                   if r[ok] is not None and r[ck] is not None]
            for x, y, ci, name in pts:
                lo, hi = ci if ci and None not in ci else (y, y)
                ax.errorbar([x], [100 * y], yerr=[[100 * (y - lo)], [100 * (hi - y)]], fmt="o", ms=5, capsize=3,
                            color="tab:blue" if ck == "sr" else "tab:red")
                ax.annotate(name, (x, 100 * y), textcoords="offset points", xytext=(4, 4), fontsize=7)
            c = result["correlations"][ok][ck]
            ax.set_title(f"rho {_f(c['rho'], '+.2f')} [{_f(c['ci95'][0], '+.2f')}, {_f(c['ci95'][1], '+.2f')}], "
                         f"n = {c['n']}", fontsize=9)
            ax.set_xlabel(f"offline {OFFLINE_KEYS[ok]}")
            ax.set_ylabel(f"closed-loop {CLOSED_KEYS[ck]} %")
            ax.set_ylim(-5, 105)
            ax.grid(alpha=0.3)
    fig.suptitle(f"Offline errors vs closed loop over {len(rows)} checkpoints "
                 f"(Spearman rho [95% bootstrap CI])", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=100)
    plt.close(fig)
