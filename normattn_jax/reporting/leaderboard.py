"""The report cards side by side (``REPORT_CARDS.md``), generated from the cards' ``report.json``
files and nothing else, so that the table and the committed cards cannot disagree (a test
regenerates it).

The board re-judges every card from its per-seed values, as a referee would:

- a column ranks the normalisations only where the spread of the cards' means exceeds the
  baselines' own run-to-run spread (the larger, over softmax and NAP, of the difference between
  the means of the two halves of their evaluation seeds: two runs of one arm); the rest are shown
  apart, as checks;
- each card is compared with softmax and NAP on every ranked column (``card_stats.compare``), with
  Benjamini-Hochberg's control over the whole board's comparisons, a direction stated where the
  controlled p is below 0.05 and the interval excludes 0;
- the board's stability: every verdict word judged again on each half of the evaluation seeds
  (Benjamini-Hochberg over the board in each half), and the share of words that the two halves
  agree on.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np

from normattn_jax._extras import fingerprint_id
from normattn_jax.card import stats as card_stats
from normattn_jax.card.train import BASELINES, PROTOCOL
from normattn_jax.card.text import collapse_outcome

STABILITY_GOAL = 0.9  # the share of verdict words two halves of the seeds should agree on
MARKS = {"above": "▲", "below": "▼", "not distinguishable": ""}
LETTERS = {"softmax": "S", "nap": "N"}


# What the board reads of a card of the current protocol: each top-level field and its type.
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
  return [read_report(path) for path in paths]


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
  if report.get("protocol") != PROTOCOL:
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


def halves(values: list) -> tuple:
  """The first and the second half of a list of per-seed values."""
  return values[:len(values) // 2], values[len(values) // 2:]


def board_columns(report: dict) -> list:
  """The measures a card puts on the board, in its order: every task and attention measure,
  and the diagnostics' quantities marked ``on_board``."""
  keys = []
  for key in report["measures"]:
    name, _, quantity = key.partition(".")
    entry = report.get("diagnostics", {}).get(name)
    if entry is None or any(q["key"] == quantity and q["on_board"]
                            for q in entry.get("quantities", ())):
      keys.append(key)
  return keys


def _check_one_machine(reports: list) -> None:
  machines = {fingerprint_id(r["machine"]) for r in reports}
  scales = {r["scale"] for r in reports}
  if len(scales) > 1:
    raise ValueError(f"the cards are of several scales {sorted(scales)}; one table per scale")
  if len(machines) > 1:
    raise ValueError(f"the cards ran on several machines {sorted(machines)}; a board compares "
                     f"cards against one set of baselines, of one machine")


def _holder(reports: list, keys: list) -> dict:
  """Per column, the first card that has it (the baselines' values are every card's)."""
  return {key: next(r for r in reports if key in r["measures"]) for key in keys}


def columns(reports: list) -> list:
  """The board's columns: every card's ``board_columns``, in the first card's order (a card
  may lack one, e.g. the LM's for a normalisation with no causal LM)."""
  keys = []
  for r in reports:
    keys += [k for k in board_columns(r) if k not in keys]
  return keys


def separation(reports: list, keys: list) -> dict:
  """Per column: the spread of the cards' means, the baselines' run-to-run spread, and whether
  the column ranks (the first exceeds the second).

  Returns:
    ``{key: {"spread": max - min of the cards' means, "noise": the largest difference of two
    halves' means of a baseline, "ranks": bool}}``.
  """
  first = _holder(reports, keys)
  out = {}
  for key in keys:
    means = [card_stats.mean(r["measures"][key]["values"]["card"]) for r in reports
             if key in r["measures"]]
    spread = float(np.nanmax(means) - np.nanmin(means))
    noise = max(abs(card_stats.mean(a) - card_stats.mean(b))
                for a, b in (halves(first[key]["measures"][key]["values"][base])
                             for base in BASELINES))
    out[key] = {"spread": spread, "noise": float(noise), "ranks": bool(spread > noise)}
  return out


def judge(reports: list, keys: list, part=None) -> dict:
  """Every card against every baseline on ``keys`` (``card_stats.compare``), q by
  Benjamini-Hochberg over all of them, and each verdict word (``card_stats.word``).

  Args:
    reports: the cards.
    keys: the ranked columns.
    part: None for every evaluation seed; 0 or 1 for one half of them.

  Returns:
    ``{(card, key, baseline): comparison with "q" and "word"}``.
  """
  out = {}
  for r in reports:
    for key in (k for k in keys if k in r["measures"]):
      values = r["measures"][key]["values"]
      for base in BASELINES:
        card, other = values["card"], values[base]
        if part is not None:
          card, other = halves(card)[part], halves(other)[part]
        try:
          out[(r["normalization"], key, base)] = card_stats.compare(card, other)
        except ValueError:  # too few seeds with a value: no verdict
          continue
  for c, q in zip(out.values(), card_stats.controlled([c["p"] for c in out.values()])):
    c["q"] = q
    c["word"] = card_stats.word(c)
  return out


def stability(reports: list, keys: list) -> dict:
  """The board's verdict words judged on each half of the evaluation seeds.

  Returns:
    ``{"agree": count, "total": count, "share": agree / total, "by_column": {key: [agree,
    total]}}``.
  """
  first, second = judge(reports, keys, 0), judge(reports, keys, 1)
  both = sorted(set(first) & set(second))
  by_column = {key: [0, 0] for key in keys}
  for entry in both:
    by_column[entry[1]][0] += first[entry]["word"] == second[entry]["word"]
    by_column[entry[1]][1] += 1
  agree = sum(a for a, _ in by_column.values())
  return {"agree": agree, "total": len(both), "share": agree / len(both) if both else 0.0,
          "by_column": by_column}


def _fmt(x: float, percent: bool) -> str:
  if not np.isfinite(x):
    return "-"
  return f"{100 * x:.1f}" if percent else f"{x:.3g}"


def _mean_of(report: dict, key: str) -> str:
  """The card's mean of a column, "n/a" where the card has none."""
  if key not in report["measures"]:
    return "n/a"
  m = report["measures"][key]
  return _fmt(card_stats.mean(m["values"]["card"]), m["percent"])


def _cell(report: dict, key: str, judged: dict) -> str:
  """The card's mean of a ranked column and its marks against the baselines."""
  marks = ""
  for base in BASELINES:
    c = judged.get((report["normalization"], key, base))
    if c is not None and MARKS[c["word"]]:
      marks += f" {MARKS[c['word']]}{LETTERS[base]}"
  return _mean_of(report, key) + marks


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
  bound = report["attention"]["card"]["below_bound"]
  return f"{sum(x == 0 for x in bound)}/{len(bound)}"


def card_minutes(report: dict) -> float:
  """A card's own minutes: its trainings (each as long as the call that finished it took,
  kept over resumes) and its analyses."""
  s = report["seconds"]
  return (sum(v for k, v in s["sweeps"].items() if k.startswith("card/") and v is not None)
          + s["analyses"]) / 60


def _minutes(reports: list) -> str:
  """A sentence on the minutes of the cards that found every baseline finished."""
  found = [card_minutes(r) for r in reports
           if all(v is None for k, v in r["seconds"]["sweeps"].items()
                  if k.startswith("baselines/"))]
  if not found:
    return "No card has run on it with its baselines found finished yet."
  return (f"A card, its baselines found finished, takes {np.median(found):.0f} minutes on it "
          f"(median; {min(found):.0f} to {max(found):.0f} over {len(found)} card(s)).")


def _table(columns: list, rows: list) -> list:
  return (["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
          + ["| " + " | ".join(row) + " |" for row in rows])


def markdown(reports: list[dict]) -> str:
  """``REPORT_CARDS.md``: the ranked table, the checks, the confidence intervals, the columns'
  separation and the board's stability.

  Args:
    reports: the cards (``read_reports``); those of an earlier protocol are listed, not judged.

  Returns:
    The document.

  Raises:
    ValueError: if the cards are of several scales or machines.
  """
  lines = ["# Report cards", "",
           "Every registered normalisation put through the four papers' diagnostics and today's "
           "papers' own claims by `normattn-card`; this page is generated from "
           "`results/report_cards/*/report.json` by `normattn-leaderboard` (a test checks "
           "that it matches them). Each card's `report.md` has the seeds, the selection, every "
           "comparison and a verdict line per diagnostic.", ""]
  older = [r for r in reports if r.get("protocol") != PROTOCOL]
  reports = [r for r in reports if r.get("protocol") == PROTOCOL]
  if not reports:
    lines.append("No card of the current protocol has been committed yet.")
  else:
    lines += _board(reports)
  if older:
    lines += ["", "## Not yet rerun", "",
              "These cards are of the earlier protocol (5 seeds, the learning rate chosen and "
              "judged on the same seeds, baselines shared with no check of the machine that "
              "trained them); they are kept until their rerun lands and are not judged here: "
              + ", ".join(f"`{r['normalization']}`" for r in older) + "."]
  return "\n".join(lines) + "\n"


def _board(reports: list) -> list:
  _check_one_machine(reports)
  first = reports[0]
  keys = columns(reports)
  holder = _holder(reports, keys)
  separated = separation(reports, keys)
  ranked = [k for k in keys if separated[k]["ranks"]]
  checks = [k for k in keys if not separated[k]["ranks"]]
  judged = judge(reports, ranked)
  label = lambda key: holder[key]["measures"][key]["label"]
  percent = lambda key: holder[key]["measures"][key]["percent"]
  s, machine = first["sizes"], first["machine"]
  shown = machine.get("cpu_model") or machine["device_kind"]
  if "cpu_cores" in machine:
    shown += f" ({' '.join(machine['cpu_features'])}), {machine['cpu_cores']} core(s)"
  lines = [f"Scale: `{first['scale']}` (N = {s['seq_len']}, d = {s['d_model']}; the learning "
           f"rate of every arm selected on {s['selection_seeds']} seeds, every number of "
           f"{s['evaluation_seeds']} fresh evaluation seeds). Machine: {shown}, fingerprint "
           f"{fingerprint_id(machine)}: every card is compared with the same softmax (MTE) and "
           f"NAP baselines, trained on it. {_minutes(reports)}", "",
           f"Marks: ▲S / ▼S: above / below softmax, ▲N / ▼N: above / below NAP, where "
           f"{card_stats.FDR_METHOD}'s adjusted p over the board's {len(judged)} comparisons is "
           f"below {card_stats.ALPHA} and the interval of the difference excludes 0; no mark: "
           f"not distinguishable with the seeds at hand (the intervals below say how large a "
           f"difference could hide).", ""]
  rows = [[f"`{r['normalization']}`"] + [_cell(r, k, judged) for k in ranked]
          + [_collapse(r), _time(r)] for r in reports]
  baseline_rows = [[f"*{base} (baseline)*"]
                   + [_fmt(card_stats.mean(holder[k]["measures"][k]["values"][base]), percent(k))
                      for k in ranked] + ["", ""] for base in BASELINES]
  lines += _table(["normalisation"] + [label(k) for k in ranked]
                  + ["mode collapse: unbalanced / balanced",
                     "time vs softmax quadratic: quadratic / fast"], rows + baseline_rows)
  lines += ["", "## Checks, not ranked", "",
            "Columns whose spread across the cards lies inside the baselines' own run-to-run "
            "spread (below), and what a normalisation guarantees by construction (Theorem 2's "
            "bound: DNAS, HNAS and Sinkhorn meet it by construction; seeds in which every key "
            "keeps a total weight >= 1/N).", ""]
  lines += _table(["normalisation"] + [label(k) for k in checks] + ["Thm 2 bound"],
                  [[f"`{r['normalization']}`"] + [_mean_of(r, k) for k in checks] + [_bound(r)]
                   for r in reports])
  lines += ["", "## Which columns separate", "",
            "A column ranks where the spread of the cards' means (max - min) exceeds the "
            "baselines' run-to-run spread: the larger, over softmax and NAP, of the difference "
            "between the means of the two halves of their evaluation seeds (two runs of the same "
            "arm).", ""]
  lines += _table(["column", "spread of the cards' means", "baselines' run-to-run spread",
                   "ranks"],
                  [[label(k), _fmt(separated[k]["spread"], percent(k)),
                    _fmt(separated[k]["noise"], percent(k)),
                    "yes" if separated[k]["ranks"] else "no"] for k in keys])
  lines += ["", "## Confidence intervals", "",
            f"Per ranked column: the card's mean minus the baseline's, its "
            f"{card_stats.CONFIDENCE:.0%} bootstrap interval ({card_stats.RESAMPLES} resamples, "
            f"each arm's seeds resampled on their own) and q ({card_stats.FDR_METHOD} over the "
            f"board); percentages in points."]
  for key in ranked:
    unit = 100.0 if percent(key) else 1.0

    def entry(r, base):
      c = judged.get((r["normalization"], key, base))
      if c is None:
        return "-"
      return (f"{unit * c['difference']:+.3g} [{unit * c['ci'][0]:+.3g}, "
              f"{unit * c['ci'][1]:+.3g}], q = {c['q']:.2g}")
    lines += ["", f"### {label(key)}", ""]
    lines += _table(["normalisation", "mean", "vs softmax", "vs NAP"],
                    [[f"`{r['normalization']}`", _mean_of(r, key), entry(r, "softmax"),
                      entry(r, "nap")] for r in reports])
  stable = stability(reports, ranked)
  found = (f"**{stable['agree']} of {stable['total']} words agree "
           f"({100 * stable['share']:.0f}%; the goal is {100 * STABILITY_GOAL:.0f}%, "
           f"{'met' if stable['share'] >= STABILITY_GOAL else 'not met'})**"
           if stable["total"] else "no column ranks yet, so there is no word to judge")
  lines += ["", "## Stability of the verdicts", "",
            f"Every verdict word of the board (above / below / not distinguishable, per card, "
            f"ranked column and baseline) judged again on each half of the evaluation seeds "
            f"(the first and the last {s['evaluation_seeds'] // 2} of every arm, "
            f"{card_stats.FDR_METHOD} over the board within each half): {found}.", ""]
  lines += _table(["column", "words that agree"],
                  [[label(k), f"{a} of {t}"] for k, (a, t) in stable["by_column"].items()])
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
