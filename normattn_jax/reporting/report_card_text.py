"""A report card's words: one verdict line per diagnostic and ``report.md``'s tables, from the
report that ``report_card.run`` assembles. Verdicts say what the numbers show at the scale
run, as REPRODUCTION.md's do, never more: a card at a small scale is evidence at that scale.
"""
from __future__ import annotations

import numpy as np

from normattn_jax.reporting.report_card import ARMS, CARD_TASKS, CASES, EPSILON
from normattn_jax.reporting.seeds import LEARNED_SE

TASK_TITLES = {"case": "Case task (NAP paper Fig. 3: argmin / first / argmax, output per token)",
               "first_token": "First-token task (NAP paper Fig. 5: output from the first token)",
               "mode": "Mode task at S = 2N (NAP paper Fig. 16, validated at 2N)"}
ALPHA = 0.05  # the p-value a verdict calls a difference
SHOWN = {"softmax": "softmax", "nap": "NAP"}


def _pct(x) -> str:
  return "-" if x is None else f"{100 * x:.1f}"


def _spread(values) -> str:
  """``min / mean / max`` in percent."""
  v = np.asarray(values, float)
  return f"{_pct(v.min())} / {_pct(v.mean())} / {_pct(v.max())}"


def _seeds(values) -> str:
  return ", ".join(_pct(x) for x in values)


def _compare(p: float, card: list, base: list) -> str:
  """"above" / "below" / "no different from" by the two-sided test and the means."""
  if p >= ALPHA:
    return "no different from"
  return "above" if np.mean(card) > np.mean(base) else "below"


def _task_verdict(task: str, scores: dict, scale: str, name: str) -> str:
  arms = scores["arms"]
  metric = "val_acc" if task == "mode" else "train_acc"
  what = "validation accuracy at 2N" if task == "mode" else "training accuracy"
  seeds = len(arms["card"][metric])
  accuracy = [f"{name}'s {what} (best per seed, {seeds} seeds) averages "
              f"{_pct(np.mean(arms['card'][metric]))}%"]
  for base in ("softmax", "nap"):
    p = scores["tests"][base][metric]
    accuracy.append(f"{_compare(p, arms['card'][metric], arms[base][metric])} {SHOWN[base]}'s "
                    f"{_pct(np.mean(arms[base][metric]))}% (p = {p:.3g})")
  accuracy = accuracy[0] + ", " + " and ".join(accuracy[1:])
  if "threshold" not in scores:
    return f"At the {scale} scale, {accuracy}."
  learned = {label: f"{sum(arms[label]['learned_all'])}/{seeds}" for label in ARMS}
  learned = (f"{learned['card']} of {name}'s seeds learn all three cases (softmax "
             f"{learned['softmax']}, NAP {learned['nap']})")
  if task == "first_token":  # Fig. 5's question leads
    return f"At the {scale} scale, {learned}; {accuracy}."
  return f"At the {scale} scale, {accuracy}; {learned}."


def verdicts(report: dict) -> dict:
  """One line per diagnostic, each "At the <scale> scale, ...".

  Args:
    report: ``report_card.run``'s report (tasks, attention, mode_collapse and cost filled).

  Returns:
    ``{diagnostic: line}`` for the three tasks, explaining_away, mode_collapse, unselectable
    and cost.
  """
  scale, name = report["scale"], report["normalization"]
  out = {task: _task_verdict(task, report["tasks"][task], scale, name) for task in CARD_TASKS}
  att = report["attention"]
  mean = lambda label, key: float(np.mean(att[label][key]))
  failed = sum(x > 0 for x in att["card"]["below_bound"])
  seeds = len(att["card"]["below_bound"])
  bound = (f"holds for {name} in every seed checked" if not failed else
           f"fails for {name} in {failed} of {seeds} seeds "
           f"({_pct(mean('card', 'below_bound'))}% of keys below it)")
  out["explaining_away"] = (
      f"At the {scale} scale, {_pct(mean('card', 'explained_away'))}% of the keys in trained "
      f"{name} models are explained away (softmax {_pct(mean('softmax', 'explained_away'))}%, "
      f"NAP {_pct(mean('nap', 'explained_away'))}%); Theorem 2's bound (every key's total "
      f"weight >= 1/N, guaranteed by DNAS only) {bound}.")
  collapse = report["mode_collapse"]["unbalanced"]
  out["mode_collapse"] = (
      f"At the {scale} scale, after {len(collapse['card']) - 1} attention updates of the "
      f"unbalanced two-cluster toy, {name} (at its initial parameters) leaves "
      f"{collapse['card'][-1]} cluster(s) (softmax {collapse['softmax'][-1]}, DNAS "
      f"{collapse['dnas'][-1]}).")
  out["unselectable"] = (
      f"At the {scale} scale, {_pct(mean('card', 'unselectable'))}% of the keys of trained "
      f"{name} models are unselectable by any query (softmax "
      f"{_pct(mean('softmax', 'unselectable'))}%, NAP {_pct(mean('nap', 'unselectable'))}%).")
  out["cost"] = _cost_verdict(report["cost"], scale, name)
  return out


def _ratio(a, b) -> str:
  return "-" if a is None or b is None or not b else f"{a / b:.2f}x"


def _cost_verdict(rows: list, scale: str, name: str) -> str:
  both = [r for r in rows if r["mode"] == "fwd+bwd"]
  longest = max(r["n"] for r in both)
  parts = []
  for r in both:
    if r["n"] == longest:
      parts.append(f"{r['path']} path {_ratio(r['seconds'], r['softmax_seconds'])} softmax's "
                   f"time and {_ratio(r['bytes'], r['softmax_bytes'])} its memory")
  fast = "" if any(r["path"] == "fast" for r in both) else f" ({name} has no fast path)"
  return (f"At the {scale} scale, forward + backward of {name} at N = {longest} takes: "
          + "; ".join(parts) + fast + ".")


def _table(columns: list, rows: list) -> list:
  return (["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
          + ["| " + " | ".join(str(x) for x in row) + " |" for row in rows])


def _task_section(task: str, scores: dict) -> list:
  arms = scores["arms"]
  metrics = [("train_acc", "train"), ("val_acc", "validation")]
  if "threshold" in scores:
    metrics += [(f"case_acc_{c}", c) for c in CASES]
  columns = ["arm", "learning rate"] + [f"{label}: min / mean / max" for _, label in metrics]
  rows = [[label, f"{arms[label]['learning_rate']:.3g}"]
          + [_spread(arms[label][m]) for m, _ in metrics] for label in ARMS]
  lines = [f"### {TASK_TITLES[task]}", "",
           "Best accuracy over training (%), per seed at each arm's best learning rate (the "
           "best mean training accuracy)."]
  lines += [""] + _table(columns, rows)
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
  tests = [[f"card vs {base}", f"{p['train_acc']:.3g}", f"{p['val_acc']:.3g}"]
           for base, p in scores["tests"].items()]
  lines += ["", "Two-sided Mann-Whitney U tests of the seeds (p-values):", ""]
  lines += _table(["comparison", "train", "validation"], tests)
  return lines



def markdown(report: dict) -> str:
  """``report.md``: a header, then per diagnostic its verdict and its table(s).

  Args:
    report: ``report_card.run``'s report, verdicts included.

  Returns:
    The markdown text.
  """
  s, v = report["sizes"], report["verdicts"]
  lines = [f"# Report card: {report['normalization']} ({report['scale']} scale)", "",
           f"MTE layout with {report['normalization']} ('card') beside softmax in the MTE "
           f"layout and NAP, trained in the same run: N = {s['seq_len']}, d = {s['d_model']}, "
           f"L = {s['num_layers']}, H = {s['num_heads']}, batch {s['batch_size']}, "
           f"{s['num_steps']} steps ({s['mode_steps']} for the mode task), learning rates "
           f"{', '.join(f'{lr:.3g}' for lr in s['learning_rates'])}, {s['num_seeds']} seeds. "
           f"Baselines: {report['baselines_dir']} (from the card's folder). Verdicts say what "
           f"the numbers show at this scale.", "", "![accuracy](accuracy.png)", "",
           "## NAP paper", ""]
  for task in CARD_TASKS:
    lines += _task_section(task, report["tasks"][task]) + ["", f"**Verdict:** {v[task]}", ""]
  att = report["attention"]
  lines += ["## DNAS paper", "", "### Explaining away (Ding et al., Definition 1, Theorem 2)", "",
            f"Trained case-task models (best learning rate, every seed) on "
            f"{s['probe_batch']} sequences: share of keys whose total absolute attention weight "
            f"over the queries is below {EPSILON:g}, share below 1/N (Theorem 2's bound, "
            f"guaranteed by DNAS only) and the least key total times N, per seed.", ""]
  lines += _table(["arm", "explained away (%)", "below 1/N (%)", "least total x N"],
                  [[label, _seeds(att[label]["explained_away"]), _seeds(att[label]["below_bound"]),
                    ", ".join(f"{x:.3g}" for x in att[label]["min_sum_times_n"])]
                   for label in ARMS])
  lines += ["", f"**Verdict:** {v['explaining_away']}", "",
            "### Mode collapse (Ding et al., Appendix E)", "",
            "Clusters left (single-linkage, gap 0.5) before and after each attention update of "
            "two Gaussian clusters, Q = K = V = I, each normalisation at its initial "
            "parameters.", ""]
  collapse = report["mode_collapse"]
  lines += _table(["pair", "scheme", "clusters per step"],
                  [[pair, scheme, " -> ".join(str(c) for c in counts)]
                   for pair, schemes in collapse.items() for scheme, counts in schemes.items()])
  lines += ["", f"**Verdict:** {v['mode_collapse']}", "", "## LayerNorm paper", "",
            "### Unselectable keys (Brody et al., Section 3)", "",
            "Share of keys that no query direction gives the strictly highest dot product, per "
            "layer, head and sequence of the trained case-task models (%), per seed.", ""]
  lines += _table(["arm", "unselectable, per seed", "min / mean / max"],
                  [[label, _seeds(att[label]["unselectable"]), _spread(att[label]["unselectable"])]
                   for label in ARMS])
  lines += ["", f"**Verdict:** {v['unselectable']}", "", "## Cost", "",
            "Batch 1, 8 heads, d_h = 64, at the normalisation's initial parameters; memory is "
            "XLA's compiled scratch memory (temporaries plus outputs), time the median of timed "
            "calls; the ratios are against softmax on the same path.", ""]
  ms = lambda t: "-" if t is None else f"{1e3 * t:.2f}"
  lines += _table(["N", "path", "mode", "ms", "MiB", "time / softmax", "memory / softmax"],
                  [[r["n"], r["path"], r["mode"], ms(r["seconds"]), f"{r['bytes'] / 2**20:.1f}",
                    _ratio(r["seconds"], r["softmax_seconds"]),
                    _ratio(r["bytes"], r["softmax_bytes"])] for r in report["cost"]])
  lines += ["", f"**Verdict:** {v['cost']}", "",
            f"The last call took {report['seconds']['this_call']:.0f} s; the sweeps' training: "
            + ", ".join(f"{k} " + ("found finished" if x is None else f"{x:.0f} s")
                        for k, x in report["seconds"]["sweeps"].items()) + "."]
  return "\n".join(lines) + "\n"


def accuracy_figure(report: dict, path: str) -> None:
  """The card's one figure (``figures.card_accuracy``)."""
  from normattn_jax.reporting import figures
  figures.card_accuracy(report, path)
