"""HTML: the results table of an evaluation, and the static human-evaluation page.

:func:`results_html` - accuracy per task and overall with 95 % CIs, the analytic and the
simulated random-choice baseline, CAA, and the breakdowns (aerial-ground distance, target
pixel area, view configuration). AeroGround's published random baseline (24.6 % average)
is shown beside ours.

:func:`human_page` - one self-contained page (items embedded as JSON, images referenced by
their path relative to the page) that shows an item's images, question and options, takes
an answer (a letter, or the mapping typed as "1-A, 2-C"), keeps the answers in the
browser's localStorage and downloads them as ``human_answers.jsonl`` (one
``{"id", "answer", "seconds"}`` a line), which ``airplay aeroground eval``'s scorer reads
like a model's replies. Nothing is sent anywhere.
"""

from __future__ import annotations

import html
import json

AEROGROUND_RANDOM_PCT = 24.6


def _pct(x) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}"


def _row(name: str, e: dict) -> str:
    acc = e["accuracy"]
    lo, hi = acc["ci95"]
    rnd = e.get("random_simulated")
    return (f"<tr><td>{html.escape(name)}</td><td>{e['n']}</td><td>{_pct(acc['mean'])}</td>"
            f"<td>[{_pct(lo)}, {_pct(hi)}]</td><td>{_pct(e['chance'])}</td><td>{_pct(rnd)}</td>"
            f"<td>{e['caa']:+.3f}</td></tr>")


HEAD = ("<tr><th></th><th>items</th><th>accuracy %</th><th>95% CI</th><th>random (analytic) %</th>"
        "<th>random (simulated) %</th><th>CAA</th></tr>")


def results_html(summary: dict) -> str:
    """A standalone page of ``summary`` (:func:`airplay.aeroground.scoring.summarize`)."""
    s = summary.get("settings", {})
    rows = "".join(_row(t, e) for t, e in summary["per_task"].items())
    parts = ["<!doctype html><meta charset='utf-8'><title>AeroGround results</title>",
             "<style>body{font-family:sans-serif}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child{text-align:left}</style>",
             "<h1>AeroGround results</h1>",
             f"<p>model: {html.escape(str(s.get('model', '?')))} ({html.escape(str(s.get('backend', '?')))}); "
             f"items: {summary['items']} ({summary['answered']} answered)</p>",
             f"<table>{HEAD}{rows}{_row('average (all questions)', summary['overall'])}</table>",
             f"<p>AeroGround's published random-choice baseline: {AEROGROUND_RANDOM_PCT} % average.</p>"]
    for key, bins in summary.get("breakdowns", {}).items():
        parts.append(f"<h2>by {html.escape(key)}</h2><table>{HEAD}"
                     + "".join(_row(b, e) for b, e in bins.items()) + "</table>")
    return "\n".join(parts) + "\n"


_HUMAN_JS = r"""
const KEY = "aeroground-human-" + document.title;
let answers = JSON.parse(localStorage.getItem(KEY) || "{}");
let k = 0, shownAt = Date.now();
function show() {
  const it = ITEMS[k];
  document.getElementById("pos").textContent = `item ${k + 1} of ${ITEMS.length} (${it.task})`;
  document.getElementById("imgs").innerHTML = it.images.map((im, j) =>
    `<figure><img src="${im.path}"><figcaption>Image ${j + 1}: ${im.role}</figcaption></figure>`).join("");
  document.getElementById("q").textContent = it.question;
  const box = document.getElementById("opts");
  if (it.answer_type === "choice") {
    box.innerHTML = Object.keys(it.options).sort().map(l =>
      `<label><input type="radio" name="a" value="${l}"> ${l}. ${it.options[l]}</label><br>`).join("");
  } else {
    box.innerHTML = `targets ${it.targets.join(", ")}; candidates ${it.labels.join(", ")}<br>` +
      `<input id="map" placeholder="1-A, 2-C">`;
  }
  shownAt = Date.now();
}
function record() {
  const it = ITEMS[k];
  let a = "";
  if (it.answer_type === "choice") { const r = document.querySelector("input[name=a]:checked"); a = r ? r.value : ""; }
  else a = document.getElementById("map").value;
  answers[it.id] = {id: it.id, answer: a, seconds: (Date.now() - shownAt) / 1000};
  localStorage.setItem(KEY, JSON.stringify(answers));
  document.getElementById("done").textContent = `${Object.keys(answers).length} answered`;
  if (k < ITEMS.length - 1) { k++; show(); }
}
function download() {
  const text = Object.values(answers).map(a => JSON.stringify(a)).join("\n") + "\n";
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], {type: "application/jsonl"}));
  a.download = "human_answers.jsonl"; a.click();
}
document.getElementById("next").onclick = record;
document.getElementById("dl").onclick = download;
document.getElementById("done").textContent = `${Object.keys(answers).length} answered`;
show();
"""


def human_page(items: list[dict], title: str = "AeroGround human evaluation") -> str:
    """The page (see the module docstring) for ``items``; truth and evidence are left out."""
    shown = [{k: it[k] for k in ("id", "task", "question", "answer_type", "options", "targets", "labels")
              if k in it} | {"images": [{"path": im["path"], "role": im["role"]} for im in it["images"]]}
             for it in items]
    data = json.dumps(shown).replace("</", "<\\/")
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
            "<style>body{font-family:sans-serif;max-width:1100px}figure{display:inline-block;margin:4px}"
            "img{height:220px;image-rendering:pixelated}</style>"
            f"<h1>{html.escape(title)}</h1><p id='pos'></p><div id='imgs'></div><p id='q'></p><div id='opts'></div>"
            "<p><button id='next'>record answer and go on</button> <button id='dl'>download answers (JSONL)"
            "</button> <span id='done'></span></p>"
            f"<script>const ITEMS = {data};</script><script>{_HUMAN_JS}</script>\n")
