"""The report cards side by side (``REPORT_CARDS.md``), generated from the cards' ``report.json``
files and nothing else, so that the table and the committed cards cannot disagree (a test
regenerates it).

The board judges every card as one family (``card_verdicts.judge``): which columns rank
(Kruskal-Wallis across the arms, BH over the columns, not at a ceiling, controls that
separate, LMs that beat a trigram model for the context-dependent ones), each pair's word (the
Hodges-Lehmann shift with the Mann-Whitney test and its interval; equivalence within a declared
margin; BH over the board), and the words' stability over random halvings of the seeds. The
same judgement gives each card its words (``card_words``), which ``normattn-leaderboard``
writes into every card, so that a card and the board never disagree.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np

from normattn_jax._extras import fingerprint_id
from normattn_jax.attention.registry import BUILTIN_NORMALIZATIONS
from normattn_jax.card import stats as card_stats
from normattn_jax.card import verdicts as card_verdicts
from normattn_jax.card.names import BASELINES, BOUND_BY_CONSTRUCTION, SPARSE_BY_CONSTRUCTION
from normattn_jax.card.text import collapse_outcome, selection_outcome, table

MARKS = {"above": "▲", "below": "▼", "equivalent": "≈", "identical": "=", "not resolved": "",
         "not read": "", "not ranked": ""}
LETTERS = {"softmax": "S", "nap": "N"}
SHOWN = {"softmax": "softmax", "nap": "NAP"}
FIRST_PROTOCOL = 2  # the earliest protocol the board judges (per-seed measures of each arm)


# What the board reads of a card: each top-level field and its type.
REPORT_FIELDS = {"name": str, "normalization": str, "scale": str, "machine": dict,
                 "measures": dict, "cost": list, "mode_collapse": dict, "attention": dict,
                 "seconds": dict}
COST_FIELDS = ("mode", "n", "path", "seconds")


def read_reports(folder: str) -> list[dict]:
  """Every ``<folder>/<name>/report.json``, by name.

  Args:
    folder: e.g. ``results/report_cards``.

  Returns:
    The reports, sorted by normalisation.

  Raises:
    FileNotFoundError: the folder does not exist, or holds no card.
    ValueError: a report.json that is not JSON or lacks what the board reads, naming the file
      and what is wrong; or an unfinished card (``unfinished_cards``), naming it: the board
      judges every card against the others, so it is not made without one of them.
  """
  return [read_report(path) for path in report_paths(folder)]


def report_paths(folder: str) -> list[str]:
  """Every ``<folder>/<name>/report.json``, sorted (``read_reports``' errors)."""
  if not os.path.isdir(folder):
    raise FileNotFoundError(f"cards folder {folder} does not exist")
  unfinished = unfinished_cards(folder)
  if unfinished:
    raise ValueError(f"cards folder {folder}: {', '.join(unfinished)} unfinished (a card's "
                     f"config.json, no report.json yet): finish each with the command that "
                     f"started it (it resumes), or move it out of the folder")
  paths = sorted(glob.glob(os.path.join(folder, "*", "report.json")))
  if not paths:
    raise FileNotFoundError(f"cards folder {folder} holds no <name>/report.json")
  return paths


def unfinished_cards(folder: str) -> list:
  """The folders of ``folder`` that hold a card's ``config.json`` (written as a card starts)
  but no ``report.json`` (written as it ends); the shared baselines' folder holds neither.

  Returns:
    Their names, sorted.
  """
  started = glob.glob(os.path.join(folder, "*", "config.json"))
  return sorted(os.path.basename(os.path.dirname(path)) for path in started
                if not os.path.exists(os.path.join(os.path.dirname(path), "report.json")))


def read_report(path: str) -> dict:
  """One card's report.json, checked for what the board reads (``REPORT_FIELDS``)."""
  try:
    with open(path) as f:
      report = json.load(f)
  except json.JSONDecodeError as err:
    raise ValueError(f"{path}: not valid JSON ({err})") from None
  if not isinstance(report, dict) or not isinstance(report.get("name"), str):
    raise ValueError(f"{path}: not a report card (no \"name\")")
  if not isinstance(report.get("protocol"), int) or report["protocol"] < FIRST_PROTOCOL:
    return report  # listed as not yet rerun, by name only
  problems = [f"{key} is missing" if key not in report else
              f"{key} is a {type(report[key]).__name__}, not a {kind.__name__}"
              for key, kind in REPORT_FIELDS.items() if not isinstance(report.get(key), kind)]
  problems += [f"measures.{key} has no per-arm values" for key, m in
               (report["measures"].items() if isinstance(report.get("measures"), dict) else ())
               if not isinstance(m, dict) or not isinstance(m.get("values"), dict)]
  problems += [f"cost[{i}] lacks {', '.join(f for f in COST_FIELDS if f not in row)}"
               for i, row in enumerate(report.get("cost") or ())
               if not isinstance(row, dict) or any(f not in row for f in COST_FIELDS)]
  if problems:
    raise ValueError(f"{path}: {'; '.join(problems)}")
  return report


def judged_protocol(reports: list) -> int:
  """The protocol the board judges: the newest among the cards (one set of baselines)."""
  found = [r["protocol"] for r in reports if isinstance(r.get("protocol"), int)
           and r["protocol"] >= FIRST_PROTOCOL]
  return max(found) if found else 0


def _check_one_machine(reports: list) -> None:
  machines = {fingerprint_id(r["machine"]) for r in reports}
  scales = {r["scale"] for r in reports}
  if len(scales) > 1:
    raise ValueError(f"the cards are of several scales {sorted(scales)}; one table per scale")
  if len(machines) > 1:
    raise ValueError(f"the cards ran on several machines {sorted(machines)}; a board compares "
                     f"cards against one set of baselines, of one machine")


def judge(reports: list, splits: int = card_verdicts.STABILITY_SPLITS) -> dict:
  """The board's judgement of the cards of the judged protocol (``card_verdicts.judge``, with
  ``splits`` random halvings for the stability), each card prepared
  (``card_verdicts.prepare``).

  Raises:
    ValueError: if the cards are of several scales or machines.
  """
  _check_one_machine(reports)
  return card_verdicts.judge([card_verdicts.prepare(r) for r in reports], splits)


def card_words(judged: dict, report: dict) -> dict:
  """A card with the board's words: its report prepared, its ``comparisons`` and ``family``
  the board's view of it (``card_verdicts.card_view``)."""
  out = card_verdicts.prepare(report)
  out["comparisons"], out["family"] = card_verdicts.card_view(judged, out, "board")
  return out


# ----- the cells -----

def _fmt(x: float, percent: bool) -> str:
  if x is None or not np.isfinite(x):
    return "-"
  return f"{100 * x:.1f}" if percent else f"{x:.3g}"


def _values(report: dict, key: str, arm: str = "card"):
  return report["measures"][key]["values"][arm]


def _unstable(judged: dict) -> set:
  return {tuple(pair) for pair in judged.get("stability", {}).get("unstable", [])}


def _mark(judged: dict, pair: tuple, base: str) -> str:
  c = judged["comparisons"].get(pair)
  if c is None:
    return ""
  mark = MARKS.get(c["word"], "")
  unstable = "?" if pair in _unstable(judged) else ""
  if not mark and not unstable:
    return ""
  return f" {mark}{unstable}{LETTERS[base]}"


def _cell(judged: dict, arm: str, key: str, values) -> str:
  """An arm's mean of a column and its marks against the baselines it is not."""
  column = judged["columns"][key]
  if values is None:
    return "n/a"
  text = _fmt(card_stats.mean(values), column["percent"])
  if arm in column["unread"]:
    return f"{text} (not read)"
  if (key == "sparsity.zero_share" and arm in BUILTIN_NORMALIZATIONS
          and arm not in SPARSE_BY_CONSTRUCTION and card_stats.mean(values) > 0):
    text += " (float32 underflow, not sparsity)"
  for base in BASELINES:
    text += _mark(judged, (arm, key, base), base)
  return text


def _time(report: dict) -> str:
  rows = [r for r in report["cost"] if r["mode"] == "fwd+bwd"]
  longest = max(r["n"] for r in rows)
  ratio = {r["path"]: r["seconds"] / r["softmax_quadratic_seconds"] for r in rows
           if r["n"] == longest and r["seconds"] and r.get("softmax_quadratic_seconds")}
  shown = " / ".join(f"{ratio[p]:.2f}" if p in ratio else "-" for p in ("quadratic", "fast"))
  return f"{shown} (N = {longest})"


def _collapse(report: dict) -> str:
  pairs = report["mode_collapse"]
  return " / ".join(collapse_outcome(pairs[p]["card"], short=True)
                    for p in ("unbalanced", "balanced"))


def _bound(report: dict) -> str:
  """Seeds in which every key keeps 1/N, and for HNAS its own bound u/N."""
  att = report["attention"]["card"]
  one = f"{sum(x == 0 for x in att['below_bound'])}/{len(att['below_bound'])}"
  if BOUND_BY_CONSTRUCTION.get(report["name"]) != "u/N":
    return one
  own = att.get("below_own_bound")
  if own is None or any(x is None for x in own):
    return f"{one}; u/N not checked"
  return f"{one}; u/N: {sum(x == 0 for x in own)}/{len(own)}"


def card_minutes(report: dict) -> float:
  """A card's own minutes: its trainings (each as long as the calls that trained it took, kept
  over resumes) and its analyses."""
  s = report["seconds"]
  return (sum(v for k, v in s["sweeps"].items() if k.startswith("card/") and v is not None)
          + s["analyses"]) / 60


def _minutes(reports: list) -> str:
  """A sentence on the minutes of the cards that found every baseline finished."""
  found = [card_minutes(r) for r in reports
           if card_verdicts.twin(r) is None
           and all(v is None for k, v in r["seconds"]["sweeps"].items()
                   if k.startswith("baselines/"))]
  if not found:
    return "No card has run on it with its baselines found finished yet."
  return (f"A card, its baselines found finished, takes {np.median(found):.0f} minutes on it "
          f"(median; {min(found):.0f} to {max(found):.0f} over {len(found)} card(s)).")


# ----- the document -----

def read_lm_boards(folder: str) -> list[dict]:
  """Every ``<folder>/lm_<scale>/lm_board.json`` (``experiments/card_lms.py``'s), by scale."""
  boards = []
  for path in sorted(glob.glob(os.path.join(folder, "lm_*", "lm_board.json"))):
    with open(path) as f:
      boards.append(json.load(f))
  return boards


def lm_board_section(board: dict) -> list:
  """The LM part alone at a larger scale (``report_card.run_lm_board``), judged as its own
  family: each normalisation's LM diagnostics against softmax and NAP, where its LM beats a
  trigram model and the controls separate."""
  from normattn_jax.card import train as report_card  # its LMs' diagnostics, measured again
  reports = report_card.lm_board_reports(board)
  judged = card_verdicts.judge(reports)
  columns = judged["columns"]
  keys = [k for k, c in columns.items() if c["on_board"]]
  rows, _ = _rows(reports)
  sizes = board["plan"]["sizes"]
  lines = ["", f"## The LM diagnostics at the `{board['scale']}` scale", "",
           f"The cards' LM part alone (`experiments/card_lms.py --scale={board['scale']}`): "
           f"d = {sizes['d_model']}, {sizes['num_layers']} layers, L = {sizes['train_len']}, "
           f"{sizes['num_steps']} steps, {board['plan']['evaluation_seeds']} evaluation seeds "
           f"per arm; machine {fingerprint_id(board['machine'])} "
           f"({board['machine'].get('device_kind', '?')}). Judged as its own family "
           f"({judged['family']['comparisons']} pairs); marks as above.", ""]
  body = [[name] + [_cell(judged, arm, k, _arm_values(reports, arm, k)) for k in keys]
          for arm, _, name in rows]
  lines += table(["normalisation"] + [columns[k]["label"] for k in keys], body)
  lines += ["", "Why each column ranks or not: "
            + "; ".join(f"{columns[k]['label']}: {columns[k]['why']}" for k in keys) + "."]
  return lines


def markdown(reports: list[dict], judged: dict | None = None, lm_boards: tuple = ()) -> str:
  """``REPORT_CARDS.md``: what the board supports at this scale, the ranked table, the columns
  that do not rank with their equivalence words, which columns rank and why, every comparison,
  the stability of the words, the LMs' level and controls, the selections.

  Args:
    reports: the cards (``read_reports``); those of an earlier protocol are listed, not judged.
    judged: the board's judgement of the cards of the judged protocol (``judge``), if already
      made.
    lm_boards: the LM part at larger scales (``read_lm_boards``), each a section.

  Returns:
    The document.

  Raises:
    ValueError: if the cards are of several scales or machines.
  """
  lines = ["# Report cards", "",
           "Every registered normalisation put through the four papers' diagnostics and today's "
           "papers' own claims by `normattn-card`; this page is generated from "
           "`results/report_cards/*/report.json` by `normattn-leaderboard` (a test checks "
           "that it matches them), which also writes every card's words again from this board's "
           "family, so that a card and the board never disagree. Each card's `report.md` has "
           "the seeds, the selection, every comparison and a verdict line per diagnostic.", ""]
  protocol = judged_protocol(reports)
  older = [r for r in reports if r.get("protocol") != protocol]
  reports = [r for r in reports if r.get("protocol") == protocol]
  if not reports:
    lines.append("No card of a judged protocol has been committed yet.")
  else:
    lines += _board(reports, judged or judge(reports), protocol)
  for board in lm_boards:
    lines += lm_board_section(board)
  if older:
    lines += ["", "## Not yet rerun", "",
              f"These cards are of an earlier protocol than the board's ({protocol}): they are "
              f"kept until their rerun lands and are not judged here: "
              + ", ".join(f"`{r['normalization']}`" for r in older) + "."]
  return "\n".join(lines) + "\n"


def _rows(reports: list) -> tuple[list, dict]:
  """The board's rows: ``(arm id, its report or None, its label)`` for each card that is not a
  baseline, then the two baselines (with their card's report where one was run)."""
  twins = {card_verdicts.twin(r): r for r in reports if card_verdicts.twin(r)}
  rows = [(r["normalization"], r, f"`{r['normalization']}`") for r in reports
          if card_verdicts.twin(r) is None]
  rows += [(base, twins.get(base), f"*{base} (baseline)*") for base in BASELINES]
  return rows, twins


def _arm_values(reports: list, arm: str, key: str):
  """An arm's per-seed values on a column: a card's own, a baseline's from any card."""
  for r in reports:
    if key not in r["measures"]:
      continue
    if arm in BASELINES:
      return _values(r, key, arm)
    if r["normalization"] == arm and card_verdicts.twin(r) is None:
      return _values(r, key)
  return None


def _conclusions(reports: list, judged: dict, scale: str) -> list:
  """What a reader may conclude at this scale, and what needs the gpu scale: the first screen."""
  columns = judged["columns"]
  board = [k for k, c in columns.items() if c["on_board"]]
  ranked = [columns[k]["label"] for k in board if columns[k]["ranks"]]
  ceiling = [columns[k]["label"] for k in board if columns[k]["ceiling"]]
  flat = [columns[k]["label"] for k in board if not columns[k]["ranks"]
          and not columns[k]["ceiling"] and columns[k]["kw_q"] >= card_stats.ALPHA
          and len(columns[k]["arms"]) >= 2]
  context = [columns[k]["label"] for k in board if columns[k]["context_dependent"]]
  uncontrolled = [columns[k]["label"] for k in board if columns[k]["phenomenon"]
                  and not (columns[k]["controls"] or {}).get("separate")]
  quality = next((r["lm_quality"] for r in map(card_verdicts.prepare, reports)
                  if r.get("lm_quality")), None)
  beat = ([arm for arm, e in quality["arms"].items() if e["beats"]] if quality else [])
  lines = ["## What this board supports", "",
           f"At the `{scale}` scale a reader may conclude:", ""]
  lines.append(f"- **Ranked** (the arms differ, Kruskal-Wallis across them; the marks below say "
               f"which pairs): {', '.join(ranked) or 'none'}.")
  if ceiling:
    lines.append(f"- **At their ceiling** (every arm within "
                 f"{card_verdicts.points(100 * card_verdicts.CEILING_GAP)} of 100%: the task does "
                 f"not tell the normalisations apart here; pairs "
                 f"equivalent within the margin where the data show it): {', '.join(ceiling)}.")
  if flat:
    lines.append(f"- **No difference found** across the arms with these seeds (pairs equivalent "
                 f"within their margin, or not resolved): {', '.join(flat)}.")
  if quality is None and context:
    lines.append(f"- **Not read**: {', '.join(context)}: the cards' LMs were not compared with a "
                 f"trigram model (cards of an earlier protocol), so nothing is read of how "
                 f"they use their context.")
  elif quality is not None and len(beat) < len(quality["arms"]):
    lines.append(f"- **Not read where the LM does not beat a trigram model** "
                 f"({quality['trigram']:.3g} nats at L): {', '.join(context)}.")
  if uncontrolled:
    lines.append(f"- **Not ranked for want of separating controls** (the probe cannot tell a "
                 f"model with the phenomenon from one without at this probe size, or the "
                 f"controls were not measured): {', '.join(uncontrolled)}.")
  lines += ["", "What needs the `gpu` scale (`benchmarks/gpu_checks.sh`, step `f_card_lm`, "
            "`experiments/card_lms.py --scale=gpu`): every claim about how an LM uses its "
            "context (attention sinks, massive activations, the growth of the loss past the "
            "training length), which is read only from LMs that beat a trigram model and whose "
            "controls separate; at this scale they are not read.", ""]
  return lines


def _board(reports: list, judged: dict, protocol: int) -> list:
  first = reports[0]
  columns = judged["columns"]
  board = [k for k, c in columns.items() if c["on_board"]]
  ranked = [k for k in board if columns[k]["ranks"]]
  rest = [k for k in board if not columns[k]["ranks"]]
  s, machine = first["sizes"], first["machine"]
  shown = machine.get("cpu_model") or machine["device_kind"]
  if "cpu_cores" in machine:
    shown += f" ({' '.join(machine['cpu_features'])}), {machine['cpu_cores']} core(s)"
  family = judged["family"]
  lines = _conclusions(reports, judged, first["scale"])
  lines += [f"Scale: `{first['scale']}` (N = {s['seq_len']}, d = {s['d_model']}; the learning "
            f"rate of every arm selected on {s['selection_seeds']} seeds, every number of "
            f"{s['evaluation_seeds']} fresh evaluation seeds). Machine: {shown}, fingerprint "
            f"{fingerprint_id(machine)}: every card is compared with the same softmax (MTE) and "
            f"NAP baselines, trained on it; cards of protocol {protocol}. {_minutes(reports)}",
            "",
            f"One family: {family['cards']} cards, {family['comparisons']} pairs (each card that "
            f"is not a baseline against softmax and NAP, and softmax against NAP once: no "
            f"self-comparison, no mirror), {family['difference']} tested for a difference on "
            f"the ranked columns and {family['equivalence']} for equivalence, "
            f"{card_stats.FDR_METHOD} over each. Each pair: the {card_stats.ESTIMAND} with the "
            f"{card_stats.TEST} test and its inverted {card_stats.CONFIDENCE:.0%} interval.", "",
            "Marks: ▲S / ▼S: above / below softmax, ▲N / ▼N: above / below NAP (q < "
            f"{card_stats.ALPHA}); ≈S / ≈N: equivalent within the column's margin (two "
            "one-sided tests, q < 0.05); =: identical on every seed; no mark: not resolved with "
            "the seeds at hand (the intervals below say how large a shift could hide), or not "
            "ranked where the column's controls do not separate; ?: an "
            "unstable word (the two halves of the seeds agree on it in fewer than "
            f"{100 * card_verdicts.STABILITY_GOAL:.0f}% of the random halvings).", ""]
  rows, twins = _rows(reports)
  label = lambda key: columns[key]["label"]
  body = []
  for arm, report, name in rows:
    cells = [_cell(judged, arm, k, _arm_values(reports, arm, k)) for k in ranked]
    body.append([name] + cells + ([_collapse(report), _time(report)] if report else ["", ""]))
  lines += table(["normalisation"] + [label(k) for k in ranked]
                 + ["mode collapse: unbalanced / balanced",
                    "time vs softmax quadratic: quadratic / fast"], body)
  lines += ["", "## Columns that do not rank", "",
            "Their means, with ≈ where a pair is equivalent within the column's margin and = "
            "where identical (the rest not resolved), and what a normalisation guarantees by "
            "construction (Theorem 2's bound: DNAS and Sinkhorn meet 1/N by construction, HNAS "
            "u/N with u its learned DNAS share per head; seeds in which every key keeps a total "
            "weight >= 1/N, and for HNAS >= u/N).", ""]
  body = [[name] + [_cell(judged, arm, k, _arm_values(reports, arm, k)) for k in rest]
          + [_bound(report) if report else ""] for arm, report, name in rows]
  lines += table(["normalisation"] + [label(k) for k in rest] + ["Thm 2 bound"], body)
  lines += ["", "## Which columns rank", "",
            "A column ranks where Kruskal-Wallis across the arms read on it rejects "
            f"({card_stats.FDR_METHOD} over the columns), it is not at its ceiling, its "
            "quantity's controls separate (where it has a phenomenon to find) and, for a "
            "quantity that reads how an LM uses its context, among the arms whose LM beats a "
            "trigram model. Margin: the declared equivalence margin.", ""]
  lines += table(["column", "arms read", "margin", "Kruskal-Wallis p", "q", "ranks", "why"],
                 [[label(k), str(len(c["arms"])), _margin(c), f"{c['kw_p']:.2g}",
                   f"{c['kw_q']:.2g}", "yes" if c["ranks"] else "no", c["why"]]
                  for k, c in columns.items() if c["on_board"]])
  lines += _stability_section(judged, s)
  lines += _lm_sections(reports, judged)
  lines += _selection_section(reports)
  lines += ["", "## Every comparison", "",
            f"Per column: the arm's mean, and against each baseline the {card_stats.ESTIMAND} "
            f"with its {card_stats.CONFIDENCE:.0%} interval, q (p where the column does not "
            f"rank: no difference is tested there) and the word; percentages in points."]
  for key in board:
    unit = 100.0 if columns[key]["percent"] else 1.0

    def entry(arm, base):
      c = judged["comparisons"].get((arm, key, base))
      if c is None:
        return "-"
      if "shift" not in c:
        return c["word"]
      unstable = " (unstable)" if (arm, key, base) in _unstable(judged) else ""
      q = f"q = {c['q']:.2g}" if c.get("q") is not None else f"p = {c['p']:.2g}"
      return (f"{unit * c['shift']:+.3g} [{unit * c['ci'][0]:+.3g}, {unit * c['ci'][1]:+.3g}], "
              f"{q}: {c['word']}{unstable}")
    lines += ["", f"### {label(key)}", ""]
    lines += table(["normalisation", "mean", "vs softmax", "vs NAP"],
                   [[name, _fmt(card_stats.mean(v), columns[key]["percent"])
                     if (v := _arm_values(reports, arm, key)) is not None else "n/a",
                     entry(arm, "softmax"), entry(arm, "nap")] for arm, _, name in rows])
  lines += ["", "## How sure", "",
            "Each accuracy is the best over training of one seed, at the arm's selected learning "
            "rate. \"Learns a case\" is a threshold on that case's accuracy, stated in each card. "
            "The attention diagnostics are measured on the trained case-task models of every "
            "evaluation seed, the LM diagnostics on one LM per evaluation seed; the mode-collapse "
            "toy is deterministic; the times are medians of a few repeats on a shared machine, "
            "ratios to softmax's quadratic path measured in the same run. At this scale the "
            "table ranks the normalisations on small models; it does not say how they compare "
            "at the papers' sizes."]
  return lines


def _margin(column: dict) -> str:
  if not column["margin"]:
    return "-"
  return (f"±{100 * column['margin']:.3g} points" if column["percent"]
          else f"±{column['margin']:.3g}")


def _stability_section(judged: dict, sizes: dict) -> list:
  st = judged.get("stability")
  if not st or not st.get("words"):
    return ["", "## Stability of the words", "", "No word that can disagree is judged yet."]
  a, w = st["agreement"], st["with_full"]
  met = "met" if a["mean"] >= card_verdicts.STABILITY_GOAL else "not met"
  columns = judged["columns"]
  lines = ["", "## Stability of the words", "",
           f"Every word judged again on random halves of each arm's seeds (the whole procedure "
           f"within each half: Kruskal-Wallis, both families), {st['splits']} random halvings "
           f"of the {sizes['evaluation_seeds']} evaluation seeds, on the {st['words']} words "
           f"that can disagree (no self-comparison, no mirror, no pair identical on every "
           f"seed or on a column its controls keep from ranking): **the two halves agree on "
           f"{100 * a['mean']:.0f}% of them on average "
           f"(5-95%: {100 * a['p5']:.0f}-{100 * a['p95']:.0f}%; below "
           f"{100 * card_verdicts.STABILITY_GOAL:.0f}% in {100 * a['below_goal']:.0f}% of the "
           f"halvings; the goal of a mean of {100 * card_verdicts.STABILITY_GOAL:.0f}% "
           f"{met})**; each half gives the 20-seed word for {100 * w['mean']:.0f}% of them "
           f"(5-95%: {100 * w['p5']:.0f}-{100 * w['p95']:.0f}%). {len(st['unstable'])} words are "
           f"unstable (marked ?).", ""]
  lines += table(["column", "the halves agree"],
                 [[columns[k]["label"], f"{100 * x:.0f}%"] for k, x in st["by_column"].items()])
  return lines


def _lm_sections(reports: list, judged: dict) -> list:
  prepared = [card_verdicts.prepare(r) for r in reports]
  quality = next((r["lm_quality"] for r in prepared if r.get("lm_quality")), None)
  checks = next((r["control_checks"] for r in prepared if r.get("control_checks")), None)
  lines = ["", "## The LMs' level and the diagnostics' controls", ""]
  if quality is None:
    lines.append("The cards' LMs were not compared with an n-gram model and their diagnostics "
                 "carry no controls (cards of an earlier protocol): the context-dependent and "
                 "controlled columns are not read.")
    return lines
  arms = {}
  for r in prepared:
    for label, entry in (r.get("lm_quality") or {"arms": {}})["arms"].items():
      arm = label if label in BASELINES else card_verdicts.arm_id(r)
      arms.setdefault(arm, entry)
  lines += [f"On the LMs' held-out windows at L, an interpolated Witten-Bell trigram model gives "
            f"{quality['trigram']:.3g} nats, its bigram {quality['bigram']:.3g}; an arm whose "
            f"LM does not beat the trigram (one-sided Wilcoxon over its seeds) is not read on "
            f"the context-dependent columns.", ""]
  lines += table(["arm", "loss at L (nats)", "beats the trigram"],
                 [[arm, f"{e['loss']:.3g}", "yes" if e["beats"] else "no"]
                  for arm, e in arms.items()])
  if checks:
    rows = []
    for key, c in checks.items():
      entries = [c["positive"]] + c["negatives"]
      means = ", ".join(f"{e['label']}: " + ("not measured" if e.get("error") else
                                             _fmt(card_stats.mean(e["values"]),
                                                  judged["columns"].get(key, {}).get(
                                                      "percent", False)))
                        for e in entries)
      rows.append([judged["columns"].get(key, {}).get("label", key), means,
                   "yes" if c["separate"] else "no"])
    lines += ["", "Controls (the first the positive one):", ""]
    lines += table(["quantity", "controls: mean", "separate"], rows)
  return lines


def _selection_section(reports: list) -> list:
  rows, edges, total = [], 0, 0
  entries = [(f"{label} (baseline)", task, scores["arms"][label])
             for label in BASELINES for task, scores in reports[0]["tasks"].items()]
  entries += [(r["normalization"], task, scores["arms"]["card"]) for r in reports
              if not card_verdicts.twin(r) for task, scores in r["tasks"].items()]
  for who, task, arm in entries:
    outcome = selection_outcome(arm["selection"], arm["learning_rate"])
    total += 1
    edges += "edge" in outcome or "capped" in outcome
    rows.append([who, task, f"{arm['learning_rate']:.3g}", outcome])
  return (["", "## Learning-rate selections", "",
           f"Each arm's selected rate per task and how its selection ended: {edges} of {total} "
           f"on an edge of their grid (not extended, or at the cap).", ""]
          + table(["arm", "task", "selected", "grid"], rows))
