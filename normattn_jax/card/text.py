"""A report card's words: one verdict line per diagnostic and ``report.md``'s tables, from the
report that ``card.train.run`` assembles. Verdicts say what the numbers show at the scale
run, as REPRODUCTION.md's do, never more: a card at a small scale is evidence at that scale.

Every word comes from the card's judged family (``report["comparisons"]`` and
``report["family"]``, ``card_verdicts``): the card's own, provisional, until the board judges
every card as one family and writes them again. A comparison is "above" or "below" only where
its column ranks and its q is below ``card_stats.ALPHA``, "equivalent" within a declared margin
where its equivalence test's q is, otherwise "not resolved with n seeds" with its interval,
which is no claim of equality. A scale whose seeds cannot carry a verdict (``Scale.verdicts``:
the smoke scale) says so, with the smallest q its seeds can reach.
"""
from __future__ import annotations

import os
import re

import numpy as np

from normattn_jax._extras import fingerprint_id
from normattn_jax.attention.registry import BUILTIN_NORMALIZATIONS
from normattn_jax.card import stats as card_stats
from normattn_jax.card import verdicts as card_verdicts
from normattn_jax.card.names import (ARMS, BASELINES, BOUND_BY_CONSTRUCTION, CARD_TASKS, CASES,
                                     EPSILON, SPARSE_BY_CONSTRUCTION, TASK_METRIC)
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


def gives_verdicts(report: dict) -> bool:
  """Whether the card's scale carries verdicts (the smoke scale's seeds cannot)."""
  return bool(report["sizes"].get("verdicts", True))


def smallest_q(report: dict) -> tuple[float, float]:
  """``(p, q)``: the smallest two-sided Mann-Whitney p that the card's evaluation seeds can
  give, and the q of one such comparison alone among the family's pairs (p times their
  count)."""
  n = report["sizes"]["evaluation_seeds"]
  p = card_stats.smallest_p(n, n)
  family = report.get("family", {})
  count = max(1, family.get("difference", 0) or family.get("comparisons", 1))
  return p, min(1.0, p * count)


def _column(report: dict, key: str) -> dict:
  return report.get("family", {}).get("columns", {}).get(key, {})


def _ranks(report: dict, key: str) -> bool:
  return bool(_column(report, key).get("ranks"))


def _compared(report: dict, key: str) -> list:
  """The baselines the card is compared with on ``key``: both, or the one it is not."""
  return [base for base in BASELINES if base != report.get("twin")
          and base in report.get("comparisons", {}).get(key, {})]


def _phrase(report: dict, key: str, base: str, shown: str) -> str:
  m = report["measures"][key]
  unit, scale = ("%", 100.0) if m["percent"] else ("", 1.0)
  c = report["comparisons"][key][base]
  if c.get("word") == "not read":
    return f"not read against {shown} ({c['why']})"
  if not gives_verdicts(report):
    return (f"beside {shown}: {card_stats.numbers(c, unit, scale)} (no verdict at the "
            f"{report['scale']} scale)")
  return card_stats.phrase(c, shown, unit, scale, _ranks(report, key))


def against(report: dict, key: str) -> str:
  """The card's mean of a measure against the baselines' (each one it is not), in words."""
  m = report["measures"][key]
  parts = []
  for base in _compared(report, key):
    shown = f"{SHOWN[base]}'s {_fmt(card_stats.mean(m['values'][base]), m['percent'])}"
    parts.append(_phrase(report, key, base, shown))
  return " and ".join(parts) or "compared with no baseline (the card is one)"


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


def _column_note(report: dict, key: str) -> str:
  column = _column(report, key)
  if not column or _ranks(report, key):
    return ""
  return f" (the column does not rank: {column['why']})"


def _task_verdict(task: str, report: dict) -> str:
  scale, name = report["scale"], report["normalization"]
  scores = report["tasks"][task]
  lr = scores["arms"]["card"]["learning_rate"]
  head = (f"At the {scale} scale, on {_seeds_phrase(report)} at its selected learning rate "
          f"{lr:.3g} ({selection_outcome(scores['arms']['card']['selection'], lr)}), ")
  key = f"{task}.{TASK_METRIC[task]}"
  accuracy = (_measure_sentence(report, key, f"{name}'s {_label(report, key)}")
              + _column_note(report, key))
  if "threshold" not in scores:
    return head + accuracy + "."
  arms = scores["arms"]
  learned = {label: f"{sum(arms[label]['learned_all'])}/{len(arms[label]['learned_all'])}"
             for label in ARMS}
  learned = (f"{learned['card']} of {name}'s seeds learn all three cases (softmax "
             f"{learned['softmax']}, NAP {learned['nap']}; the share "
             f"{against(report, f'{task}.learned_all')}"
             f"{_column_note(report, f'{task}.learned_all')})")
  if task == "first_token":  # Fig. 5's question leads
    return f"{head}{learned}; {accuracy}."
  return f"{head}{accuracy}; {learned}."


def selection_outcome(selection: dict, selected: float) -> str:
  """How a selection ended: "interior", "extended to 0.081, interior", "capped at the top
  (cap 0.243)"; for a card of an earlier protocol, whose grid was never extended, whether its
  pick lies on an edge."""
  outcome = selection.get("outcome")
  rates = selection["learning_rates"]
  if outcome is None:
    on_edge = len(rates) > 1 and selected in (min(rates), max(rates))
    return "on an edge of the grid, not extended" if on_edge else "interior"
  extended = selection.get("extended") or []
  grown = f"grid extended to {', '.join(f'{r:.3g}' for r in extended)}; " if extended else ""
  if outcome.startswith("capped"):
    cap = selection["cap"][1 if outcome.endswith("top") else 0]
    return f"{grown}{outcome} (cap {cap:.3g})"
  return f"{grown}{outcome}"


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


def _held(flags: list, what: str) -> str:
  failed = sum(x > 0 for x in flags)
  seeds = len(flags)
  return (f"{what} holds in every one of {seeds} seeds" if not failed else
          f"{what} fails in {failed} of {seeds} seeds ({_pct(card_stats.mean(flags))}% of keys "
          f"below it)")


def bound_check(report: dict) -> str:
  """Theorem 2's bound in words: 1/N, a check of the code for DNAS and Sinkhorn (which meet it
  by construction) and a finding for the rest; for HNAS the bound it meets by construction is
  u/N (u its learned DNAS share per head), checked as such, and 1/N a finding."""
  att, name = report["attention"]["card"], report["normalization"]
  kind = BOUND_BY_CONSTRUCTION.get(report["name"])
  one = _held(att["below_bound"], "Theorem 2's bound (every key's total weight >= 1/N)")
  if kind == "1/N":
    return f"{one} for {name} (a check of the code: it holds by construction)."
  if kind is None:
    return f"{one} for {name} (not guaranteed by its construction)."
  own = att.get("below_own_bound")
  checked = ("HNAS's own bound u/N was not checked by this card's protocol" if own is None
             or any(x is None for x in own) else
             _held(own, "its own bound (every key's total weight >= u/N, u its learned DNAS "
                        "share of the head)") + " (a check of the code: it holds by "
                                                "construction)")
  return (f"{one} for {name}, which its construction does not guarantee (its softmax share, "
          f"1 - u, may give a key nothing); {checked}.")


def _premise(report: dict, key: str) -> str:
  """What this scale shows of a quantity's phenomenon in softmax, from its controls: "" where
  it has none."""
  m = report["measures"][key]
  checks = report.get("control_checks", {}).get(key)
  if not m.get("phenomenon"):
    return ""
  if checks is None:
    return (f"its controls were not measured, so this card does not say whether this scale "
            f"shows {m['phenomenon']}")
  if not checks["separate"]:
    return f"its controls do not separate ({checks['why']}): the probe cannot tell here"
  if not m.get("in_softmax", True):  # the claim is of the card's own, not softmax's
    return ""
  shown = card_verdicts.phenomenon_shown(m["values"]["softmax"], checks)
  negatives = ", ".join(f"{label} {_fmt(mean, m['percent'])}"
                        for label, mean in shown["negatives"])
  softmax = _fmt(card_stats.mean(m["values"]["softmax"]), m["percent"])
  if shown["shown"]:
    return f"softmax shows {m['phenomenon']} ({softmax}, above {negatives})"
  return (f"this scale does not show {m['phenomenon']} in softmax ({softmax}, against "
          f"{negatives}): the claim cannot be checked here")


def _lm_level(report: dict, label: str = "card") -> str:
  quality = report.get("lm_quality")
  if not quality:
    return ""
  entry = quality["arms"].get(label)
  if entry is None:
    return ""
  if entry["beats"]:
    return (f"the LM ({entry['loss']:.3g} nats at L) beats a trigram model "
            f"({quality['trigram']:.3g} nats)")
  return (f"the LM ({entry['loss']:.3g} nats at L) does not beat a trigram model "
          f"({quality['trigram']:.3g} nats), so its context-dependent diagnostics are not read")


def _underflow(report: dict) -> str:
  """For a normalisation whose weights are positive in exact arithmetic, what its exact zeros
  are: float32 underflow, not sparsity."""
  values = report["measures"].get("sparsity.zero_share", {}).get("values", {}).get("card")
  if report["name"] in SPARSE_BY_CONSTRUCTION or not values:
    return ""
  share = card_stats.mean(values)
  if not share > 0:
    return ""
  if report["name"] not in BUILTIN_NORMALIZATIONS:
    return (f"whether {report['normalization']}'s {100 * share:.1f}% exact zeros are its "
            f"construction or float32 underflow this card cannot tell")
  return (f"{report['normalization']}'s {100 * share:.1f}% exact zeros are float32 underflow "
          f"of weights that are positive in exact arithmetic (the exponential of a log-weight "
          f"below float32's smallest number), not sparsity")


def verdicts(report: dict) -> dict:
  """One line per diagnostic, each "At the <scale> scale, ...".

  Args:
    report: ``report_card.run``'s report (every section, measures, comparisons and family).

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
      + _column_note(report, "explaining_away.explained_away") + ". " + bound_check(report))
  out["mode_collapse"] = _collapse_verdict(report)
  out["unselectable"] = (at + _measure_sentence(
      report, "unselectable.unselectable",
      f"the share of unselectable keys in trained {name} models")
      + _column_note(report, "unselectable.unselectable") + ".")
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
    sentences, said = [], set()
    for q in entry["quantities"]:
      key = f"{diagnostic}.{q['key']}"
      if key not in report["measures"] or not report["measures"][key].get("in_verdict", True):
        continue
      premise = _premise(report, key)
      if premise in said:
        premise = ""
      said.add(premise)
      sentences.append((f"{premise}; " if premise else "")
                       + _measure_sentence(report, key, f"{name}'s {q['label']}")
                       + _column_note(report, key))
    level = _lm_level(report) if any(q.get("context_dependent") for q in entry["quantities"]) \
        else ""
    extra = [x for x in (level, _underflow(report) if diagnostic == "sparsity" else "") if x]
    out[diagnostic] = at + "; ".join(extra + sentences) + "."
  if not gives_verdicts(report):  # the lines that compare seeds say they cannot
    p, q = smallest_q(report)
    compared = set(CARD_TASKS) | {"explaining_away", "unselectable"} | {
        name for name, entry in report["diagnostics"].items() if "values" in entry}
    out = {k: f"{v} [No verdict: with {report['sizes']['evaluation_seeds']} seeds per arm the "
              f"smallest attainable p is {p:.2g}, q {q:.2g}.]" if k in compared else v
           for k, v in out.items()}
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


def cell(x) -> str:
  """A table cell: its text with ``|`` escaped, so that a label such as "|activation|" does not
  split the row."""
  return re.sub(r"(?<!\\)\|", r"\\|", str(x))


def table(columns: list, rows: list) -> list:
  """A Markdown table's lines, every cell escaped (``cell``)."""
  return (["| " + " | ".join(cell(c) for c in columns) + " |", "|---" * len(columns) + "|"]
          + ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows])


_table = table


def _family_sentence(report: dict) -> str:
  family = report.get("family", {})
  if family.get("scope") == "board":
    return (f"Words from the board's family: {family['cards']} cards, {family['comparisons']} "
            f"pairs ({family['difference']} tested for a difference on the ranked columns, "
            f"{family['equivalence']} for equivalence), {card_stats.FDR_METHOD} over each")
  return (f"**Provisional words**: judged on this card alone ({family.get('comparisons', 0)} "
          f"pairs, {family.get('difference', 0)} tested for a difference, "
          f"{family.get('equivalence', 0)} for equivalence, {card_stats.FDR_METHOD} over "
          f"each); the board (REPORT_CARDS.md, normattn-leaderboard) judges every card as "
          f"one family and writes them again")


def comparison_table(report: dict, keys: list) -> list:
  """Each measure of ``keys`` against each baseline the card is not: the Hodges-Lehmann shift
  with the Mann-Whitney test's inverted 95% interval, Cliff's delta, p, q, the equivalence
  test's margin and q, and the word; then whether each column ranks and why."""
  rows = []
  for key in keys:
    m = report["measures"][key]
    unit, scale = ("%", 100.0) if m["percent"] else ("", 1.0)
    for base in _compared(report, key):
      c = report["comparisons"][key][base]
      if "shift" not in c:
        rows.append([m["label"], SHOWN[base], "-", "-", "-", "-", "-", c.get("why", "-")])
        continue
      margin = "-" if not c.get("margin") else f"±{scale * c['margin']:.3g}{unit}"
      rows.append([m["label"], SHOWN[base],
                   f"{scale * c['shift']:+.3g}{unit} [{scale * c['ci'][0]:+.3g}, "
                   f"{scale * c['ci'][1]:+.3g}]", f"{c['effect']:+.2f}", f"{c['p']:.3g}",
                   "-" if c.get("q") is None else f"{c['q']:.3g}",
                   f"{margin}: q = {c['q_equivalent']:.3g}" if c.get("q_equivalent") is not None
                   else "-", c["word"] if gives_verdicts(report) else "no verdict"])
  notes = [f"{report['measures'][key]['label']}: "
           + ("ranks" if _ranks(report, key) else "does not rank")
           + f" ({_column(report, key).get('why', 'not judged')})" for key in keys]
  return (["", f"The card against each baseline on the evaluation seeds: the "
           f"{card_stats.ESTIMAND} (card - baseline) with the {card_stats.TEST} test inverted "
           f"for its {card_stats.CONFIDENCE:.0%} interval, Cliff's delta, p, and q "
           f"({card_stats.FDR_METHOD}); the equivalence test (two one-sided Mann-Whitney "
           f"tests) within the declared margin. {_family_sentence(report)}.", ""]
          + table(["measure", "vs", "shift [95% CI]", "Cliff's delta", "p", "q",
                   "equivalence: margin, q", "word"], rows)
          + [""] + [f"- {note}" for note in notes])


def _selection_rows(scores: dict) -> list:
  rows = []
  for label in ARMS:
    arm = scores["arms"][label]
    selection = arm["selection"]
    extended = set(selection.get("extended") or [])
    rates = ", ".join(f"{lr:.3g}{'*' if lr in extended else ''}: {_pct(m)}" for lr, m in zip(
        selection["learning_rates"], selection["train_acc_means"]))
    rows.append([label, rates, f"{arm['learning_rate']:.3g}",
                 selection_outcome(selection, arm["learning_rate"])])
  return rows


def _task_section(task: str, report: dict) -> list:
  scores = report["tasks"][task]
  arms = scores["arms"]
  metrics = [("train_acc", "train"), ("val_acc", "validation")]
  if "threshold" in scores:
    metrics += [(f"case_acc_{c}", c) for c in CASES]
  lines = [f"### {TASK_TITLES[task]}", "",
           "Selection: each learning rate's mean training accuracy over the selection seeds (%; "
           "* a rate of the grid's extension), the rate selected, and how the selection ended.",
           ""]
  lines += table(["arm", "learning rate: mean train %", "selected", "grid"],
                 _selection_rows(scores))
  columns = ["arm"] + [f"{label}: min / mean / max" for _, label in metrics]
  rows = [[label] + [_spread(arms[label][m]) for m, _ in metrics] for label in ARMS]
  lines += ["", "Evaluation: best accuracy over training (%) of each evaluation seed at the "
            "selected rate.", ""] + table(columns, rows)
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
  lines += [""] + table(columns, per_seed)
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
  p, q = smallest_q(report)
  n = s["evaluation_seeds"]
  resolution = (f"With {n} evaluation seeds per arm the smallest attainable Mann-Whitney p is "
                f"{p:.2g}; one such comparison alone among this family's tested pairs reaches "
                f"q = {q:.2g}.")
  if not gives_verdicts(report):
    resolution = ("**This scale gives no verdicts**: its numbers check that the card runs. "
                  + resolution + " Every line below reads \"no verdict\".")
  twin = report.get("twin")
  same = (f" This card is the {SHOWN[twin]} baseline itself (the same runs): it is compared "
          f"with the other baseline alone." if twin else "")
  extension = ""
  if "outcome" in next(iter(report["tasks"].values()))["arms"]["card"]["selection"]:
    extension = (" A pick on an edge of the grid extends it, one rate a factor of 3 past that "
                 "edge at a time, until the pick is interior or the cap (the grid's end times "
                 "or over 9) is reached; the LMs select their rate the same way (the lowest "
                 "mean training loss).")
  return [f"# Report card: {card} ({report['scale']} scale)", "",
          f"MTE layout with {card} ('card') beside softmax in the MTE layout and NAP: N = "
          f"{s['seq_len']}, d = {s['d_model']}, {s['num_layers']} layers, {s['num_heads']} heads, "
          f"batch {s['batch_size']}, {s['num_steps']} steps ({s['mode_steps']} for the mode "
          f"task). Protocol: each arm's learning rate is selected from {lrs} on "
          f"{s['selection_seeds']} selection seeds (the best mean training accuracy), then the "
          f"arm is trained again at that rate on {s['evaluation_seeds']} fresh evaluation seeds; "
          f"every comparison below is made on the evaluation seeds alone.{extension}{same}", "",
          f"Machine: {shown} (fingerprint {fingerprint_id(machine)}). Baselines: "
          f"{b['dir']} (from the card's folder), of this machine only, {trained}. Verdicts say "
          f"what the numbers show at this scale.", "",
          f"Statistics: each comparison is one estimand, the {card_stats.ESTIMAND}, with its "
          f"test ({card_stats.TEST}) and that test's inverted {card_stats.CONFIDENCE:.0%} "
          f"interval; a measure ranks the arms only where Kruskal-Wallis across them rejects "
          f"({card_stats.FDR_METHOD} over the measures), it is not at its ceiling and its "
          f"controls separate; elsewhere a pair is \"equivalent\" within the measure's declared "
          f"margin (two one-sided tests) or \"not resolved\". {_family_sentence(report)}. "
          f"{resolution}", "", "![accuracy](accuracy.png)", ""]


def _controls_table(report: dict, keys: list) -> list:
  rows = []
  for key in keys:
    checks = report.get("control_checks", {}).get(key)
    if checks is None:
      continue
    m = report["measures"][key]
    entries = [("positive", checks["positive"])] + [("negative", n) for n in checks["negatives"]]
    for i, (kind, entry) in enumerate(entries):
      values = entry.get("values") or []
      shown = (f"not measured ({entry['error']})" if entry.get("error") else
               _fmt(card_stats.mean(values), m["percent"]))
      p = "-" if kind == "positive" else f"{checks['p'][i - 1]:.2g}"
      rows.append([m["label"], kind, entry["label"], shown, p,
                   ("separate" if checks["separate"] else "do not separate") if not i else ""])
  if not rows:
    return []
  return (["", "Controls: what the probe reads on a model that has the phenomenon (positive) and "
           "on ones that have not (negative); p: the positive one above the negative "
           "(one-sided Mann-Whitney). A column ranks only where they separate.", ""]
          + table(["quantity", "control", "what", "mean", "p", "controls"], rows))


def _diagnostic_section(name: str, entry: dict, report: dict) -> list:
  lines = [f"### {entry['title']}", "", f"The claim: {entry['claim']}.", ""]
  if "error" in entry:
    return lines + [f"The diagnostic `{name}` raised; the rest of the card was completed:", "",
                    "```", entry["error"].rstrip(), "```"]
  if "not_applicable" in entry:
    return lines + [f"Not measured: {entry['not_applicable']}."]
  quantities = [q for q in entry["quantities"] if f"{name}.{q['key']}" in report["measures"]]
  columns = ["arm"] + [f"{q['label']}: per seed" for q in quantities]
  rows = [[label] + [_seeds(report["measures"][f"{name}.{q['key']}"]["values"][label],
                            q["percent"]) for q in quantities] for label in ARMS]
  means = [[label] + [_fmt(card_stats.mean(report["measures"][f"{name}.{q['key']}"]["values"]
                                           [label]), q["percent"])
                      for q in quantities] for label in ARMS]
  lines += table(["arm"] + [f"{q['label']}: mean" for q in quantities], means)
  lines += ["", "<details><summary>per seed</summary>", ""] + table(columns, rows)
  lines += ["", "</details>"]
  keys = [f"{name}.{q['key']}" for q in quantities]
  return (lines + _controls_table(report, keys) + comparison_table(report, keys))


def _lm_section(report: dict) -> list:
  lm = report["sizes"]["lm"]
  corpus = report.get("corpus") or "shakespeare"
  corpus = ("the Shakespeare texts" if corpus == "shakespeare" else
            f"a local text file, fingerprint {corpus.partition(':')[2]}")
  lines = ["## Today's normalisations' own claims", "",
           f"A causal character-level LM per arm on {corpus}, no positional encoding (the "
           f"causal mask alone tells "
           f"position, so every normalisation runs at any length): d = {lm['d_model']}, "
           f"{lm['num_layers']} layers, {lm['num_heads']} heads, trained at L = "
           f"{lm['train_len']} tokens for {lm['num_steps']} steps, one model per evaluation "
           f"seed; the card's normalisation beside softmax and NAP in the same decoder.", ""]
  selection = report.get("lm_selection")
  if selection:
    rows = [[label, ", ".join(f"{lr:.3g}{'*' if lr in set(entry['extended']) else ''}: "
                              f"{'-' if x is None else f'{-x:.3g}'}"
                              for lr, x in zip(entry["learning_rates"], entry["scores"])),
             f"{entry['selected']:.3g}", selection_outcome(entry, entry["selected"])]
            for label, entry in selection.items() if entry is not None]
    lines += ["Selection: each learning rate's mean final training loss over the selection "
              "seeds (nats; * a rate of the grid's extension), the rate selected (the lowest) "
              "and how the selection ended.", ""]
    lines += table(["arm", "learning rate: mean train loss", "selected", "grid"], rows) + [""]
  else:
    lines += [f"Every arm's LM trained at the learning rate {lm['learning_rate']:g}, not "
              f"selected (a card of an earlier protocol).", ""]
  quality = report.get("lm_quality")
  if quality:
    rows = [[label, f"{entry['loss']:.3g}", f"{entry['q']:.2g}",
             "yes" if entry["beats"] else "no"] for label, entry in quality["arms"].items()]
    lines += [f"The level an LM must beat to read its use of context: on the same held-out "
              f"windows at L, an interpolated Witten-Bell trigram model fitted on the training "
              f"text gives {quality['trigram']:.3g} nats, its bigram {quality['bigram']:.3g}. "
              f"Each arm's loss at L against the trigram (one-sided Wilcoxon signed-rank over "
              f"its seeds, q by {card_stats.FDR_METHOD}); an arm that does not beat it is not "
              f"read on the context-dependent quantities.", ""]
    lines += table(["arm", "loss at L (nats)", "q", "beats the trigram"], rows) + [""]
  else:
    lines += ["The LMs were not compared with an n-gram model (a card of an earlier protocol): "
              "their context-dependent quantities are not read.", ""]
  return lines


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
            f"{EPSILON:g}, share below 1/N (Theorem 2's bound: DNAS and Sinkhorn meet it by "
            f"construction, HNAS meets u/N, u its learned DNAS share per head) and the least key "
            f"total times N, per seed.", ""]
  lines += table(["arm", "explained away (%)", "below 1/N (%)", "least total x N"],
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
  lines += table(["pair", "scheme", "clusters per step", "outcome"],
                 [[pair, scheme, " -> ".join(str(c) for c in counts), collapse_outcome(counts)]
                  for pair, schemes in collapse.items() for scheme, counts in schemes.items()])
  lines += ["", f"**Verdict:** {v['mode_collapse']}", "", "## LayerNorm paper", "",
            "### Unselectable keys (Brody et al., Section 3)", "",
            "Share of keys that no query direction gives the strictly highest dot product, per "
            "layer, head and sequence of the trained case-task models (%), per seed.", ""]
  lines += table(["arm", "unselectable, per seed", "min / mean / max"],
                 [[label, _seeds(att[label]["unselectable"]), _spread(att[label]["unselectable"])]
                  for label in ARMS])
  lines += comparison_table(report, ["unselectable.unselectable"])
  lines += ["", f"**Verdict:** {v['unselectable']}", ""] + _lm_section(report)
  for name, entry in report["diagnostics"].items():
    lines += _diagnostic_section(name, entry, report) + ["", f"**Verdict:** {v[name]}", ""]
  lines += ["## Cost", "",
            "Batch 1, 8 heads, d_h = 64, at the normalisation's initial parameters; memory is "
            "XLA's compiled scratch memory (temporaries plus outputs), time the median of timed "
            "calls; the ratios are against softmax measured in the same run, on the row's path "
            "and on softmax's quadratic path.", ""]
  ms = lambda t: "-" if t is None else f"{1e3 * t:.2f}"
  lines += table(["N", "path", "mode", "ms", "MiB", "time / softmax quadratic",
                  "time / softmax same path", "memory / softmax quadratic"],
                 [[r["n"], r["path"], r["mode"], ms(r["seconds"]), f"{r['bytes'] / 2**20:.1f}",
                   _ratio(r["seconds"], r["softmax_quadratic_seconds"]),
                   _ratio(r["seconds"], r["softmax_seconds"]),
                   _ratio(r["bytes"], r["softmax_quadratic_bytes"])] for r in report["cost"]])
  lines += ["", f"**Verdict:** {v['cost']}", "",
            f"The last call took {report['seconds']['this_call']:.0f} s, its analyses "
            f"{report['seconds']['analyses']:.0f} s; the training: "
            + ", ".join(f"{k} " + ("found finished" if x is None else f"{x:.0f} s")
                        for k, x in report["seconds"]["sweeps"].items()
                        if not k.startswith("partial/")) + "."]
  return "\n".join(lines) + "\n"


def write_report(report: dict, folder: str) -> None:
  """A card's words from its numbers: the verdicts (into ``report``), ``report.md`` and
  ``report.json`` (its figure: ``reporting.drawers``). A finished card's words are written again
  this way after a change of wording or of its family (the board's), its numbers untouched."""
  report["verdicts"] = verdicts(report)
  with open(os.path.join(folder, "report.md"), "w") as f:
    f.write(markdown(report))
  write_json(os.path.join(folder, "report.json"), report, indent=1)
