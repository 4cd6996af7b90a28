"""The words of the report cards, judged as one family: the same procedure for a card run alone
(its words provisional) and for the board over every card (``leaderboard``), whose words then
replace each card's.

For each measure (a column) the arms are softmax, NAP and every card that is not one of them (a
card of softmax or NAP *is* that baseline: ``twin``), so that no arm is compared with itself and
each pair is judged once. Then:

1. **Which columns rank.** Kruskal-Wallis across the arms' seeds, Benjamini-Hochberg over the
   columns; a column ranks where that q is below ``card_stats.ALPHA``, it is not at its ceiling
   (every arm's mean within ``CEILING_GAP`` of the measure's top, e.g. 100% accuracy), its
   quantity's controls separate (``control_checks``: the probe tells a model with the
   phenomenon from ones without) and, for a quantity that reads how an LM uses its context,
   only among the arms whose LM beats a trigram model (``lm_quality``).
2. **Each pair.** The Hodges-Lehmann shift with the Mann-Whitney test and its inverted interval
   (``card_stats.compare``); "above" / "below" where its column ranks and its q (BH over every
   pair of the ranked columns) is below ALPHA; "equivalent" where the two one-sided tests within
   the measure's declared margin give q (BH over every pair with a margin) below ALPHA;
   "identical" where both arms take one value on every seed; "not ranked" on a column whose
   controls keep it from ranking; otherwise "not resolved".
3. **Stability.** ``stability`` judges every word again on random halves of each arm's seeds
   (the whole procedure, within each half), ``STABILITY_SPLITS`` times: the agreement of the two
   halves on the words that can disagree, and each half's agreement with the full word.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional

import numpy as np

from normattn_jax.attention.registry import AttentionSpec
from normattn_jax.card import stats as card_stats
from normattn_jax.card import diagnostics as diagnostics_lib
from normattn_jax.card.names import BASELINES

ALPHA = card_stats.ALPHA
CEILING_GAP = 0.01       # a column is at its ceiling where every arm's mean is this close to top
STABILITY_SPLITS = 200   # random halvings of every arm's seeds
SPLIT_SEED = 0           # they are drawn alike every time: the board repeats
STABILITY_GOAL = 0.9     # the share of words two halves of the seeds should agree on
PAIR_SEPARATOR = " vs "

# The rules of the measures that a card makes itself (not a diagnostic's quantities): the
# equivalence margin in the measure's units, the top it cannot pass (None: none), and whether
# it is a board column.
TASK_RULES = (
    (r"\.(train_acc|val_acc)$", {"margin": 0.005, "top": 1.0}),      # 0.5 points of accuracy
    # a seed learns or not: a shift of 0/1 values within a margin below 1 means nothing
    (r"\.learned_all$", {"margin": None, "top": 1.0}),
    (r"^explaining_away\.", {"margin": 0.005, "top": None}),
    (r"^unselectable\.", {"margin": 0.005, "top": None}),
)
RULE_FIELDS = {"margin": None, "top": None, "context_dependent": False, "phenomenon": "",
               "on_board": True, "in_verdict": True, "in_softmax": True}


# ----- the measures and the arms -----

def measure_rules(key: str) -> dict:
  """The rules of a measure by its key: a task's or attention analysis's from ``TASK_RULES``, a
  diagnostic quantity's from its registered ``Quantity``; the defaults for an unknown one."""
  for pattern, rules in TASK_RULES:
    if re.search(pattern, key):
      return dict(RULE_FIELDS, **rules)
  name, _, quantity = key.partition(".")
  if name in diagnostics_lib.names():
    for q in diagnostics_lib.get(name).quantities:
      if q.key == quantity:
        return dict(RULE_FIELDS, margin=q.margin, context_dependent=q.context_dependent,
                    phenomenon=q.phenomenon, on_board=q.on_board, in_verdict=q.in_verdict,
                    in_softmax=q.in_softmax)
  return dict(RULE_FIELDS)


def derived_growth(measures: dict) -> dict:
  """The length diagnostic's growth from 1L (``loss_mx - loss_1x`` per seed), for a card whose
  report stored the losses alone."""
  out = {}
  one = measures.get("length_generalisation.loss_1x")
  for key, m in measures.items():
    found = re.fullmatch(r"length_generalisation\.loss_(\d+)x", key)
    if one is None or not found or found.group(1) == "1":
      continue
    growth = f"length_generalisation.growth_{found.group(1)}x"
    if growth in measures:
      continue
    values = {arm: [None if x is None or y is None else x - y
                    for x, y in zip(m["values"][arm], one["values"][arm])]
              for arm in m["values"]}
    out[growth] = {"label": f"loss growth from 1L to {found.group(1)}L (nats)",
                   "percent": False, "values": values}
  return out


def complete_measures(measures: dict) -> dict:
  """A report's measures, each with its rules (``measure_rules`` where it stored none) and the
  derived growth (``derived_growth``)."""
  out = {}
  for key, m in dict(measures, **derived_growth(measures)).items():
    out[key] = dict(measure_rules(key), **m)
  return out


def twin(report: dict) -> Optional[str]:
  """The baseline a card is (softmax's card is the softmax baseline, NAP's the NAP one: the same
  runs), or None."""
  try:
    spec = AttentionSpec(report["name"], report.get("options", {}))
  except (KeyError, ValueError):
    return None
  for base in BASELINES:
    if report["name"] == base and spec.resolved() == AttentionSpec.of(base).resolved():
      return base
  return None


def arm_id(report: dict) -> str:
  """A card's arm on the board: its normalisation, or the baseline it is."""
  return twin(report) or report["normalization"]


# ----- controls and the LMs' level -----

def control_checks(controls: dict) -> dict:
  """Whether each quantity's controls separate: the positive control above every negative one
  (one-sided Mann-Whitney, BH over every control test of the report).

  Args:
    controls: ``{measure key: {"positive": {"label", "values", "error"?}, "negatives": [...]}}``
      (``diagnostics.Diagnostic.controls``).

  Returns:
    ``{measure key: {..., "p": [per negative], "q": [...], "separate": bool, "why": str}}``.
  """
  tests = []
  out = {}
  for key, entry in controls.items():
    positive = card_stats.finite(entry["positive"]["values"])
    ps = []
    for negative in entry["negatives"]:
      other = card_stats.finite(negative["values"])
      ps.append(float(card_stats.rank_p(positive, other, "greater"))
                if positive.size >= 2 and other.size >= 1 else 1.0)
    out[key] = dict(entry, p=ps)
    tests += [(key, i) for i in range(len(ps))]
  qs = card_stats.controlled([out[k]["p"][i] for k, i in tests])
  for (key, i), q in zip(tests, qs):
    out[key].setdefault("q", []).append(q)
  for key, entry in out.items():
    missing = entry["positive"].get("error") or (
        "" if len(entry["positive"]["values"]) >= 2 else "no values")
    entry["separate"] = not missing and all(q < ALPHA for q in entry.get("q", [1.0]))
    entry["why"] = (f"the positive control was not measured ({missing})" if missing else
                    "the positive control lies above every negative one" if entry["separate"]
                    else "the positive control does not lie above every negative one")
  return out


def lm_quality(report: dict) -> Optional[dict]:
  """Whether each arm's LM beats the trigram model on the held-out windows at L (one-sided
  Wilcoxon signed-rank of its seeds' loss at 1L minus the trigram's, q by BH over the arms),
  or None where the report has no n-gram reference."""
  refs = report.get("lm_references")
  loss = report.get("measures", {}).get("length_generalisation.loss_1x")
  if not refs or loss is None:
    return None
  trigram = float(np.mean(refs["ngram"]["3"]["loss_by_band"]["1"]))
  bigram = float(np.mean(refs["ngram"]["2"]["loss_by_band"]["1"]))
  stats = require_stats()
  arms, ps = {}, []
  for arm, values in loss["values"].items():
    v = card_stats.finite(values)
    p = (float(stats.wilcoxon(v - trigram, alternative="less").pvalue)
         if v.size >= 2 and np.ptp(v - trigram) + abs(np.mean(v - trigram)) > 0 else 1.0)
    arms[arm] = {"loss": card_stats.mean(values), "p": p}
    ps.append(p)
  for entry, q in zip(arms.values(), card_stats.controlled(ps)):
    entry["q"] = q
    entry["beats"] = bool(q < ALPHA and entry["loss"] < trigram)
  return {"trigram": trigram, "bigram": bigram, "arms": arms}


def require_stats():
  from normattn_jax._extras import require
  return require("scipy.stats", "analysis")


def phenomenon_shown(values, control: dict) -> dict:
  """Whether an arm (e.g. softmax) shows a quantity's phenomenon: its seeds above every negative
  control (one-sided Mann-Whitney, BH over the negatives).

  Returns:
    ``{"shown": bool, "p": [per negative], "negatives": [(label, mean)]}``.
  """
  v = card_stats.finite(values)
  ps = [float(card_stats.rank_p(v, card_stats.finite(n["values"]), "greater"))
        if v.size >= 2 and len(n["values"]) else 1.0 for n in control["negatives"]]
  qs = card_stats.controlled(ps)
  return {"shown": bool(qs) and all(q < ALPHA for q in qs), "p": ps,
          "negatives": [(n["label"], card_stats.mean(n["values"])) for n in control["negatives"]]}


def prepare(report: dict) -> dict:
  """A report as the judgement reads it: its measures completed (``complete_measures``), its
  controls checked (``control_checks`` of ``report["controls"]``, where measured) and its LMs'
  level against the trigram (``lm_quality``). The same for a card of an earlier protocol,
  whose report lacks the last two (its context-dependent and controlled columns are then not
  read)."""
  out = dict(report, measures=complete_measures(report["measures"]), twin=twin(report))
  out["control_checks"] = control_checks(report["controls"]) if report.get("controls") else {}
  out["lm_quality"] = lm_quality(out)
  return out


# ----- the columns -----

@dataclasses.dataclass
class Column:
  """One measure across the arms: its rules, the readable arms' per-seed values and why the
  others are not read, and its controls."""
  key: str
  label: str
  percent: bool
  margin: Optional[float]
  top: Optional[float]
  context_dependent: bool
  phenomenon: str
  on_board: bool
  values: dict        # arm id -> float64 [seeds], NaN for a missing seed
  unread: dict        # arm id -> why it is not read
  controls: Optional[dict]


def _beats(report: dict, label: str) -> tuple[bool, str]:
  quality = report.get("lm_quality")
  if quality is None:
    return False, "its LM was not compared with a trigram model"
  entry = quality["arms"].get(label)
  if entry is None:
    return False, "its LM was not compared with a trigram model"
  if entry["beats"]:
    return True, ""
  return False, (f"its LM ({entry['loss']:.3g} nats at L) does not beat the trigram model "
                 f"({quality['trigram']:.3g} nats)")


def columns(reports: list) -> dict:
  """Every measure of the reports as a ``Column``, in the first report's order; the baselines'
  values from the first report that holds the measure."""
  out = {}
  for r in reports:
    measures = r["measures"]
    for key, m in measures.items():
      if key not in out:
        checks = r.get("control_checks", {}).get(key)
        out[key] = Column(key, m["label"], m["percent"], m.get("margin"), m.get("top"),
                          bool(m.get("context_dependent")), m.get("phenomenon", ""),
                          bool(m.get("on_board", True)), {}, {}, checks)
        for base in BASELINES:
          _add(out[key], base, m["values"][base], r, base)
      if twin(r) is None:
        _add(out[key], r["normalization"], m["values"]["card"], r, "card")
  return out


def _add(column: Column, arm: str, values, report: dict, label: str) -> None:
  if column.context_dependent:
    read, why = _beats(report, label)
    if not read:
      column.unread[arm] = why
      return
  column.values[arm] = card_stats.per_seed(values)


def pairs(reports: list, cols: dict) -> list:
  """Every pair judged once: each card that is not a baseline against softmax and NAP, and
  softmax against NAP, on each column both arms are read on: ``(arm, key, baseline)``."""
  out = []
  for key, column in cols.items():
    arms = [arm_id(r) for r in reports if key in r["measures"] and twin(r) is None]
    for arm in arms + [BASELINES[0]]:
      for base in BASELINES:
        if arm == base or (arm in BASELINES and BASELINES.index(arm) > BASELINES.index(base)):
          continue
        if (arm, key, base) not in out:
          out.append((arm, key, base))
  return out


def _readable(pair: tuple, cols: dict) -> bool:
  arm, key, base = pair
  return arm in cols[key].values and base in cols[key].values


# ----- the words, for a batch of resamples -----

def _words(cols: dict, judged: list, data: dict, batch: int) -> dict:
  """The words of ``judged`` pairs for ``batch`` resamples: ``data[(key, arm)]`` is ``[batch,
  seeds]``. Returns ``{"ranks": {key: bool [batch]}, "kw": {key: (p, q)}, "words": {pair:
  str [batch]}, "p", "p_equivalent", "q", "q_equivalent", "identical"}``."""
  keys = list(cols)
  kw_p = np.ones((len(keys), batch))
  for i, key in enumerate(keys):
    arms = [data[(key, arm)] for arm in cols[key].values]
    if len(arms) >= 2:
      kw_p[i] = card_stats.kruskal_p(arms)
  kw_q = np.asarray(card_stats.controlled(kw_p, axis=0)) if keys else kw_p
  ranks, gated = {}, {}
  for i, key in enumerate(keys):
    c = cols[key]
    means = np.stack([np.nanmean(data[(key, arm)], axis=-1) for arm in c.values]) \
        if c.values else np.zeros((0, batch))
    ceiling = (np.all(means >= c.top - CEILING_GAP, axis=0) if c.top is not None and means.size
               else np.zeros(batch, bool))
    controls_ok = not c.phenomenon or (c.controls is not None and c.controls["separate"])
    gated[key] = not controls_ok
    ranks[key] = (kw_q[i] < ALPHA) & ~ceiling & controls_ok
  p, p_eq, identical, sign = _pair_tests(cols, judged, data, batch)
  q = {pair: np.ones(batch) for pair in judged}
  q_eq = {pair: np.ones(batch) for pair in judged}
  for s in range(batch):
    family = [pair for pair in judged if ranks[pair[1]][s] and not identical[pair][s]]
    for pair, value in zip(family, card_stats.controlled([p[pair][s] for pair in family])):
      q[pair][s] = value
    family = [pair for pair in judged if cols[pair[1]].margin and not gated[pair[1]]
              and not identical[pair][s]]
    for pair, value in zip(family, card_stats.controlled([p_eq[pair][s] for pair in family])):
      q_eq[pair][s] = value
  words = {}
  for pair in judged:
    # a column its controls keep from ranking: no difference is judged there, whatever the seeds
    w = np.full(batch, "not ranked" if gated[pair[1]] else "not resolved", object)
    w[(q_eq[pair] < ALPHA) & (not gated[pair[1]])] = "equivalent"
    differ = ranks[pair[1]] & (q[pair] < ALPHA)
    w[differ & (sign[pair] > 0)] = "above"
    w[differ & (sign[pair] < 0)] = "below"
    w[identical[pair]] = "identical"
    words[pair] = w
  return {"ranks": ranks, "gated": gated, "kw": {k: (kw_p[i], kw_q[i]) for i, k in enumerate(keys)},
          "words": words, "p": p, "p_equivalent": p_eq, "q": q, "q_equivalent": q_eq,
          "identical": identical}


def _pair_tests(cols: dict, judged: list, data: dict, batch: int) -> tuple:
  """Each pair's two-sided p, equivalence p, whether it is identical and the sign of its shift,
  per resample; the pairs of one shape (seeds per arm, NaN or not) in one batched call of each
  test."""
  groups = {}
  for pair in judged:
    a, b = data[(pair[1], pair[0])], data[(pair[1], pair[2])]
    nan = bool(np.isnan(a).any() or np.isnan(b).any())
    groups.setdefault((a.shape[-1], b.shape[-1], nan), []).append(pair)
  p, p_eq, identical, sign = {}, {}, {}, {}
  for members in groups.values():
    a = np.stack([data[(key, arm)] for arm, key, _ in members])    # [pairs, batch, n]
    b = np.stack([data[(key, base)] for _, key, base in members])  # [pairs, batch, m]
    margin = np.asarray([cols[key].margin or 0.0 for _, key, _ in members])[:, None, None]
    both = np.concatenate([a, b], axis=-1)
    with np.errstate(invalid="ignore"):
      same = np.nanmax(both, axis=-1) == np.nanmin(both, axis=-1)
    two = card_stats.rank_p(a, b)
    equivalent = np.maximum(card_stats.rank_p(a + margin, b, "greater"),
                            card_stats.rank_p(a - margin, b, "less"))
    equivalent = np.where(margin[..., 0] > 0, equivalent, 1.0)
    shift = np.sign(card_stats.hodges_lehmann(a, b))
    for i, pair in enumerate(members):
      p[pair], p_eq[pair] = np.atleast_1d(two[i]), np.atleast_1d(equivalent[i])
      identical[pair], sign[pair] = same[i], shift[i]
  return p, p_eq, identical, sign


def _full_data(cols: dict) -> dict:
  return {(key, arm): v[None, :] for key, c in cols.items() for arm, v in c.values.items()}


# ----- the judgement -----

def judge(reports: list, splits: int = 0) -> dict:
  """Every pair of every column judged as one family (the procedure of the module's
  docstring).

  Args:
    reports: the cards (a card alone for its provisional words), their measures completed
      (``complete_measures``), ``control_checks`` and ``lm_quality`` set where measured.
    splits: random halvings for ``stability`` (0: none).

  Returns:
    ``{"columns": {key: {...}}, "comparisons": {(arm, key, base): {...}}, "family": {...},
    "stability": {...}}`` (the last where ``splits``).
  """
  cols = columns(reports)
  every = pairs(reports, cols)
  judged = [pair for pair in every if _readable(pair, cols)]
  found = _words(cols, judged, _full_data(cols), 1)
  comparisons = {}
  for pair in every:
    arm, key, base = pair
    if pair not in judged:
      missing = arm if arm not in cols[key].values else base
      comparisons[pair] = {"word": "not read",
                           "why": cols[key].unread.get(missing, "no values")}
      continue
    c = card_stats.compare(cols[key].values[arm], cols[key].values[base], cols[key].margin)
    tested = not c["identical"]
    c.update(q=float(found["q"][pair][0]) if tested and found["ranks"][key][0] else None,
             q_equivalent=(float(found["q_equivalent"][pair][0])
                           if tested and cols[key].margin and not found["gated"][key] else None),
             word=str(found["words"][pair][0]))
    comparisons[pair] = c
  table = {}
  for key, c in cols.items():
    p, q = found["kw"][key]
    means = [card_stats.mean(v) for v in c.values.values()]
    table[key] = {"label": c.label, "percent": c.percent, "margin": c.margin, "top": c.top,
                  "context_dependent": c.context_dependent, "phenomenon": c.phenomenon,
                  "on_board": c.on_board, "arms": list(c.values), "unread": dict(c.unread),
                  "kw_p": float(p[0]), "kw_q": float(q[0]), "ranks": bool(found["ranks"][key][0]),
                  "ceiling": bool(c.top is not None and means and
                                  min(means) >= c.top - CEILING_GAP),
                  "controls": c.controls, "why": _why(c, float(q[0]), means)}
  out = {"columns": table, "comparisons": comparisons,
         "family": {"cards": len(reports), "comparisons": len(every),
                    "difference": sum(1 for pair in judged if found["ranks"][pair[1]][0]
                                      and not found["identical"][pair][0]),
                    "equivalence": sum(1 for pair in judged if cols[pair[1]].margin
                                       and not found["gated"][pair[1]]
                                       and not found["identical"][pair][0]),
                    "columns": len(cols)}}
  if splits:
    out["stability"] = stability(cols, judged, found, splits)
  return out


def points(value: float) -> str:
  """``value`` percentage points in words: "1 point", "0.5 points"."""
  return f"{value:g} point" + ("" if value == 1 else "s")


def _why(c: Column, kw_q: float, means: list) -> str:
  if c.phenomenon and (c.controls is None or not c.controls["separate"]):
    return ("its controls were not measured" if c.controls is None
            else f"its controls do not separate ({c.controls['why']})")
  if len(c.values) < 2:
    return "fewer than two arms are read on it"
  if c.top is not None and means and min(means) >= c.top - CEILING_GAP:
    return f"at its ceiling (every arm within {points(100 * CEILING_GAP)} of its top)"
  if kw_q >= ALPHA:
    return f"Kruskal-Wallis across the arms does not reject (q = {kw_q:.2g})"
  return f"Kruskal-Wallis across the arms rejects (q = {kw_q:.2g})"


# ----- stability -----

def _halves(values: np.ndarray, rng: np.random.Generator, splits: int) -> tuple:
  """``splits`` random halvings of one arm's seeds: two ``[splits, n/2]`` arrays."""
  n = values.shape[-1]
  order = np.argsort(rng.random((splits, n)), axis=-1)
  return values[order[:, :n // 2]], values[order[:, n // 2:]]


def stability(cols: dict, judged: list, full: dict, splits: int = STABILITY_SPLITS) -> dict:
  """Every word judged again on random halves of each arm's seeds, the whole procedure within
  each half, ``splits`` times.

  Returns:
    ``{"splits", "words": the words that can disagree (not identical on every seed, not on a
    column its controls keep from ranking), "agreement": {"mean", "p5", "p95", "below_goal"}``
    (the two halves' agreement per split), ``"with_full": {...}`` (each half's agreement with the
    full word), ``"by_column": {key: mean agreement}``, ``"unstable": [pair, ...]`` (words
    whose halves agree in fewer than ``STABILITY_GOAL`` of the splits)}``.
  """
  rng = np.random.default_rng(SPLIT_SEED)
  first, second = {}, {}
  for key, c in cols.items():
    for arm, v in c.values.items():
      first[(key, arm)], second[(key, arm)] = _halves(v, rng, splits)
  a, b = _words(cols, judged, first, splits), _words(cols, judged, second, splits)
  real = [pair for pair in judged if not full["identical"][pair][0]
          and not full["gated"][pair[1]]]
  if not real:
    return {"splits": splits, "words": 0}
  same = np.stack([a["words"][pair] == b["words"][pair] for pair in real])  # [words, splits]
  word = {pair: full["words"][pair][0] for pair in real}
  with_full = np.stack([np.concatenate([a["words"][pair] == word[pair],
                                        b["words"][pair] == word[pair]]) for pair in real])
  share = same.mean(axis=0)
  by_column = {}
  for key in cols:
    rows = [i for i, pair in enumerate(real) if pair[1] == key]
    if rows:
      by_column[key] = float(same[rows].mean())
  per_word = same.mean(axis=1)
  return {"splits": splits, "words": len(real),
          "agreement": {"mean": float(share.mean()), "p5": float(np.percentile(share, 5)),
                        "p95": float(np.percentile(share, 95)),
                        "below_goal": float(np.mean(share < STABILITY_GOAL))},
          "with_full": {"mean": float(with_full.mean()),
                        "p5": float(np.percentile(with_full.mean(axis=0), 5)),
                        "p95": float(np.percentile(with_full.mean(axis=0), 95))},
          "by_column": by_column,
          "per_word": {PAIR_SEPARATOR.join((pair[0], pair[1], pair[2])): float(x)
                       for pair, x in zip(real, per_word)},
          "unstable": [list(pair) for pair, x in zip(real, per_word) if x < STABILITY_GOAL]}


# ----- a card's view of the family -----

def flipped(comparison: dict) -> dict:
  """A comparison seen from its other arm: the shift and interval negated, the word turned."""
  if "shift" not in comparison:
    return dict(comparison)
  out = dict(comparison, shift=-comparison["shift"], effect=-comparison["effect"],
             ci=[-comparison["ci"][1], -comparison["ci"][0]])
  out["word"] = {"above": "below", "below": "above"}.get(comparison["word"], comparison["word"])
  return out


def card_view(judged: dict, report: dict, scope: str) -> tuple[dict, dict]:
  """A card's comparisons and family, from a judgement (``judge``) of the board or of the card
  alone.

  Args:
    judged: ``judge``'s result.
    report: the card.
    scope: "board" or "card".

  Returns:
    ``(comparisons, family)``: ``{key: {baseline: comparison}}`` (the card against each baseline
    it is not, seen from the card) and ``{"scope", "size", ..., "columns"}``.
  """
  me = arm_id(report)
  out = {}
  for (arm, key, base), c in judged["comparisons"].items():
    if key not in report["measures"]:
      continue
    if arm == me:
      out.setdefault(key, {})[base] = dict(c)
    elif base == me:
      out.setdefault(key, {})[arm] = flipped(c)
  family = dict(judged["family"], scope=scope, columns=judged["columns"])
  if "stability" in judged:
    family["unstable"] = [pair for pair in judged["stability"]["unstable"] if me in pair]
  return out, family


def judge_card(report: dict) -> tuple[dict, dict]:
  """A card judged alone (its provisional words): ``card_view`` of ``judge([report])``."""
  return card_view(judge([report]), report, "card")
