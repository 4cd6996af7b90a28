"""A report card's words: one verdict line per diagnostic and ``report.md``'s tables, from the
report that ``report_card.run`` assembles. Verdicts say what the numbers show at the scale
run, as REPRODUCTION.md's do, never more: a card at a small scale is evidence at that scale.
A difference is called "above" or "below" only where its Benjamini-Hochberg adjusted p-value
(over the card's comparisons) is below ``card_stats.ALPHA`` and its confidence interval
excludes 0; otherwise it is "not distinguishable with n seeds", with its interval, which is no
claim of equality.
"""
from __future__ import annotations

import os

import numpy as np

from normattn_jax._extras import fingerprint_id
from normattn_jax.card import stats as card_stats
from normattn_jax.card.names import (ARMS, BASELINES, BOUND_BY_CONSTRUCTION, CARD_TASKS, CASES,
                                     EPSILON, TASK_METRIC)
from normattn_jax.sweep.seeds import LEARNED_SE
from normattn_jax.train.checkpoint import write_json

TASK_TITLES = {"case": "Case task (NAP paper Fig. 3: argmin / first / argmax, output per token)",
               "first_token": "First-token task (NAP paper Fig. 5: output from the first token)",
               "mode": "Mode task at S = 2N (NAP paper Fig. 16, validated at 2N)"}
SHOWN = {"softmax": "softmax", "nap": "NAP"}


def _pct(x) -> str:
  return "-" if x is None else f"{100 * x:.1f}"


def _fmt(x, percent: bool) -> str:
  if x is None or not np.isfinite(x):
    return "-"
  return f"{100 * x:.1f}%" if percent else f"{x:.3g}"


def _spread(values) -> str:
  """``min / mean / max`` in percent."""
  v = np.asarray(values, float)
  return f"{_pct(v.min())} / {_pct(v.mean())} / {_pct(v.max())}"


def _seeds(values, percent: bool = True) -> str:
  return ", ".join("-" if x is None else (_pct(x) if percent else f"{x:.3g}") for x in values)


def against(report: dict, key: str) -> str:
  """The card's mean of a measure against both baselines', in words (``card_stats.phrase``)."""
  m, comps = report["measures"][key], report["comparisons"][key]
  unit, scale = ("%", 100.0) if m["percent"] else ("", 1.0)
  parts = []
  for base in BASELINES:
    shown = f"{SHOWN[base]}'s {_fmt(card_stats.mean(m['values'][base]), m['percent'])}"
    c = comps[base]
    parts.append(f"not compared with {shown} ({c['error']})" if "error" in c
                 else card_stats.phrase(c, shown, unit, scale))
  return " and ".join(parts)


def _measure_sentence(report: dict, key: str, subject: str) -> str:
  m = report["measures"][key]
  return (f"{subject} averages {_fmt(card_stats.mean(m['values']['card']), m['percent'])}: "
          f"{against(report, key)}")


def _label(report: dict, key: str) -> str:
  """A measure's label without its task ("case: training accuracy" -> "training accuracy")."""
  return report["measures"][key]["label"].split(": ")[-1]


def _seeds_phrase(report: dict) -> str:
  s = report["sizes"]
  return f"{s['evaluation_seeds']} evaluation seeds"


def _task_verdict(task: str, report: dict) -> str:
  scale, name = report["scale"], report["normalization"]
  scores = report["tasks"][task]
  lr = scores["arms"]["card"]["learning_rate"]
  head = (f"At the {scale} scale, on {_seeds_phrase(report)} at its selected learning rate "
          f"{lr:.3g}, ")
  key = f"{task}.{TASK_METRIC[task]}"
  accuracy = _measure_sentence(report, key, f"{name}'s {_label(report, key)}")
  if "threshold" not in scores:
    return head + accuracy + "."
  arms = scores["arms"]
  learned = {label: f"{sum(arms[label]['learned_all'])}/{len(arms[label]['learned_all'])}"
             for label in ARMS}
  learned = (f"{learned['card']} of {name}'s seeds learn all three cases (softmax "
             f"{learned['softmax']}, NAP {learned['nap']}; the share "
             f"{against(report, f'{task}.learned_all')})")
  if task == "first_token":  # Fig. 5's question leads
    return f"{head}{learned}; {accuracy}."
  return f"{head}{accuracy}; {learned}."


def collapse_outcome(counts: list, short: bool = False) -> str:
  """What the mode-collapse toy's cluster counts show: "collapses to one cluster by update k",
  "keeps 2" or "scatters" (no group of >= 2% of the points left, or more groups than it started
  with: the points leave their clusters rather than merge)."""
  start, end = counts[0], counts[-1]
  if end == 1 and start > 1:
    step = next(i for i, c in enumerate(counts) if c == 1 and all(x == 1 for x in counts[i:]))
    return (f"collapses by update {step}" if short else
            f"collapses to one cluster by update {step}")
  if end == start:
    return f"keeps {start}"
  if end == 0 or end > start:
    return "scatters" if short else (f"scatters ({end} group(s) of >= 2% of the points left "
                                     f"of {start} clusters)")
  return f"leaves {end} of {start}"


def _collapse_verdict(report: dict) -> str:
  collapse, name = report["mode_collapse"], report["normalization"]
  steps = len(collapse["unbalanced"]["card"]) - 1
  pairs = [f"{pair} pair: {name} {collapse_outcome(c['card'])} (softmax "
           f"{collapse_outcome(c['softmax'])}, DNAS {collapse_outcome(c['dnas'])})"
           for pair, c in collapse.items()]
  return (f"At the {report['scale']} scale, over {steps} attention updates of the two-cluster "
          f"toy at initial parameters: " + "; ".join(pairs) + ".")


def _bound_check(report: dict) -> str:
  att, name = report["attention"]["card"], report["normalization"]
  failed = sum(x > 0 for x in att["below_bound"])
  seeds = len(att["below_bound"])
  by_construction = report["name"] in BOUND_BY_CONSTRUCTION
  held = (f"holds in every one of {seeds} seeds" if not failed else
          f"fails in {failed} of {seeds} seeds ({_pct(card_stats.mean(att['below_bound']))}% of "
          f"keys below it)")
  why = ("a check of the code: it holds by construction" if by_construction else
         "not guaranteed by its construction")
  return f"Theorem 2's bound (every key's total weight >= 1/N) {held} for {name} ({why})."


def verdicts(report: dict) -> dict:
  """One line per diagnostic, each "At the <scale> scale, ...".

  Args:
    report: ``report_card.run``'s report (every section, measures and comparisons filled).

  Returns:
    ``{diagnostic: line}`` for the three tasks, explaining_away, mode_collapse, unselectable,
    cost and every registered diagnostic of the report.
  """
  scale, name = report["scale"], report["normalization"]
  out = {task: _task_verdict(task, report) for task in CARD_TASKS}
  at = f"At the {scale} scale, on {_seeds_phrase(report)}, "
  out["explaining_away"] = (
      at + _measure_sentence(report, "explaining_away.explained_away",
                             f"the share of keys explained away in trained {name} models")
      + ". " + _bound_check(report))
  out["mode_collapse"] = _collapse_verdict(report)
  out["unselectable"] = at + _measure_sentence(
      report, "unselectable.unselectable",
      f"the share of unselectable keys in trained {name} models") + "."
  out["cost"] = _cost_verdict(report["cost"], scale, name)
  for diagnostic, entry in report["diagnostics"].items():
    if "error" in entry:
      last = entry["error"].strip().splitlines()[-1]
      out[diagnostic] = (f"At the {scale} scale, the diagnostic {diagnostic!r} could not be "
                         f"measured: {last}")
      continue
    if "not_applicable" in entry:
      out[diagnostic] = f"At the {scale} scale, not measured: {entry['not_applicable']}."
      continue
    sentences = [_measure_sentence(report, f"{diagnostic}.{q['key']}", f"{name}'s {q['label']}")
                 for q in entry["quantities"]]
    out[diagnostic] = at + "; ".join(sentences) + "."
  return out


def _ratio(a, b) -> str:
  return "-" if a is None or b is None or not b else f"{a / b:.2f}x"


def _cost_verdict(rows: list, scale: str, name: str) -> str:
  both = [r for r in rows if r["mode"] == "fwd+bwd"]
  longest = max(r["n"] for r in both)
  parts = []
  for r in both:
    if r["n"] == longest:
      parts.append(f"{r['path']} path {_ratio(r['seconds'], r['softmax_quadratic_seconds'])} "
                   f"softmax's quadratic time and "
                   f"{_ratio(r['bytes'], r['softmax_quadratic_bytes'])} its memory "
                   f"({_ratio(r['seconds'], r['softmax_seconds'])} the time of softmax on the "
                   f"same path)")
  fast = "" if any(r["path"] == "fast" for r in both) else f" ({name} has no fast path)"
  return (f"At the {scale} scale, forward + backward of {name} at N = {longest} takes: "
          + "; ".join(parts) + fast + ".")


def _table(columns: list, rows: list) -> list:
  return (["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
          + ["| " + " | ".join(str(x) for x in row) + " |" for row in rows])


def comparison_table(report: dict, keys: list) -> list:
  """Each measure of ``keys`` against each baseline: the difference of the means with its 95%
  bootstrap interval, Cliff's delta, p, q and the verdict word."""
  rows = []
  for key in keys:
    m = report["measures"][key]
    unit, scale = ("%", 100.0) if m["percent"] else ("", 1.0)
    for base in BASELINES:
      c = report["comparisons"][key][base]
      if "error" in c:
        rows.append([m["label"], SHOWN[base], "-", "-", "-", "-", c["error"]])
        continue
      rows.append([m["label"], SHOWN[base],
                   f"{scale * c['difference']:+.3g}{unit} [{scale * c['ci'][0]:+.3g}, "
                   f"{scale * c['ci'][1]:+.3g}]", f"{c['effect']:+.2f}", f"{c['p']:.3g}",
                   f"{c['q']:.3g}", card_stats.word(c)])
  count = sum("q" in c for per in report["comparisons"].values() for c in per.values())
  return (["", f"The card against each baseline on the evaluation seeds: the difference of the "
           f"means with its {card_stats.CONFIDENCE:.0%} bootstrap interval "
           f"({card_stats.RESAMPLES} resamples, each arm's seeds resampled on their own), "
           f"Cliff's delta, the two-sided Mann-Whitney p and q, {card_stats.FDR_METHOD}'s "
           f"adjusted p over this card's {count} comparisons.", ""]
          + _table(["measure", "vs", "card - baseline [95% CI]", "Cliff's delta", "p", "q",
                    "verdict"], rows))


def _task_section(task: str, report: dict) -> list:
  scores = report["tasks"][task]
  arms = scores["arms"]
  metrics = [("train_acc", "train"), ("val_acc", "validation")]
  if "threshold" in scores:
    metrics += [(f"case_acc_{c}", c) for c in CASES]
  selection = [[label, ", ".join(f"{lr:.3g}: {_pct(m)}" for lr, m in zip(
      arms[label]["selection"]["learning_rates"], arms[label]["selection"]["train_acc_means"])),
                f"{arms[label]['learning_rate']:.3g}"] for label in ARMS]
  lines = [f"### {TASK_TITLES[task]}", "",
           "Selection: each learning rate's mean training accuracy over the selection seeds (%), "
           "and the rate selected.", ""]
  lines += _table(["arm", "learning rate: mean train %", "selected"], selection)
  columns = ["arm"] + [f"{label}: min / mean / max" for _, label in metrics]
  rows = [[label] + [_spread(arms[label][m]) for m, _ in metrics] for label in ARMS]
  lines += ["", "Evaluation: best accuracy over training (%) of each evaluation seed at the "
            "selected rate.", ""] + _table(columns, rows)
  per_seed = [[label] + [_seeds(arms[label][m]) for m, _ in metrics[:2]]
              + ([" ".join("y" if x else "n" for x in arms[label]["learned_all"])]
                 if "threshold" in scores else []) for label in ARMS]
  columns = ["arm", "train, per seed", "validation, per seed"]
  if "threshold" in scores:
    columns.append("learned all three cases, per seed")
    lines += ["", f"A seed learned a case when its best accuracy on that case exceeds "
              f"{_pct(scores['threshold'])}%: chance ({_pct(scores['chance'])}%, the best guess "
              f"that ignores the input: argmin and argmax labels favour early positions) plus "
              f"the larger of chance and {LEARNED_SE:g} binomial standard errors of chance on "
              f"the case set."]
  lines += [""] + _table(columns, per_seed)
  keys = [f"{task}.{TASK_METRIC[task]}"] + ([f"{task}.learned_all"] if "threshold" in scores
                                             else [])
  return lines + comparison_table(report, keys)


def _header(report: dict) -> list:
  s, b = report["sizes"], report["baselines"]
  machine = report["machine"]
  shown = machine.get("cpu_model") or machine["device_kind"]
  if "cpu_cores" in machine:
    shown += (f" ({' '.join(machine['cpu_features'])}), {machine['cpu_cores']} core(s), "
              f"{machine['device_count']} JAX CPU device(s)")
  shown += f"; jax {machine['jax']}, jaxlib {machine['jaxlib']}"
  card = report["normalization"]
  trainers = sorted(set(b["trained_by"].values()))
  trained = ("trained by this card's run" if trainers == [card] else
             "found finished, trained by the run" + ("s" if len(trainers) > 1 else "") + " of "
             + ", ".join(f"the {t} card" for t in trainers)
             + (" (this card's run trained some of them)" if card in trainers else ""))
  lrs = ", ".join(f"{lr:.3g}" for lr in s["learning_rates"])
  return [f"# Report card: {card} ({report['scale']} scale)", "",
          f"MTE layout with {card} ('card') beside softmax in the MTE layout and NAP: N = "
          f"{s['seq_len']}, d = {s['d_model']}, {s['num_layers']} layers, {s['num_heads']} heads, "
          f"batch {s['batch_size']}, {s['num_steps']} steps ({s['mode_steps']} for the mode "
          f"task). Protocol: each arm's learning rate is selected from {lrs} on "
          f"{s['selection_seeds']} selection seeds (the best mean training accuracy), then the "
          f"arm is trained again at that rate on {s['evaluation_seeds']} fresh evaluation seeds; "
          f"every comparison below is made on the evaluation seeds alone.", "",
          f"Machine: {shown} (fingerprint {fingerprint_id(machine)}). Baselines: "
          f"{b['dir']} (from the card's folder), of this machine only, {trained}. Verdicts say "
          f"what the numbers show at this scale.", "", "![accuracy](accuracy.png)", ""]


def _diagnostic_section(name: str, entry: dict, report: dict) -> list:
  lines = [f"### {entry['title']}", "", f"The claim: {entry['claim']}.", ""]
  if "error" in entry:
    return lines + [f"The diagnostic `{name}` raised; the rest of the card was completed:", "",
                    "```", entry["error"].rstrip(), "```"]
  if "not_applicable" in entry:
    return lines + [f"Not measured: {entry['not_applicable']}."]
  columns = ["arm"] + [f"{q['label']}: per seed" for q in entry["quantities"]]
  rows = [[label] + [_seeds(entry["values"][label][q["key"]], q["percent"])
                     for q in entry["quantities"]] for label in ARMS]
  means = [[label] + [_fmt(card_stats.mean(entry["values"][label][q["key"]]), q["percent"])
                      for q in entry["quantities"]] for label in ARMS]
  lines += _table(["arm"] + [f"{q['label']}: mean" for q in entry["quantities"]], means)
  lines += ["", "<details><summary>per seed</summary>", ""] + _table(columns, rows)
  lines += ["", "</details>"]
  return lines + comparison_table(report, [f"{name}.{q['key']}" for q in entry["quantities"]])


def markdown(report: dict) -> str:
  """``report.md``: a header, then per diagnostic its tables, comparisons and verdict.

  Args:
    report: ``report_card.run``'s report, verdicts included.

  Returns:
    The markdown text.
  """
  s, v = report["sizes"], report["verdicts"]
  lines = _header(report) + ["## NAP paper", ""]
  for task in CARD_TASKS:
    lines += _task_section(task, report) + ["", f"**Verdict:** {v[task]}", ""]
  att = report["attention"]
  lines += ["## DNAS paper", "", "### Explaining away (Ding et al., Definition 1, Theorem 2)", "",
            f"Trained case-task models (every evaluation seed) on {s['probe_batch']} sequences: "
            f"share of keys whose total absolute attention weight over the queries is below "
            f"{EPSILON:g}, share below 1/N (Theorem 2's bound, a check: DNAS, HNAS and Sinkhorn "
            f"meet it by construction) and the least key total times N, per seed.", ""]
  lines += _table(["arm", "explained away (%)", "below 1/N (%)", "least total x N"],
                  [[label, _seeds(att[label]["explained_away"]), _seeds(att[label]["below_bound"]),
                    ", ".join(f"{x:.3g}" for x in att[label]["min_sum_times_n"])]
                   for label in ARMS])
  lines += comparison_table(report, ["explaining_away.explained_away"])
  lines += ["", f"**Verdict:** {v['explaining_away']}", "",
            "### Mode collapse (Ding et al., Appendix E)", "",
            "Clusters left (single-linkage, gap 0.5, groups of >= 2% of the points) before and "
            "after each attention update of two Gaussian clusters, Q = K = V = I, each "
            "normalisation at its initial parameters; deterministic, so no seeds.", ""]
  collapse = report["mode_collapse"]
  lines += _table(["pair", "scheme", "clusters per step", "outcome"],
                  [[pair, scheme, " -> ".join(str(c) for c in counts), collapse_outcome(counts)]
                   for pair, schemes in collapse.items() for scheme, counts in schemes.items()])
  lines += ["", f"**Verdict:** {v['mode_collapse']}", "", "## LayerNorm paper", "",
            "### Unselectable keys (Brody et al., Section 3)", "",
            "Share of keys that no query direction gives the strictly highest dot product, per "
            "layer, head and sequence of the trained case-task models (%), per seed.", ""]
  lines += _table(["arm", "unselectable, per seed", "min / mean / max"],
                  [[label, _seeds(att[label]["unselectable"]), _spread(att[label]["unselectable"])]
                   for label in ARMS])
  lines += comparison_table(report, ["unselectable.unselectable"])
  lm = s["lm"]
  lines += ["", f"**Verdict:** {v['unselectable']}", "",
            "## Today's normalisations' own claims", "",
            f"A causal character-level LM per arm on the Shakespeare corpus, no positional "
            f"encoding (the causal mask alone tells position, so every normalisation runs at any "
            f"length): d = {lm['d_model']}, {lm['num_layers']} layers, {lm['num_heads']} heads, "
            f"trained at L = {lm['train_len']} tokens for {lm['num_steps']} steps, one model per "
            f"evaluation seed; the card's normalisation beside softmax and NAP in the same "
            f"decoder.", ""]
  for name, entry in report["diagnostics"].items():
    lines += _diagnostic_section(name, entry, report) + ["", f"**Verdict:** {v[name]}", ""]
  lines += ["## Cost", "",
            "Batch 1, 8 heads, d_h = 64, at the normalisation's initial parameters; memory is "
            "XLA's compiled scratch memory (temporaries plus outputs), time the median of timed "
            "calls; the ratios are against softmax measured in the same run, on the row's path "
            "and on softmax's quadratic path.", ""]
  ms = lambda t: "-" if t is None else f"{1e3 * t:.2f}"
  lines += _table(["N", "path", "mode", "ms", "MiB", "time / softmax quadratic",
                   "time / softmax same path", "memory / softmax quadratic"],
                  [[r["n"], r["path"], r["mode"], ms(r["seconds"]), f"{r['bytes'] / 2**20:.1f}",
                    _ratio(r["seconds"], r["softmax_quadratic_seconds"]),
                    _ratio(r["seconds"], r["softmax_seconds"]),
                    _ratio(r["bytes"], r["softmax_quadratic_bytes"])] for r in report["cost"]])
  lines += ["", f"**Verdict:** {v['cost']}", "",
            f"The last call took {report['seconds']['this_call']:.0f} s, its analyses "
            f"{report['seconds']['analyses']:.0f} s; the training: "
            + ", ".join(f"{k} " + ("found finished" if x is None else f"{x:.0f} s")
                        for k, x in report["seconds"]["sweeps"].items()) + "."]
  return "\n".join(lines) + "\n"


def write_report(report: dict, folder: str) -> None:
  """A card's words from its numbers: the verdicts (into ``report``), ``report.md`` and
  ``report.json`` (its figure: ``reporting.drawers``). A finished card's words are written again
  this way after a change of wording, its numbers untouched."""
  report["verdicts"] = verdicts(report)
  with open(os.path.join(folder, "report.md"), "w") as f:
    f.write(markdown(report))
  write_json(os.path.join(folder, "report.json"), report, indent=1)
