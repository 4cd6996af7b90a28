"""REPRODUCTION.md's verdict paragraphs, finding by finding.

A verdict paragraph (one that opens with ``**Verdict``) has a spec here (``VERDICTS``) whose
*précis*, computed from the files, states the paragraph's findings in the order the paragraph
gives them (``reporting.findings``): every number with its sign (an interval's two ends in their
order), and every word that carries a finding — the verdict words (reproduced, partly, not
reproduced), comparisons (above, below, higher, lower, leads, trails, ...), outcomes (learns,
fails, holds) and number words ("two of the six"). The check reads the same sequence out of the
paragraph and out of the précis and reports where they differ, with the sentence.

In a précis, numbers of ours are computed from the files under ``results/``; a paper's are
quotes (``cite``, ``cite_text``: ``findings.quote``) of ``PAPERS``, the project's table of the
papers' numbers, each with the table, figure or section that prints it, and their sentence in
the paragraph must name the paper; the authors' stored seeds are quotes of their report
(``theirs``). A comparison word or a count of ours is computed from the numbers it compares
(``word``, ``number_word``); a verdict word is computed where its claim is a test on the files
(e.g. ``learns_all``), and is otherwise written into the précis as the spec's judgement, so that
a changed verdict word is still a difference. Settings and labels ("d = 128", "(3)", "5 seeds")
are written into the précis as they are. ``reporting.mutations`` and
``experiments/mutate_verdicts.py`` measure what the check catches, per kind of edit.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable

import numpy as np

from normattn_jax.reporting import findings
from normattn_jax.reporting import reproduction as rep
from normattn_jax.reporting.findings import quote
from normattn_jax.reporting.reproduction import ARCH_NAMES, Results, pct, rate
from normattn_jax.reporting.tables import REGULARIZERS, regularization_scores
from normattn_jax.tasks import synthetic

PARAGRAPH = re.compile(r"\n[ \t]*\n")
VERDICT_OPENING = "**Verdict"

# The papers' numbers, as the papers print them, each with where: "tables" holds the papers' rows
# of the document's fenced tables (``{table id: {row label: {column: value}}}``, checked against
# the document by ``paper_row_problems``) and "sources" each table's paper and table; "text" the
# numbers quoted in prose only, ``{key: {"value", "source"}}``.
PAPERS = "papers.json"


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One verdict paragraph: found by its ``opening`` (its first words); ``precis(results)``
  states its findings in order (``reporting.findings``)."""
  id: str
  opening: str
  precis: Callable[[Results], str]


# ----- the papers' numbers -----

def paper(r: Results, table: str, row: str, column: str) -> str:
  """A paper's value in one of its rows of a fenced table, as a number to compute with."""
  return r.json(PAPERS)["tables"][table][row][column]


def cite(r: Results, table: str, row: str, column: str, part: int | None = None) -> str:
  """A paper's value in one of its rows, quoted with its table (``part``: one of the values of a
  cell "train / validation")."""
  value = paper(r, table, row, column)
  if part is not None:
    value = value.split(" / ")[part]
  return quote(value, r.json(PAPERS)["sources"][table])


def paper_text(r: Results, key: str):
  """A paper's number that the document quotes in prose only, to compute with."""
  return r.json(PAPERS)["text"][key]["value"]


def cite_text(r: Results, key: str, index: int | None = None) -> str:
  """A paper's number quoted in prose, with where the paper gives it."""
  entry = r.json(PAPERS)["text"][key]
  value = entry["value"] if index is None else entry["value"][index]
  return quote(value, entry["source"])


def theirs(value: str, path: str) -> str:
  """A number of the authors' stored seeds (their pickles, in one of our reports), quoted."""
  return quote(value, f"the authors' stored seeds, results/{path}")


def paper_row_problems(document: str, r: Results) -> list[str]:
  """Each paper's row of a fenced table whose cells differ from ``PAPERS``."""
  lines = document.split("\n")
  fenced = rep.fenced_tables(lines)
  out = []
  for table, rows in r.json(PAPERS)["tables"].items():
    first, end = fenced.get(table, (0, 0))
    held = [rep.split_row(lines[i]) for i in range(first, end) if lines[i].strip().startswith("|")]
    header = held[0] if held else []
    for label, cells in rows.items():
      row = next((h for h in held[2:] if h[0] == label), None)
      if row is None:
        out.append(f"papers' table {table}, row {label!r}: not in the document")
      elif dict(zip(header[1:], row[1:])) != cells:
        out.append(f"papers' table {table}, row {label!r}: the document has {row[1:]}, "
                   f"{PAPERS} {list(cells.values())}")
  return out


def paper_source_problems(r: Results) -> list[str]:
  """Each of the papers' numbers in ``PAPERS`` that does not say where the paper prints it."""
  papers = r.json(PAPERS)
  sources = papers.get("sources", {})
  out = [f"{PAPERS}: table {t} has no source" for t in papers["tables"] if not sources.get(t)]
  return out + [f"{PAPERS}: text {key!r} has no value and source" for key, entry
                in papers["text"].items()
                if not isinstance(entry, dict) or not entry.get("source") or "value" not in entry]


# ----- the document -----

def paragraphs(document: str) -> list[str]:
  """The document's paragraphs (split at blank lines), stripped."""
  return [p.strip() for p in PARAGRAPH.split(document) if p.strip()]


def verdict_paragraphs(document: str) -> list[str]:
  """Every paragraph that opens with ``**Verdict``."""
  return [p for p in paragraphs(document) if p.startswith(VERDICT_OPENING)]


def paragraph_of(document: str, opening: str) -> str | None:
  """The one paragraph that opens with ``opening`` (whitespace aside), or None."""
  want = " ".join(opening.split())
  found = [p for p in paragraphs(document) if " ".join(p.split()).startswith(want)]
  return found[0] if len(found) == 1 else None


READ_ERRORS = (OSError, KeyError, ValueError, IndexError, StopIteration)


def precis_of(verdict: Verdict, results: Results) -> str:
  """A verdict's précis, computed from the files."""
  return verdict.precis(results)


def verdict_problems(paragraph: str | None, verdict: Verdict, results: Results,
                     precis: str | None = None) -> list[str]:
  """Where one verdict paragraph's findings differ from its précis' (computed here unless
  given)."""
  if paragraph is None:
    return [f"verdict {verdict.id}: no one paragraph opens with {verdict.opening!r}"]
  try:
    precis = precis_of(verdict, results) if precis is None else precis
  except Unsupported as err:
    return [f"verdict {verdict.id}: {err}"]
  except READ_ERRORS as err:
    return [f"verdict {verdict.id}: its files cannot be read: {type(err).__name__}: {err}"]
  return [f"verdict {verdict.id}: {d}" for d in findings.differences(paragraph, precis)]


def problems(document: str, results: Results, verdicts=None) -> list[str]:
  """Each paper's row that differs from ``PAPERS``, each paper's number there without its
  source, and each verdict whose paragraph is missing or whose findings differ from its
  précis'."""
  out = paper_row_problems(document, results) + paper_source_problems(results)
  for verdict in VERDICTS if verdicts is None else verdicts:
    out += verdict_problems(paragraph_of(document, verdict.opening), verdict, results)
  return out


def check(document: str, results: Results) -> list[str]:
  """Everything ``reproduction.check`` finds, and every verdict whose findings differ."""
  return rep.check(document, results) + problems(document, results)


# ----- words of a finding, from the numbers -----

def at_most(x: float) -> str:
  """A bound as the document writes it, rounded up to one decimal ("within 0.4 points")."""
  return f"{math.ceil(10 * x - 1e-9) / 10:.1f}"


class Unsupported(ValueError):
  """A claim of a verdict paragraph that the files do not support."""


def supported(holds: bool, claim: str) -> str:
  """A claim that carries no finding word ("sum pooling generalises worst in every row"): its
  text where the files support it; else ``Unsupported``, which the check reports."""
  if not holds:
    raise Unsupported(f"the files do not support: {claim}")
  return claim


def word(holds: bool, yes: str, no: str) -> str:
  """The word of a finding: ``yes`` where the files make it hold, else ``no``."""
  return yes if holds else no


def number_word(count: int) -> str:
  """A count as the document writes it in words: none, one, two, ... twelve."""
  return findings.NUMBER_WORDS[count]


def verdict_word(held: int, of: int) -> str:
  """A verdict from how many of its claims hold: reproduced, partly or not reproduced."""
  return "reproduced" if held == of else "not reproduced" if held == 0 else "partly"


def learns_all(r: Results, workdir: str, arch: str, params: dict | None = None) -> bool:
  """The document's "learned": the arch's best cell has every case mean at least
  ``seeds.CASES_LEARNED`` (a white pixel)."""
  return min(rep.case_pixel(r, workdir, arch, params)[1]) >= rep.seeds_lib.CASES_LEARNED


# ----- the numbers of ours, by source -----

def summary_cell(r: Results, workdir: str, arch: str, lr: float, params: dict | None = None):
  """One cell of a sweep's ``summary.json``: an arch at a learning rate (to 1%) and point."""
  cell = rep.cell_at(rep.seeds_lib.point_cells(r.json(f"{workdir}/summary.json"), arch, params),
                     lr)
  if cell is None:
    raise KeyError(f"{workdir}: no cell of {arch!r} at lr {lr:g} and {params or {}}")
  return cell


def cell_value(r: Results, workdir: str, arch: str, lr: float, params: dict | None = None,
               metric: str = "train_acc") -> float:
  """A cell's pixel mean (the mean over seeds at its best over training)."""
  return summary_cell(r, workdir, arch, lr, params)["metrics"][metric]["mean"]


def cell_mean(r: Results, workdir: str, arch: str, lr: float, params: dict | None = None,
              metric: str = "train_acc") -> str:
  """A cell's pixel mean, in %."""
  return pct(cell_value(r, workdir, arch, lr, params, metric))


def weakest(r: Results, workdir: str, arch: str, params: dict | None = None) -> str:
  """The weakest case of an arch's best cell (``reproduction.case_pixel``), in %."""
  return pct(min(rep.case_pixel(r, workdir, arch, params)[1]))


def case_means(r: Results, workdir: str, arch: str, params: dict | None = None) -> str:
  """"94.2 / 100.0 / 81.2% at 2.19e-4": an arch's best cell's three case means and its rate."""
  lr, means = rep.case_pixel(r, workdir, arch, params)
  return f"{' / '.join(pct(m) for m in means)}% at {rate(lr)}"


def seed_report(r: Results, path: str, point: str, arch: str) -> dict:
  """An arch's best cell (mean training accuracy) in a ``compare_seeds`` report."""
  return rep.best_cell(rep.seed_cells(r, path, point)[arch])


def seed_range(values, digits: int = 1) -> str:
  """A range of per-seed values as the document writes it: "36.9-86.8", in %."""
  return f"{pct(min(values), digits)}-{pct(max(values), digits)}"


def one_value(*values: str) -> str:
  """One number the document gives for several values ("0.00243 and 0.0081 give 94.9%"): the
  value, or, where they differ, all of them joined, which no paragraph holds."""
  return values[0] if len(set(values)) == 1 else "|".join(values)


def p_test(r: Results, path: str, better: str, worse: str, point: str, split: str = "train_acc",
           source: str = "ours") -> str:
  """A one-sided test's p of a ``compare_seeds`` report, as the document writes it."""
  return rep.p_value(rep.one_sided_test(r.json(path), better, worse, point, source)[split])


def best_rate(r: Results, workdir: str, key: str, split: str = "train") -> float:
  """The learning rate of a sweep's table entry (``summary.json``'s best)."""
  return r.json(f"{workdir}/summary.json")["best"][key][f"{split}_learning_rate"]


# ----- the précis -----

def fig3(r: Results) -> str:
  w, table = "fig3_reduced", "fig3-best"
  config = r.json(f"{w}/config.json")
  ds, rates = config["sweep"]["values"], config["learning_rates"]
  n = config["task"]["seq_len"]
  at = lambda d: {"model.d_model": d}
  val = {a: rep.best_over_points(r, w, a, "val") for a in ARCH_NAMES}
  every_arch = all(any(learns_all(r, w, a, at(d)) for d in ds) for a in ARCH_NAMES)
  top = max(rates)
  at_top = lambda a: max(cell_value(r, w, a, top, at(d)) for d in ds)
  simplex_fail = (max(at_top(a) for a in ("bert", "mte")) < 0.5
                  and min(at_top(a) for a in ("nap", "non", "sum", "max")) >= 0.5)
  robust = min(val, key=val.get) == "sum" and max(val, key=val.get) == "max"
  paper_val = lambda name: cite(r, table, "paper, validated at N/2 = 64", name)
  mte_rates = [best_rate(r, w, f"mte model.d_model={d}") for d in ds]
  bert_rates = [best_rate(r, w, f"bert model.d_model={d}") for d in ds]
  moved = rates.index(mte_rates[1]) - rates.index(mte_rates[0])
  bert = lambda lr, d: cell_mean(r, w, "bert", lr, at(d))
  low, second = min(rates), sorted(rates)[-2]
  return (f"partly reproduced. (1) every arch {word(every_arch, 'holds', 'fails')}. (3) BERT and "
          f"MTE both {word(simplex_fail, 'fail', 'learn')} at the highest rate, consistent with "
          f"(3), on one rate of {number_word(len(rates))} (the highest) at "
          f"{number_word(len(ds))} values of d. Sum the worst, max the most robust: "
          f"{word(robust, 'holds', 'fails')}, {pct(val['sum'])} vs {paper_val('sum')}; length "
          f"{n // 2}, N = {n}. NAP in the paper: {paper_val('NAP')}, BERT {paper_val('BERT')}; "
          f"here {pct(val['nap'])}, {word(val['nap'] < val['bert'], 'behind', 'ahead of')} BERT "
          f"{pct(val['bert'])}. (2) MTE moves {number_word(moved)} step from d = {ds[0]} to "
          f"d = {ds[1]} ({mte_rates[0]:g} to {mte_rates[1]:g}), BERT stays at "
          f"{one_value(*(f'{x:g}' for x in bert_rates))}: {bert(second, ds[0])} at {second:g} and "
          f"{bert(low, ds[0])} at {low:g} for d = {ds[0]}, {bert(second, ds[1])} and "
          f"{bert(low, ds[1])} for d = {ds[1]}; "
          f"{number_word(len(ds))} values of d too few. Section 5.1.2.")


def pooling(r: Results) -> str:
  slopes = r.json("geometry/geometry.json")["log_log_slope_from_N_4"]
  shrinks = (abs(slopes["softmax attention std"] - slopes["mean std"]) < 0.1
             and abs(slopes["normalised sum std"]) < 0.01)
  return f"{word(shrinks, 'reproduced', 'not reproduced')}: about 1/sqrt(N)"


def unselectable(r: Results) -> str:
  result = r.json("unselectable/unselectable.json")
  holds = np.max(result["with_layer_norm"]) == 0 and np.max(result["without_layer_norm"]) >= 0.9
  return word(holds, "reproduced", "not reproduced")


def unselectable_lm(r: Results) -> str:
  summary = r.json("unselectable_lm/summary.json")
  config = r.json("unselectable_lm/config.json")
  seeds = {k: v["seeds"] for k, v in summary["variants"].items()}
  counted = lambda variant, stage: rep.lm_counted(
      seeds[variant][0][stage]["attention_inputs"])["mean_percent"]
  trained, untrained = counted("without_scaling", "trained"), counted("without_scaling", "init")
  scaled = counted("with_scaling", "trained") + counted("with_scaling", "init")
  source = r.json(PAPERS)["sources"]["unselectable-lm"]
  paper_row = [float(x) for x in r.json(PAPERS)["tables"]["unselectable-lm"][
      "w/o scaling (paper)"].values()]
  at_least = quote(f"{min(paper_row):.0f}", source)
  fewer = paper_text(r, "layernorm.lm.train-tokens") / summary["tokens_seen_per_model"]
  gap = lambda key: seeds["without_scaling"][0][key] - seeds["with_scaling"][0][key]
  gaps = [gap("final_train_loss"), gap("heldout_loss")]
  d = config["model"]["d_model"]
  return (f"{word(max(trained) < min(paper_row), 'not reproduced', 'reproduced')} in size. "
          f"{max(scaled):.0f}% with scaling {word(max(scaled) == 0, 'holds', 'fails')}. "
          f"{min(trained):.0f}-{max(trained):.0f}% against {at_least}-"
          f"{quote(f'{max(paper_row):.0f}', source)}, at least {at_least}, "
          f"{word(all(t < u for t, u in zip(trained, untrained)), 'below', 'above')} untrained "
          f"{min(untrained):.0f}-{max(untrained):.0f}%; {summary['window']} keys in {d} "
          f"dimensions. Keys in {d} dimensions; {round(fewer, -2):.0f} times fewer tokens. Layer "
          f"{trained.index(max(trained)) + 1} has the highest share; a slightly "
          f"{word(min(gaps) > 0, 'higher', 'lower')} loss, by "
          f"{one_value(*(f'{g:.2f}' for g in gaps))} nats, "
          f"{number_word(len(seeds['without_scaling']))} seed.")


def explaining_away(r: Results) -> str:
  runs = r.json("explaining_away/explaining_away.json")
  unas, dnas = runs["UNAS"], runs["DNAS"]
  share = pct(unas["explained_away_fraction"], 0)
  theorem = dnas["min_log_sum"] >= dnas["log_one_over_S"] - 1e-6
  return (f"the theorem {word(theorem, 'holds', 'fails')}; the size "
          f"{word(unas['explained_away_fraction'] < 0.5, 'not reproduced', 'reproduced')}. DNAS "
          f"never below log(1/S), the paper's Fig. 1, holds by construction (Theorem 2, at least "
          f"1/S). UNAS {share}% below epsilon, down to {unas['min_log_sum']:.0f}, far "
          f"{word(unas['min_log_sum'] < unas['log_one_over_S'], 'below', 'above')} log(1/S). The "
          f"paper: below {cite_text(r, 'dnas.fig1.explained-away-log-sum')}, Fig. 1, S = "
          f"{cite_text(r, 'dnas.fig1.keys')}; ours {share}%. 2 layers of 4 heads, S = "
          f"{runs['args']['seq_len']}, one seed; from 2.6% to {share}% between two runs "
          f"(above): one seed.")


def albert(r: Results) -> str:
  runs = r.json("albert_tiny/comparison.json")
  schemes = ("softmax", "dnas", "hnas")
  mlm = [runs[s]["mlm_accuracy"] for s in schemes]
  u = np.asarray(r.json("albert_tiny/hnas/summary.json")["hybrid_weights_per_head"])
  means = u.mean(axis=1)
  near = int(np.sum(np.abs(u[0] - 0.5) < 0.05))
  examples = runs["softmax"]["eval_examples"]
  return (f"After 2.5M tokens the {number_word(len(schemes))} models agree to within "
          f"{100 * (max(mlm) - min(mlm)):.2f} points (the error of {examples} x ~19) and have "
          f"learned little; SOP at chance for all {number_word(len(schemes))} "
          f"({one_value(*(pct(runs[s]['sop_accuracy'], 2) for s in schemes))}%, one label among "
          f"{examples}, ln 2). Fig. 4, one toy run of one seed and {runs['hnas']['steps']} "
          f"steps: u {word(all(m > 0.5 for m in means[1:]), 'above', 'below')} 0.5 in layers "
          f"2-{len(means)}, not in layer 1 ({number_word(near)} heads near 0.5, "
          f"{number_word(len(u[0]) - near)} falls to {min(u[0]):.2f}); one seed. Table 2.")


def finetune(r: Results) -> str:
  summaries = {label: r.json(f"finetune_genre/{run}/summary.json")
               for label, run in rep.SCHEMES.items()}
  runs = {label: s["best"]["accuracy"] for label, s in summaries.items()}
  means = [x["mean"] for x in runs.values()]
  unas = runs["UNAS"]
  gap = lambda other: 100 * (unas["mean"] - runs[other]["mean"])
  in_se = lambda other: gap(other) / 100 / (unas["std_error"] ** 2
                                            + runs[other]["std_error"] ** 2) ** 0.5
  description = summaries["UNAS"]["task_description"]
  majority = float(re.search(r"majority (0\.\d+)", description).group(1))
  dev = re.search(r"(\d+) dev passages", description).group(1)
  best_single = max(max(x["per_seed"]) for x in runs.values())
  both = [label for label, x in runs.items() if max(x["per_seed"]) == best_single]
  lows, highs = rep.finetune_choices(r)[1].split(" is ")[1].split("-")
  rates = sorted({c["learning_rate"] for s in summaries.values() for c in s["cells"]})
  unas_first = all(max(summaries, key=lambda label: next(
      c for c in summaries[label]["cells"] if c["learning_rate"] == lr)["accuracy"]["mean"])
      == "UNAS" for lr in rates)
  seeds = one_value(*(number_word(len(x["per_seed"])) for x in runs.values()))
  mlm = r.json("albert_tiny/comparison.json")["softmax"]["mlm_accuracy"]
  return (f"{word(max(runs, key=lambda k: runs[k]['mean']) == 'UNAS', 'not reproduced', 'partly')}"
          f" at this scale. All {number_word(len(runs))} fine-tune well "
          f"{word(min(means) > majority, 'above', 'below')} the majority class "
          f"({pct(min(means))}-{pct(max(means))}% against {pct(majority)}%; the last 100 steps "
          f"{lows}-{highs} against ln 3 = 1.10, so 4 epochs). UNAS scores "
          f"{word(unas_first, 'highest', 'lowest')} at either rate, by {gap('DNAS'):.1f} and "
          f"{gap('HNAS'):.1f}, {in_se('DNAS'):.1f} and {in_se('HNAS'):.1f} standard errors "
          f"(best single run {pct(best_single)}% for {' and '.join(both)}): {seeds} seeds on "
          f"{dev} dev passages. After 2.5M tokens MLM {100 * mlm:.0f}%. Table 2.")


def majority(r: Results) -> str:
  result = r.json("majority/majority.json")
  v = {name: result["variants"][name]["steps_to_test_accuracy"] for name in rep.MAJORITY_VARIANTS}
  final = {name: result["variants"][name]["final"] for name in rep.MAJORITY_VARIANTS}
  with_, without, code = (v[name] for name in rep.MAJORITY_VARIANTS)
  ratios = [code[t]["seed_mean_curve"] / with_[t]["seed_mean_curve"] for t in ("0.5", "0.7", "0.8")]
  paired = [c / w for c, w in zip(code["0.5"]["per_seed"], with_["0.5"]["per_seed"])]
  same_step = all(with_[t]["seed_mean_curve"] == without[t]["seed_mean_curve"]
                  for t in ("0.5", "0.7"))
  pairs = list(zip(without["0.8"]["per_seed"], with_["0.8"]["per_seed"]))
  crossing = re.findall(r"\d+(?:\.\d+)?x?", rep.majority_loss_crossing(r))
  history = r.jsonl("majority/history.jsonl")
  seeds = r.json("majority/config.json")["num_seeds"]
  first_loss = next(  # the paper's variant: the second of MAJORITY_VARIANTS
      row["step"] for row in sorted(history, key=lambda row: row["step"])
      if "train_loss" in row and sum(row["train_loss"][seeds:2 * seeds]) / seeds <= 0.45)
  steps = result["steps_run"]
  lead = with_["0.8"]["mean_over_reached"] - without["0.8"]["mean_over_reached"]
  speed = [cite_text(r, "layernorm.fig2.speed-up-50-70-80", i) for i in range(3)]
  angle_step = re.findall(r"\d+", rep.majority_angle(r))
  angle = {name: final[name]["query_angle"] for name in rep.MAJORITY_VARIANTS}
  tests = [f"{final[n]['test_accuracy']['mean']:.3f}"
           for n in ("with_projection", "without_projection")]
  return (f"{word(min(ratios) > 1, 'reproduced', 'not reproduced')} for the code's comparison; "
          f"{word(same_step, 'not reproduced', 'reproduced')} for the paper's definition. Norm "
          f"1/sqrt(d): about {min(ratios):.1f}-{max(ratios):.1f}x "
          f"{word(min(ratios) > 1, 'faster', 'slower')}: to 50% {ratios[0]:.1f}x, "
          f"{min(paired):.1f}-{max(paired):.1f}x on every seed, to 70% {ratios[1]:.1f}x, to 80% "
          f"{ratios[2]:.1f}x, reaches 90% ({with_['0.9']['reached']} of {with_['0.9']['of']}; "
          f"step {with_['0.9']['seed_mean_curve']}) where the code's stays at "
          f"{final['without_projection_code']['test_accuracy']['mean']:.2f} after {steps} steps "
          f"(the paper's curves: {speed[0]}, {speed[1]} and {speed[2]} at 50-80%, and "
          f"{cite_text(r, 'layernorm.fig2.without-accuracy-at-5000')} after "
          f"{cite_text(r, 'layernorm.fig2.steps')}). The paper's "
          f"{cite_text(r, 'layernorm.fig2.loss-speed-up')}: loss reaches 0.45 at step "
          f"{crossing[1]} and {crossing[2]}, {crossing[3]}; the paper's own curves "
          f"{cite_text(r, 'layernorm.fig2.loss-0.45-steps', 0)} and "
          f"{cite_text(r, 'layernorm.fig2.loss-0.45-steps', 1)}; the paper's variant at step "
          f"{first_loss}. These two variants, the paper's two curves (the figure below, Fig. 2, "
          f"3). No speed-up: the two variants reach 50% and 70% at the same evaluation, 80% "
          f"{abs(lead):.0f} steps {word(lead > 0, 'earlier', 'later')} (earlier on "
          f"{sum(a < b for a, b in pairs)} seeds, later on {sum(a > b for a, b in pairs)}), "
          f"spread {min(with_['0.8']['per_seed'])}-{max(with_['0.8']['per_seed'])}, 90% at step "
          f"{without['0.9']['seed_mean_curve']} against {with_['0.9']['seed_mean_curve']} "
          f"({without['0.9']['reached']} and {with_['0.9']['reached']} of {with_['0.9']['of']}); "
          f"at step {steps} both {one_value(*tests)}. The slower from the smaller norm "
          f"(1/sqrt(d): d^2 = 64, d = 8). Angle: {angle_step[0]} degrees at step "
          f"{angle_step[1]}, {angle['with_projection']['mean']:.0f} at step {steps}, "
          f"{angle['with_projection']['min']:.0f} on its lowest seed, without at "
          f"{angle['without_projection_code']['mean']:.0f}-"
          f"{angle['without_projection']['mean']:.0f} degrees; d = 8. Open: "
          f"{cite_text(r, 'layernorm.fig3.late-angle')} degrees needs up to "
          f"{result['paper_steps'] // 1000}K steps, {result['paper_steps'] / steps:.0f}x.")


def mixing(r: Results) -> str:
  m, a = r.json("mixing/mixing.json"), r.json("mixing/mixing_authors.json")
  means = [m["overall"][k]["mean"] for k in rep.MIXING_METHODS]
  types = m["per_layer_token_type"]["ATTNRESLN-N"]
  rng = lambda xs: f"{100 * min(xs):.0f}-{100 * max(xs):.0f}"
  mean_moves = max(abs(m["overall"][k]["mean"] - a["overall"][k]["mean"])
                   for k in rep.MIXING_METHODS)
  layer_moves = lambda k: max(  # per layer and token type
      abs(x - y) for kind, ours in m["per_layer_token_type"][k].items()
      for x, y in zip(ours, a["per_layer_token_type"][k][kind]))
  tokens = one_value(*(str(v["tokens"]) for v in m["frequency_spearman"].values()))
  less = lambda result: all(x < y for x, y in zip(
      result["per_layer_token_type"]["ATTNRESLN-N"]["[MASK]"],
      result["per_layer_token_type"]["ATTNRESLN-N"]["normal"]))
  return (f"the ordering {word(means == sorted(means, reverse=True), 'holds', 'fails')}, from "
          f"{100 * m['overall']['ATTN-N']['mean']:.0f}% to "
          f"{100 * m['overall']['ATTNRESLN-N']['mean']:.0f}%. Fig. 1 style. Expands "
          f"({m['expansion_rate']['mean']:.2f}), still only "
          f"{100 * m['overall']['ATTNRESLN-N']['mean']:.0f}%. [MASK] less in every layer "
          f"({rng(types['[MASK]'])}% vs {rng(types['normal'])}%): not expected to hold and is "
          f"{word(less(m), 'not reproduced', 'reproduced')}. With {tokens} tokens; "
          f"{m['num_sequences']} sentences. Changes none: Table 2's means by less than "
          f"{max(0.1, math.ceil(1000 * mean_moves) / 10):.1f} point, Fig. 3's per-layer by at most "
          f"{100 * layer_moves('ATTNRESLN-N'):.1f} (at most "
          f"{100 * max(layer_moves(k) for k in rep.MIXING_METHODS):.1f}), [MASK] still "
          f"{word(less(a), 'below', 'above')} normal tokens.")


def table4_mode(r: Results) -> str:
  w = "table4_mode_reduced"
  best = r.json(f"{w}/summary.json")["best"]
  config = r.json(f"{w}/config.json")
  chance = 1 / config["task"]["vocab_size"]
  arches = {a: r.best(w, a) for a in ARCH_NAMES}
  holds = max(arches, key=arches.get) == "sum" and arches["max"] < 2 * chance
  bert_rate = best["bert"]["learning_rate"]
  return (f"the headline finding is {word(holds, 'reproduced', 'not reproduced')}. Max near "
          f"chance ({pct(arches['max'])}%; chance is {100 * chance:.0f}%), sum best "
          f"({pct(arches['sum'])} / {pct(r.best(w, 'sum', 'val'))}): the finding "
          f"{word(holds, 'holds', 'fails')}. BERT only {pct(arches['bert'])}%: its best rate is "
          f"the smallest ({rate(bert_rate)}), so its optimum lies "
          f"{word(bert_rate == min(config['learning_rates']), 'below', 'above')} the grid, 10% "
          f"warm-up and {config['train']['num_steps']} steps, the paper's 3200; the paper's "
          f"Fig. 7, near 1e-3.")


def table1(r: Results) -> str:
  w = "table1_ablation_reduced"
  config = r.json(f"{w}/config.json")
  stage = lambda k: r.best(w, f"bert ablation={k}")
  cost = sorted(100 * (stage(0) - stage(k)) for k in (3, 4))
  paper_cost = (float(paper(r, "table1-ablation", "paper, train", "BERT"))
                - float(paper(r, "table1-ablation", "paper, train", "+ GELU (= MTE)")))
  source = r.json(PAPERS)["sources"]["table1-ablation"]
  picks = [f"{r.json(f'{w}/summary.json')['best'][f'bert ablation={k}']['learning_rate']:g}"
           for k in (3, 4)]
  return (f"partly reproduced. Little at the best rate ({pct(stage(0))} / {pct(stage(1))} / "
          f"{pct(stage(2))}). The two MTE modifications cost {cost[0]:.1f}-{cost[-1]:.1f}, the "
          f"paper sees {quote(f'{paper_cost:.1f}', source)}; rounding moved them by up to 0.7 "
          f"(1.7 on validation), above; {config['num_seeds']} seeds of "
          f"{config['train']['num_steps']} steps at d = {config['model']['d_model']}; "
          f"{number_word(len(config['learning_rates']))} learning rates, the top of our grid, "
          f"{one_value(*picks)}.")


def table3_reduced(r: Results) -> str:
  w32, w64 = "table3_first_token_reduced", "table3_first_token_d64"
  best32 = {a: r.best(w32, a) for a in ARCH_NAMES}
  best64 = {a: r.best(w64, a) for a in ("bert", "mte", "nap")}
  b32 = lambda arch, split="train": pct(r.best(w32, arch, split))
  b64 = lambda arch, split="train": pct(r.best(w64, arch, split))
  row = lambda arch: cite(r, "table3-reduced", "paper, train (N = 128)", arch)
  task = r.json(f"{w32}/config.json")["task"]
  shares = synthetic.case_shares(task["seq_len"], task["vocab_size"])
  nap_beats_both = any(b["nap"] > b["bert"] and b["nap"] > b["mte"] for b in (best32, best64))
  rates = r.json(f"{w32}/config.json")["learning_rates"] + r.json(
      f"{w64}/config.json")["learning_rates"]
  authors_rate = 0.3 ** 7
  seeds_json = f"{FIG5_GPU}/seeds.json"
  gpu = lambda d, arch: seed_report(r, seeds_json, f"model.d_model={d}", arch)
  floor = lambda cell: cell["case_rule"]["threshold"]
  mte_above = sum(x > floor(gpu(64, "mte")) for x in gpu(64, "mte")["ours"]["cases"]["argmax"])
  nap_argmax = gpu(64, "nap")["ours"]["cases"]["argmax"]
  d128_lead = max(float(p_test(r, seeds_json, "nap", worse, "model.d_model=128", split))
                  for worse in ("bert", "mte") for split in ("train_acc", "val_acc")) <= 0.05
  return (f"{word(nap_beats_both, 'reproduced', 'not reproduced')}. Max best ({b32('max')}%), "
          f"sum and NON {word(max(best32['sum'], best32['non']) < 0.5, 'fail', 'learn')}; NAP "
          f"does not beat both: at d = 32 BERT "
          f"{word(best32['bert'] > best32['nap'], 'beats', 'trails')} it ({b32('bert')} vs "
          f"{b32('nap')}, {b32('bert', 'val')} vs {b32('nap', 'val')}), MTE ({b32('mte')}); at "
          f"d = 64 it {word(best64['nap'] > best64['bert'], 'beats', 'trails')} BERT by "
          f"{100 * (best64['nap'] - best64['bert']):.0f} ({b64('nap')} vs {b64('bert')}, "
          f"{b64('nap', 'val')} vs {b64('bert', 'val')}) but "
          f"{word(best64['nap'] < best64['mte'], 'trails', 'beats')} MTE ({b64('mte')}). The "
          f"paper's margin ({row('NAP')} vs {row('BERT')} / {row('MTE')}) at d = 128, N = 128, "
          f"3200; at N = {task['seq_len']} "
          f"{' / '.join(pct(x) for x in shares)}"
          f"%; 0.3^7 = 2.19e-4 from 64 to 1024, "
          f"{number_word(round(min(rates) / authors_rate))} times below; at d = 32 (NAP "
          f"{cite_text(r, 'nap.authors-code.first-token.d32.nap')}%, BERT "
          f"{cite_text(r, 'nap.authors-code.first-token.d32.bert')}%). Two differences; the next "
          f"section at N = 128. At N = 128, d = 128 NAP's lead "
          f"{word(d128_lead, 'reproduced', 'not reproduced')}; at d = 64, "
          f"as at N = {task['seq_len']}, {number_word(mte_above)} of its seeds above the floor, "
          f"every NAP seed ({seed_range(nap_argmax)}%).")


FIG5_GPU = "fig5_first_token_gpu"


def fig5_gpu(r: Results) -> str:
  seeds_json, authors_json = f"{FIG5_GPU}/seeds.json", f"{FIG5_GPU}/seeds_authors.json"
  at = lambda d: f"model.d_model={d}"
  pixels = lambda d, arch: rep.case_pixel(r, f"{FIG5_GPU}/d{d}_{arch}", arch, {"model.d_model": d})
  means = lambda d, arch: case_means(r, f"{FIG5_GPU}/d{d}_{arch}", arch, {"model.d_model": d})
  weak = {d: {a: min(pixels(d, a)[1]) for a in ARCH_NAMES} for d in (128, 64)}
  learned = {d: sorted(a for a, x in weak[d].items() if x >= rep.seeds_lib.CASES_LEARNED)
             for d in (128, 64)}
  others = lambda d: max(x for a, x in weak[d].items() if a not in ("nap", "max"))
  nap128 = seed_report(r, seeds_json, at(128), "nap")["ours"]
  tests = [p_test(r, seeds_json, "nap", worse, at(128), split)
           for worse in ("bert", "mte", "non", "sum") for split in ("train_acc", "val_acc")]
  row = lambda label: cite(r, "table3-reduced", label, "NAP")
  mte64 = seed_report(r, seeds_json, at(64), "mte")["ours"]
  nap64 = seed_report(r, seeds_json, at(64), "nap")["ours"]
  mte64_cases = pixels(64, "mte")[1]
  authors_nap64 = rep.fig5_authors_cell(r, 64, "nap")
  only_nap_max = learned[128] == ["max", "nap"]
  apart = min(weak[64]["nap"], weak[64]["max"]) > others(64)
  claim = [apart, bool(learned[64])]  # at d = 64: the ordering of (3), and "learn"
  ours_below = nap64["train_acc"]["pixel"]["mean"] < authors_nap64["authors"]["train_acc"][
      "pixel"]["mean"]
  return (f"{word(only_nap_max, 'reproduced', 'not reproduced')} at d = 128; "
          f"{verdict_word(sum(claim), len(claim))} at d = 64. Weakest "
          f"cases above, at d = 128 only NAP ({means(128, 'nap')}) and max "
          f"({means(128, 'max')}) {word(only_nap_max, 'learn', 'fail')} all three; the others "
          f"{pct(others(128))}% or below, so (3) Only NAP and max learn all three "
          f"{word(only_nap_max, 'holds', 'fails')}. NAP "
          f"{pct(nap128['train_acc']['pixel']['mean'])} / {pct(nap128['val_acc']['pixel']['mean'])}"
          f" against the paper's {row('paper, train (N = 128)')} / "
          f"{row('paper, validated at N/2')} (5-against-5, p = "
          f"{' / '.join(rep.same_cell_ps(rep.fig5_authors_cell(r, 128, 'nap')))}), NAP "
          f"{word(max(float(t) for t in tests) <= 0.05, 'above', 'below')} BERT, MTE, NON and "
          f"sum at p <= {max(tests, key=float)}; max level with or above. At d = 64 (weakest "
          f"{pct(weak[64]['nap'])}% and {pct(weak[64]['max'])}% against at most "
          f"{pct(others(64))}%): no model {word(not learned[64], 'learns', 'fails')} all three at "
          f"d = 64, the ordering of (3) is reproduced. NAP's lead does not hold at d = 64: MTE "
          f"({pct(mte64['train_acc']['pixel']['mean'])} vs "
          f"{pct(nap64['train_acc']['pixel']['mean'])}, p = "
          f"{p_test(r, seeds_json, 'nap', 'mte', at(64))}), argmin ({pct(mte64_cases[0])}%), "
          f"argmax ({pct(mte64_cases[2])}%); our NAP {word(ours_below, 'below', 'above')} the "
          f"authors' ({pct(nap64['train_acc']['pixel']['mean'])} against "
          f"{theirs(pct(authors_nap64['authors']['train_acc']['pixel']['mean']), authors_json)}; "
          f"5-against-5, p = {rep.same_cell_ps(authors_nap64)[0]}): "
          f"{word(ours_below, 'later', 'earlier')}, the CPU run below. {fig5_gpu_seeds(r)}")


def fig5_gpu_seeds(r: Results) -> str:
  """The Fig. 5 verdict's seed-by-seed view: per-seed cases against the floor."""
  seeds_json, authors_json = f"{FIG5_GPU}/seeds.json", f"{FIG5_GPU}/seeds_authors.json"
  cell = lambda d, arch: seed_report(r, seeds_json, f"model.d_model={d}", arch)
  cases = lambda d, arch, case: cell(d, arch)["ours"]["cases"][case]
  above = lambda d, arch: [i for i, ok in enumerate(cell(d, arch)["ours"]["learned_all"]) if ok]
  every = lambda d, arch: len(above(d, arch)) == len(cell(d, arch)["ours"]["learned_all"])
  bert = cell(128, "bert")
  bert_seeds = sorted(bert["ours"]["train_acc"]["seeds"])
  solved = [x for x in bert_seeds if x >= 0.8]
  theirs_cell = rep.fig5_authors_cell(r, 128, "bert")
  their_seeds = theirs_cell["authors"]["train_acc"]["seeds"]
  their_low = [x for x in their_seeds if x < 0.3]
  non128, mte128 = above(128, "non"), above(128, "mte")
  assert len(non128) == 1 and len(mte128) == 1, (non128, mte128)
  non64 = above(64, "non")
  nap_over_non = min(cases(64, "nap", "argmax")) > max(cases(64, "non", "argmax"))
  authors = lambda value: theirs(value, authors_json)
  return (f"At d = 128 every NAP and max seed "
          f"{word(every(128, 'nap') and every(128, 'max'), 'above', 'below')} the floor "
          f"({seed_range(cases(128, 'nap', 'argmax'))}%); BERT's {number_word(len(solved))} "
          f"seeds at {seed_range(solved)}% stay at {seed_range(cases(128, 'bert', 'argmax'))}% "
          f"(mean {pct(bert['ours']['train_acc']['pixel']['mean'])} / "
          f"{pct(bert['ours']['val_acc']['pixel']['mean'])} against the authors' "
          f"{authors(pct(theirs_cell['authors']['train_acc']['pixel']['mean']))} / "
          f"{authors(pct(theirs_cell['authors']['val_acc']['pixel']['mean']))}: 5-against-5, p = "
          f"{' / '.join(rep.same_cell_ps(theirs_cell))}, {number_word(len(their_low))} of their "
          f"seeds near {authors(f'{100 * min(their_seeds):.0f}')}% and "
          f"{number_word(len(solved))} of ours near {100 * sum(solved) / len(solved):.0f}%); "
          f"{number_word(len(mte128))} MTE seed (argmax "
          f"{pct(cases(128, 'mte', 'argmax')[mte128[0]])}%) and {number_word(len(non128))} NON "
          f"seed ({pct(cases(128, 'non', 'argmin')[non128[0]])} / "
          f"{pct(cases(128, 'non', 'argmax')[non128[0]])}%) pass, "
          f"above chance. At d = 64 every NAP seed "
          f"{word(every(64, 'nap'), 'above', 'below')} the floor "
          f"({seed_range(cases(64, 'nap', 'argmax'))}%), {number_word(len(non64))} NON seeds at "
          f"{seed_range([cases(64, 'non', 'argmax')[i] for i in non64])}%, max at "
          f"{seed_range(cases(64, 'max', 'argmax'))}%: the paper's learn; every NAP seed "
          f"{word(nap_over_non, 'above', 'below')} every NON seed (p = "
          + rep.p_value(rep.seeds_lib.rank_test(np.asarray(cases(64, "nap", "argmax")),
                                                np.asarray(cases(64, "non", "argmax"))))
          + "). The authors' pickles hold no per-case accuracies. Fig. 5, Fig. 3.")


def n128_d64_superseded(r: Results) -> str:
  gpu = seed_report(r, f"{FIG5_GPU}/seeds.json", "model.d_model=64", "nap")
  mte = seed_report(r, f"{FIG5_GPU}/seeds.json", "model.d_model=64", "mte")
  cpu = rep.cell_at(rep.seed_cells(r, "table3_first_token_n128_d64_seeds.json")["nap"], 2.19e-4)
  cpu_all = all(cpu["ours"]["learned_all"])
  return (f"superseded by the GPU run above, at d = 64 with 5 seeds and all 10 rates: NAP at "
          f"2.19e-4 (mean {pct(gpu['ours']['train_acc']['pixel']['mean'])}%) agree with these "
          f"({pct(cpu['ours']['train_acc']['pixel']['mean'])}%; every seed "
          f"{word(cpu_all, 'above', 'below')} the floor on all three, argmax "
          f"{seed_range(cpu['ours']['cases']['argmax'])}%), NAP above the floor in "
          f"{number_word(sum(gpu['ours']['learned_all']))} seeds of "
          f"{number_word(len(gpu['ours']['learned_all']))} and MTE in "
          f"{number_word(sum(mte['ours']['learned_all']))} (its three seeds at train >= 80); "
          f"d = 64; at d = 128 the claim holds.")


def n128_d64_cpu(r: Results) -> str:
  seeds = lambda arch, lr: rep.seeds_lib.best_per_seed(rep.n128_d64_curves(r, arch, lr,
                                                                           "train_acc"))
  mean = lambda arch, lr, metric="train_acc": 100 * rep.seeds_lib.pixel(
      rep.n128_d64_curves(r, arch, lr, metric))["mean"]
  nap, bert, mte = seeds("nap", 2.19e-4), seeds("bert", 2.43e-3), seeds("mte", 2.43e-3)
  theirs_bert, theirs_nap = rep.authors_d64(r, "bert", 2.43e-3), rep.authors_d64(r, "nap", 2.19e-4)
  authors_json = "table3_first_token_n128_d64_seeds_authors.json"
  late = sorted(nap)[:2]
  later_than_all = max(late) < min(theirs_nap["seeds"])
  d128 = [p_test(r, f"{FIG5_GPU}/seeds.json", "nap", worse, "model.d_model=128", split)
          for worse in ("bert", "mte") for split in ("train_acc", "val_acc")]
  gpu = lambda arch: seed_report(r, f"{FIG5_GPU}/seeds.json", "model.d_model=64", arch)
  val = lambda table_row, arch: cite(r, "table3-reduced", table_row, arch)
  bimodal = [x for x in theirs_bert["seeds"] if x < 0.3]
  nap_mean, mte_mean = mean("nap", 2.19e-4), mean("mte", 2.43e-3)
  nap_val, mte_val = mean("nap", 2.19e-4, "val_acc"), mean("mte", 2.43e-3, "val_acc")
  argmax_above = lambda arch: sum(x > gpu(arch)["case_rule"]["threshold"]
                                  for x in gpu(arch)["ours"]["cases"]["argmax"])
  mte_argmax_above, nap_argmax_above = argmax_above("mte"), argmax_above("nap")
  neither_learns = not any(learns_all(r, f"{FIG5_GPU}/d64_{arch}", arch, {"model.d_model": 64})
                           for arch in ("mte", "nap"))
  return (f"consistent with headline (1) against BERT; d = 64. At the paper's N = 128, NAP's "
          f"mean {word(nap_mean > mean('bert', 2.43e-3), 'beats', 'trails')} BERT's by "
          f"{nap_mean - mean('bert', 2.43e-3):.0f} and "
          f"{nap_val - mean('bert', 2.43e-3, 'val_acc'):.0f}, each of NAP's "
          f"{number_word(len(nap))} seeds ({seed_range(nap)}%) "
          f"{word(min(nap) > max(bert), 'above', 'below')} BERT's best ({pct(max(bert))}%): "
          f"first case ({seed_range(bert)}% in all {number_word(len(bert))}; the authors' BERT "
          f"bimodal, {number_word(len(bimodal))} of {number_word(len(theirs_bert['seeds']))} at "
          f"{theirs(pct(min(theirs_bert['seeds'])), authors_json)}%). That is "
          f"{number_word(len(nap))} seeds at one rate (one seed) and d = 64, the paper's 10 x 5 "
          f"at d = 128. MTE at its best of the {number_word(3)} tried ({rate(2.43e-3)}; "
          f"{2.43e-3 / 2.19e-4:.0f} times NAP's) ties NAP on training ({mte_mean:.1f} vs "
          f"{nap_mean:.1f}%) and {word(mte_val < nap_val, 'trails', 'leads')} it by "
          f"{nap_val - mte_val:.0f} at N/2 ({mte_val:.1f} vs {nap_val:.1f}%), the paper's "
          f"direction ({val('paper, validated at N/2', 'MTE')} vs "
          f"{val('paper, validated at N/2', 'NAP')}%). Bimodal (NAP "
          f"{' / '.join(pct(x) for x in nap)}%, MTE {' / '.join(pct(x) for x in mte)}%), "
          f"{number_word(len(nap))} seeds; {number_word(len(late))} of our NAP seeds "
          f"{word(later_than_all, 'later', 'earlier')} than all "
          f"{number_word(len(theirs_nap['seeds']))} of the authors' "
          f"({' and '.join(pct(x) for x in late)}% at 3200), our mean ({nap_mean:.1f}%) "
          f"{word(nap_mean < 100 * theirs_nap['pixel']['mean'], 'below', 'above')} theirs "
          f"({theirs(pct(theirs_nap['pixel']['mean']), authors_json)}%, "
          f"{theirs(str(len(theirs_nap['seeds'])), authors_json)} seeds; d = 64). Superseded "
          f"(two sections above): at d = 64 with {len(gpu('mte')['ours']['learned_all'])} seeds "
          f"MTE "
          f"{word(mte_argmax_above == 0, 'above', 'below')} the floor in no seed, NAP in all "
          f"{number_word(nap_argmax_above)} (neither "
          f"{word(not neither_learns, 'fails', 'learns')} all three); at d = 128 NAP "
          f"{word(max(float(p) for p in d128) <= 0.05, 'leads', 'trails')} at p <= "
          f"{max(d128, key=float)}.")


REGULARISED = {"all-token case": ("table2_case_tokens_l2_reduced",
                                  "table2_case_tokens_dropout_reduced", "regularisation-table2"),
               "first-token case": ("table3_first_token_l2_reduced",
                                    "table3_first_token_dropout_reduced", "regularisation-table3"),
               "mode": ("table4_mode_l2_reduced", "table4_mode_dropout_reduced",
                        "regularisation-table4")}


def regularisation(r: Results) -> str:
  scores = {}
  for task, (l2, dropout, _) in REGULARISED.items():
    archs, scores[task] = regularization_scores([r.json(f"{l2}/summary.json"),
                                                     r.json(f"{dropout}/summary.json")])
  gains = {(task, row, split, arch): 100 * (cells[(split, row)][arch][0]
                                            - cells[(split, "unregularised")][arch][0])
           for task, cells in scores.items() for row in REGULARIZERS.values()
           for split in ("train", "val") for arch in archs}
  the_gain = ("mode", "with dropout", "train", "max")
  rest = max(g for key, g in gains.items() if key != the_gain)
  above = sum(g > 0 for g in gains.values())
  bigger = sum(g > rest for g in gains.values())
  counts = rep.regularisation_counts(r)
  entries = re.findall(r"\d+", counts[0])[0]
  smallest = re.search(r"in (\d+) of", counts[1]).group(1)
  mode = scores["mode"]
  table = lambda key, row, arch: paper(r, REGULARISED[key][2], row, arch).split(" ")[0]
  cited = lambda key, row, arch: quote(table(key, row, arch),
                                       r.json(PAPERS)["sources"][REGULARISED[key][2]])
  names = [ARCH_NAMES[a] for a in archs]
  ours_cost = [100 * (scores["all-token case"][("train", "unregularised")][a][0]
                      - scores["all-token case"][("train", "with dropout")][a][0]) for a in archs]
  paper_cost = [float(table("all-token case", "paper, train, unregularised", name))
                - float(table("all-token case", "paper, train, with dropout", name))
                for name in names]
  source2 = r.json(PAPERS)["sources"]["regularisation-table2"]
  sum_val = scores["all-token case"]
  worst = lambda row: min(sum_val[("val", row)], key=lambda a: sum_val[("val", row)][a][0])
  sum_worst = all(worst(row) == "sum" for row in ("unregularised", *REGULARIZERS.values()))
  helps = above < len(gains) / 2 and bigger == 1 and rest < 2  # (1): a gain is rare and small
  return (f"{word(helps, 'reproduced', 'not reproduced')}, at reduced scale. (1) of the "
          f"{entries} (3 tasks x 6 models x 2 regularisers), {above} are "
          f"{word(above > 0, 'above', 'below')} their baseline, {number_word(bigger - 1)} by more "
          f"than {rest:.1f} except max with dropout on the mode task "
          f"({pct(mode[('train', 'unregularised')]['max'][0])} -> "
          f"{pct(mode[('train', 'with dropout')]['max'][0])}%, the {number_word(1)} gain the "
          f"paper reports too: {cited('mode', 'paper, train, unregularised', 'max')} -> "
          f"{cited('mode', 'paper, train, with dropout', 'max')}%). Dropout costs "
          f"{min(ours_cost):.0f}-{max(ours_cost):.0f} (the paper: "
          f"{quote(f'{min(paper_cost):.0f}', source2)}-{quote(f'{max(paper_cost):.0f}', source2)}"
          f"); L2 at 1e-4. (2) smaller of our {number_word(2)} values in {smallest} of the "
          f"{entries}. (3) {supported(sum_worst, 'Sum worst in every row')} "
          f"({pct(sum_val[('val', 'unregularised')]['sum'][0])}%, "
          f"{pct(sum_val[('val', 'with dropout')]['sum'][0])}%), headline (3), the paper's "
          f"{cite(r, 'regularisation-table2', 'paper, validation, unregularised', 'sum')}% (Fig. "
          f"3 above). 800-1000 steps at d = 32.")


def fig5_reduced(r: Results) -> str:
  w = "fig5_first_token_reduced"
  config = r.json(f"{w}/config.json")
  ds = config["sweep"]["values"]
  weak = {(a, d): min(rep.case_pixel(r, w, a, {"model.d_model": d})[1])
          for a in ARCH_NAMES for d in ds}
  none_learns = max(weak.values()) < rep.seeds_lib.CASES_LEARNED
  strongest = max(weak, key=weak.get)[0]
  return (f"partly. (1) first case and (2) sum nothing else hold; (3) only NAP and max learn all "
          f"three is {word(none_learns, 'not reproduced', 'reproduced')}: no cell "
          f"{word(none_learns, 'learns', 'fails')} all three (every weakest case "
          f"{word(max(weak.values()) < 0.1, 'below', 'above')} 10%, max the "
          f"{word(strongest == 'max', 'highest', 'lowest')} at "
          f"{' / '.join(weakest(r, w, 'max', {'model.d_model': d}) for d in ds)}%): "
          f"{config['train']['num_steps']} steps at d <= {max(ds)} (Table 3 above). d = 128 "
          f"(Table 3 / Fig. 5 above), (3) holds.")


def fig7_mode(r: Results) -> str:
  w = "fig7_mode_reduced"
  config = r.json(f"{w}/config.json")
  chance = 1 / config["task"]["vocab_size"]
  best = rep.best_over_points(r, w, "max", "train")
  sum_every = min(r.best(w, f"sum model.d_model={d}") for d in config["sweep"]["values"]) >= 0.9
  return (f"{word(sum_every and best < 2 * chance, 'reproduced', 'not reproduced')} "
          f"qualitatively. (1) sum; (2) max cannot ({100 * best:.0f}%, chance "
          f"{100 * chance:.0f}%). The paper's 3200 steps, ~99%.")


def fig16_vocab(r: Results) -> str:
  w = "fig16_mode_vocab_reduced"
  config = r.json(f"{w}/config.json")
  n = config["task"]["seq_len"]
  best = lambda arch, s: r.best(w, f"{arch} task.vocab_size={s}")
  seeds = lambda lr, metric="train_acc": rep.seeds_lib.best_per_seed(
      r.sweep(w).seeds("nap", metric, lr, {"task.vocab_size": 2}))
  others = [100 * best(a, 2) for a in ("bert", "mte", "non", "sum")]
  guess = {s: synthetic.mode_guess_rate(n, s) for s in (2, 16)}
  max_fails = all(best("max", s) < guess[s] + 0.1 for s in (2, 16))
  rates = sorted(config["learning_rates"], reverse=True)
  low = max(max(seeds(lr)) for lr in rates[1:])
  attention16 = {a: best(a, 16) for a in ("bert", "mte", "nap", "non")}
  steps_at_2 = config["train"]["num_steps"] * 2 // config["sweep"]["steps_reference"]
  return (f"partly reproduced. (1) Max {word(max_fails, 'fails', 'learns')} at every S "
          f"({pct(best('max', 2))}% at S = 2 to {pct(best('max', 16))}% at S = 16, the paper's "
          f"{cite(r, 'fig16-vocab', 'S = 2, paper', 'max')} to "
          f"{cite(r, 'fig16-vocab', 'S = 16, paper', 'max')}; the guess {pct(guess[2])}% and "
          f"{pct(guess[16])}%) {word(max_fails, 'holds', 'fails')}. (2) NAP at S = 2 partly: "
          f"{number_word(2)} tokens; NAP reaches {cite(r, 'fig16-vocab', 'S = 2, paper', 'NAP')}%"
          f" and {cite_text(r, 'nap.table5.s2.nap.validation')}% (Table 5). Ours: the base rate "
          f"({pct(guess[2])}%) only at the highest rate "
          f"({rates[0]:g}: {seed_range(seeds(rates[0]))}%, mean "
          f"{cell_mean(r, w, 'nap', rates[0], {'task.vocab_size': 2})}%, validation "
          f"{cell_mean(r, w, 'nap', rates[0], {'task.vocab_size': 2}, 'val_acc')}%), near it (at "
          f"most {pct(low)}%) at {rates[1]:g} and {rates[2]:g}, the others "
          f"{min(others):.0f}-{max(others):.0f}%. After {steps_at_2} steps (the paper's 800), "
          f"{config['num_seeds']} seeds at {len(rates)} rates, a higher rate, NAP to 100%. (3) "
          f"at S = 16 NAP best attention ({pct(attention16['nap'])}%) but sum "
          f"{word(best('sum', 16) > attention16['nap'], 'leads', 'trails')}; (at the paper's 400 "
          f"S steps, 5 seeds: not reproduced at N = 32, d = 32, NAP beats, BERT beats NAP).")


# The papers' Table 5 rows (S = N and 2N at N = 128), train / validation.
TABLE5_N = "paper, S = 128 = N (N = 128): train / validation"
TABLE5_2N = "paper, S = 256 = 2N: train / validation"


def table5_cells(r: Results, s: int, steps: str = ""):
  """Per arch the cells of a Table 5 run (S = s; ``steps`` "_400s" for the 400 S run)."""
  return rep.seed_cells(r, f"table5_mode_vocab_n32_s{s}{steps}/seeds.json",
                        f"task.vocab_size={s}")


def max_lowest(cells: dict) -> bool:
  """Max pooling's best is far below every other arch's: at most half of the next lowest."""
  best = {arch: rep.best_pixel(arch_cells, "train_acc") for arch, arch_cells in cells.items()}
  return 2 * best["max"] <= min(x for arch, x in best.items() if arch != "max")


def table5_75s(r: Results) -> str:
  n, two_n = table5_cells(r, 32), table5_cells(r, 64)
  train_seeds = lambda arch: rep.best_cell(two_n[arch])["ours"]["train_acc"]["seeds"]
  best = lambda cells, arch, split="train_acc": rep.best_pixel(cells[arch], split)
  path = "table5_mode_vocab_n32_s64/seeds.json"
  test = lambda better, worse: "{:g}".format(rep.one_sided_test(
      r.json(path), better, worse, "task.vocab_size=64")["train_acc"])
  row = lambda label, arch: cite(r, "table5-75s", label, arch, 0)
  nap_rate = rep.best_cell(n["nap"])["learning_rate"]
  gap = 100 * (best(n, "sum") - best(n, "nap"))
  leads = min(train_seeds("nap")) > max(max(train_seeds(a)) for a in ("mte", "bert"))
  behind_at_2n = best(two_n, "nap", "val_acc") < best(two_n, "sum", "val_acc")
  guess = synthetic.mode_guess_rate(32, 64)
  seeds = len(train_seeds("nap"))
  return (f"(3): {word(leads, 'partly', 'not')} reproduced. At S = 2N NAP "
          f"{word(leads, 'leads', 'trails')} in every seed ({seed_range(train_seeds('nap'))}% "
          f"against MTE's {seed_range(train_seeds('mte'))}% and BERT's "
          f"{seed_range(train_seeds('bert'))}%; one-sided p = "
          f"{one_value(test('nap', 'mte'), test('nap', 'bert'))}, the smallest {seeds} seeds "
          f"against {seeds}; validation {pct(best(two_n, 'nap', 'val_acc'))}% against "
          f"{pct(best(two_n, 'mte', 'val_acc'))} and {pct(best(two_n, 'bert', 'val_acc'))}), max "
          f"far {word(max_lowest(two_n), 'below', 'above')} every other "
          f"({pct(best(two_n, 'max'))}%, against {pct(guess)}%). But it does not "
          f"{word(best(two_n, 'nap') <= best(two_n, 'sum') + 0.01, 'beat', 'trail')} sum: level "
          f"({pct(best(two_n, 'nap'))} vs {pct(best(two_n, 'sum'))}%, p = {test('nap', 'sum')}) "
          f"and {word(behind_at_2n, 'behind', 'ahead')}"
          f" at 2N ({pct(best(two_n, 'nap', 'val_acc'))} vs {pct(best(two_n, 'sum', 'val_acc'))}"
          f"%). Sum falls from {pct(best(n, 'sum'))} to {pct(best(two_n, 'sum'))}% and NAP from "
          f"{pct(best(n, 'nap'))} to {pct(best(two_n, 'nap'))}% (the paper: sum "
          f"{row(TABLE5_N, 'sum')} to {row(TABLE5_2N, 'sum')}, NAP {row(TABLE5_N, 'NAP')} to "
          f"{row(TABLE5_2N, 'NAP')}). At S = N NAP {word(gap > 0, 'trails', 'leads')} sum by "
          f"{gap:.0f}, its best rate the top ({rate(nap_rate, decimal_from=0.01)}), at 75 S; the "
          f"paper's 400 S; the 400 S run below.")


def table5_400s(r: Results) -> str:
  n, two_n = table5_cells(r, 32, "_400s"), table5_cells(r, 64, "_400s")
  best = lambda cells, arch, split="train_acc": rep.best_pixel(cells[arch], split)
  val_pick = lambda arch: max(two_n[arch], key=lambda c: c["ours"]["val_acc"]["pixel"]["mean"])
  tried = lambda arch: sorted(c["learning_rate"] for c in two_n[arch])
  edge = lambda arch: word(val_pick(arch)["learning_rate"] == min(tried(arch)), "lowest",
                           "highest")
  pick = lambda arch: (f"{pct(val_pick(arch)['ours']['val_acc']['pixel']['mean'])}% at "
                       f"{rate(val_pick(arch)['learning_rate'])}")
  row = lambda label, arch, part: cite(r, "table5-75s", label, arch, part)
  paper_cell = lambda label, arch: [float(x) for x in paper(r, "table5-75s", label,
                                                            arch).split(" / ")]
  fall = lambda arch: 100 * (best(n, arch) - best(two_n, arch))
  source = r.json(PAPERS)["sources"]["table5-75s"]
  paper_fall = lambda arch: quote(
      f"{paper_cell(TABLE5_N, arch)[0] - paper_cell(TABLE5_2N, arch)[0]:.0f}", source)
  path = lambda s: f"table5_mode_vocab_n32_s{s}_400s/seeds.json"
  test = lambda s, better, worse, split: rep.p_value(rep.one_sided_test(
      r.json(path(s)), better, worse, f"task.vocab_size={s}")[split])
  seeds_of = lambda cells, arch: rep.best_cell(cells[arch])["ours"]["train_acc"]["seeds"]
  nap_above = all(min(seeds_of(two_n, "nap")) > max(seeds_of(two_n, a))
                  for a in ("mte", "non", "sum", "max"))
  bert_seeds = seeds_of(two_n, "bert")
  bert_beats = best(two_n, "bert") > best(two_n, "nap")
  above_n = all(min(seeds_of(n, "nap")) > max(seeds_of(n, a)) for a in ("bert", "mte", "non"))
  guess = [synthetic.mode_guess_rate(32, s) for s in (32, 64)]
  return (f"(3): {word(bert_beats, 'not reproduced', 'reproduced')} at this scale (N = 32, d = "
          f"32); {word(nap_above, 'partly', 'not')}. Bracket training only (the rule "
          f"above); the picks (sum {pick('sum')} and NON {pick('non')}, each its "
          f"{one_value(edge('sum'), edge('non'))} rate; MTE {pick('mte')}, its {edge('mte')}), "
          f"the comparisons below. At S = 2N NAP {word(nap_above, 'above', 'below')} in every "
          f"seed ({pct(best(two_n, 'nap'))} / {pct(best(two_n, 'nap', 'val_acc'))} against sum's "
          f"{pct(best(two_n, 'sum'))} / {pct(best(two_n, 'sum', 'val_acc'))}; the paper's "
          f"{row(TABLE5_2N, 'NAP', 0)} / {row(TABLE5_2N, 'NAP', 1)} against "
          f"{row(TABLE5_2N, 'sum', 0)} / {row(TABLE5_2N, 'sum', 1)}), sum falls "
          f"{fall('sum'):.0f} ({pct(best(n, 'sum'))} to {pct(best(two_n, 'sum'))}) and NAP "
          f"{fall('nap'):.0f} ({pct(best(n, 'nap'))} to {pct(best(two_n, 'nap'))}), the paper "
          f"{paper_fall('sum')} and {paper_fall('NAP')}. The 400 S run changed the 75 S picture, "
          f"not by length alone: {len(seeds_of(n, 'nap'))} seeds instead of "
          f"{len(table5_cells(r, 32)['nap'][0]['ours']['train_acc']['seeds'])}, rates that "
          f"bracket, which of the {number_word(3)}. But BERT "
          f"{word(bert_beats, 'beats', 'trails')} NAP at 2N ({pct(best(two_n, 'bert'))} / "
          f"{pct(best(two_n, 'bert', 'val_acc'))}, {number_word(sum(x >= 0.8 for x in bert_seeds))}"
          f" seeds of {number_word(len(bert_seeds))} above 80%; p = "
          f"{test(64, 'bert', 'nap', 'train_acc')} / {test(64, 'bert', 'nap', 'val_acc')}), at "
          f"{rate(rep.best_cell(two_n['bert'])['learning_rate'])}, where the authors' at d = 128,"
          f" N = 128 learns nothing "
          f"({cite_text(r, 'nap.authors-code.mode.s256.bert-at-8.1e-3')}% at S = 256; their best "
          f"{cite_text(r, 'nap.authors-code.mode.s256.bert-best-rate')}, "
          f"{row(TABLE5_2N, 'BERT', 0)}%). A rate "
          f"{number_word(round(rep.best_cell(two_n['bert'])['learning_rate'] / 7.29e-4))} times, "
          f"the {number_word(1)} better at 2N ({pct(best(n, 'bert'))} to "
          f"{pct(best(two_n, 'bert'))}). At S = N NAP ({pct(best(n, 'nap'))} / "
          f"{pct(best(n, 'nap', 'val_acc'))} against {pct(best(n, 'sum'))} / "
          f"{pct(best(n, 'sum', 'val_acc'))}, p = {test(32, 'sum', 'nap', 'train_acc')}; the "
          f"paper {row(TABLE5_N, 'NAP', 0)} against {row(TABLE5_N, 'sum', 0)}) "
          f"{word(above_n, 'ahead', 'behind')} of BERT, MTE and NON. Max far "
          f"{word(max_lowest(n) and max_lowest(two_n), 'below', 'above')} every other at both "
          f"({pct(best(n, 'max'))}% and {pct(best(two_n, 'max'))}%, against "
          f"{pct(guess[0])}% and {pct(guess[1])}%; the paper's {row(TABLE5_N, 'max', 0)} and "
          f"{row(TABLE5_2N, 'max', 0)}). NAP leads BERT at N = 128, d = 128, S = 256 "
          f"(102,400 steps: 2 cores; one H100, 10 minutes, 3 x 5, d = 64, Fig. 5, d = 128).")


def fig4(r: Results) -> str:
  w, at = "fig4_case_seq_len_reduced", {"task.seq_len": 64}
  low = lambda archs: sorted(float(weakest(r, w, a, at)) for a in archs)
  nap_max, others = low(("nap", "max")), low(("bert", "mte", "sum"))
  still = all(learns_all(r, w, a, at) for a in ("bert", "mte", "sum"))
  return (f"not with (3). {nap_max[0]:.0f}-{nap_max[-1]:.0f}% at N = 64, "
          f"{others[0]:.0f}-{others[-1]:.0f}% and NON {float(weakest(r, w, 'non', at)):.0f}%, "
          f"observation (3). At N = 64 BERT, MTE and sum still "
          f"{word(still, 'learn', 'fail')} all three (each "
          f"{word(min(others) >= 50, 'above', 'below')} 50%), so only NAP and max does not "
          f"{word(still, 'hold', 'fail')}; N = 256.")


def fig15(r: Results) -> str:
  w, depths = "fig15_first_token_depth_reduced", (1, 2, 4)
  config = r.json(f"{w}/config.json")
  cells = [c["metrics"]["train_acc"]["mean"] for c in r.json(f"{w}/summary.json")["cells"]
           if c["arch"] == "max"]
  best = [r.best(w, f"{a} model.num_layers={n}") for a in ("bert", "nap", "non") for n in depths]
  weak = [min(rep.case_pixel(r, w, a, {"model.num_layers": n})[1]) for a in ARCH_NAMES
          for n in depths]
  first = synthetic.case_shares(config["task"]["seq_len"], config["task"]["vocab_size"])[1]
  return (f"(3) ordering only. Max well {word(min(cells) > max(best), 'above', 'below')} the "
          f"rest ({100 * min(cells):.0f}-{100 * max(cells):.0f}%), as (3), but no model "
          f"{word(max(weak) < rep.seeds_lib.CASES_LEARNED, 'learns', 'fails')} all three (every "
          f"weakest {word(max(weak) < 0.1, 'below', 'above')} 10%). "
          f"{config['train']['num_steps']} steps at d = {config['model']['d_model']}; BERT, NAP, "
          f"NON at {100 * min(best):.0f}-{100 * max(best):.0f}%, first case alone: "
          f"{100 * first:.0f}% at N = {config['task']['seq_len']}, so (1) and (2); L = 1. Table "
          f"3 above; L = 1 to 64.")


def fig6_heads(r: Results) -> str:
  w = "fig6_first_token_heads_reduced"
  config = r.json(f"{w}/config.json")
  at = lambda arch, m: r.best(w, f"{arch} model.num_heads={m}")
  text = lambda arch, m: pct(at(arch, m))
  lead = 100 * (at("mte", 16) - at("nap", 16))
  bert_up_to_4 = at("bert", 4) > at("bert", 1) and at("bert", 16) < at("bert", 4)
  return (f"partly. MTE ({text('mte', 1)} -> {text('mte', 4)} -> {text('mte', 16)}%); BERT 1 to "
          f"4 ({text('bert', 1)} -> {text('bert', 4)}%), not 4 to 16 ({text('bert', 16)}%), so "
          f"the claim {word(bert_up_to_4, 'holds', 'fails')} up to 4 (head width "
          f"{config['model']['d_model'] // 4}). NAP from 1 to 4; at 4 BERT "
          f"{word(at('bert', 4) > at('nap', 4), 'leads', 'trails')} it ({text('bert', 4)} vs "
          f"{text('nap', 4)}%) and at 16 MTE {word(lead > 0, 'leads', 'trails')} by {lead:.0f}. "
          f"Table 3 above (d <= 64, N = 32, <= 1500).")


def fig13(r: Results) -> str:
  w, rates = "fig13_case_batch_reduced", (0.027, 0.0081, 0.00243)
  batches = (8, 32, 128)
  value = lambda arch, batch, lr: cell_value(r, w, arch, lr, {"train.batch_size": batch})
  cell = lambda arch, batch, lr: pct(value(arch, batch, lr))
  best_at = lambda arch, batch: max(value(arch, batch, lr) for lr in rates)
  spread = lambda arch, batch: 100 * (best_at(arch, batch)
                                      - min(value(arch, batch, lr) for lr in rates))
  top = max(rates)
  # Claim (1), an arch that shows it: its top rate fails at batch 8 (5 points or more below
  # its best there) and recovers at batch 128 (5 points or more above its batch-8 value).
  shows = {a: (best_at(a, 8) - value(a, 8, top) >= 0.05
               and value(a, 128, top) - value(a, 8, top) >= 0.05) for a in ARCH_NAMES}
  held = [a for a in ARCH_NAMES if shows[a]]
  bert_high = summary_cell(r, w, "bert", top, {"train.batch_size": 8})["metrics"]
  fails = lambda arch, batch: word(not shows[arch] or value(arch, batch, top) < best_at(arch, batch)
                                   - 0.05, "fails", "learns")
  weak = {a: float(weakest(r, w, a, {"train.batch_size": 128})) for a in ARCH_NAMES}
  max_rates = [max(rates, key=lambda lr, b=b: value("max", b, lr)) for b in batches]
  return (f"(1) {verdict_word(len(held), len(ARCH_NAMES))} reproduced "
          f"({' and '.join(ARCH_NAMES[a] for a in held)} only), (2) not. Claim (1): at {top:g} "
          f"BERT {fails('bert', 8)} at batch 8 and 32 ({cell('bert', 8, top)}%, "
          f"{cell('bert', 32, top)}%), second best at 128 ({cell('bert', 128, top)}%), MTE "
          f"{fails('mte', 8)} at batch 8 ({cell('mte', 8, top)}%), best at 128 "
          f"({cell('mte', 128, top)}%). The other {number_word(len(ARCH_NAMES) - len(held))} do "
          f"not. The highest rate at batch 8 (NON "
          f"{cell('non', 8, top)}%, against {cell('non', 8, 0.0081)}% at 0.0081 and "
          f"{cell('non', 8, 0.00243)}% at 0.00243; sum {cell('sum', 8, top)}%, within "
          f"{at_most(100 * (best_at('sum', 8) - value('sum', 8, top)))}), at batch 128 at 0.00243 "
          f"({cell('non', 128, 0.00243)}% and {cell('sum', 128, 0.00243)}%, BERT's "
          f"{cell('bert', 128, 0.00243)}% and MTE's {cell('mte', 128, 0.00243)}%) from 200 "
          f"updates. NAP: at {top:g} {cell('nap', 8, top)}% and {cell('nap', 32, top)}% at batch "
          f"8 and 32 (best at 32), at 128 ({cell('nap', 128, top)}%, where 0.00243 and 0.0081 give "
          f"{one_value(cell('nap', 128, 0.00243), cell('nap', 128, 0.0081))}%). Max "
          f"({max_rates[0]:g} at batch 8 and 32, {max_rates[2]:g} at 128), at batch 8 and 32 its "
          f"{number_word(len(rates))} rates within "
          f"{at_most(max(spread('max', batch) for batch in (8, 32)))}. So it "
          f"{word(bool(held), 'holds', 'fails')} for {number_word(len(held))} of the "
          f"{number_word(len(ARCH_NAMES))} on this {len(rates)}-rate grid. 200 updates, batch "
          f"128 (the table above): ({weak['max']:.1f}%, {weak['nap']:.1f}%, {weak['mte']:.1f}%), "
          f"{one_value(*(f'{weak[a]:.1f}' for a in ('bert', 'non')))}%, sum {weak['sum']:.1f}%, "
          f"{word(weak['sum'] < 50, 'below', 'above')} learned. BERT too high "
          f"{fails('bert', 8)} at batch 8, first case ("
          + " against ".join(pct(bert_high[f"case_acc_{case}"]["mean"], 0)
                             for case in ("first", "argmin"))
          + f"% and {pct(bert_high['case_acc_argmax']['mean'], 0)}%), not an amplified "
          f"{number_word(1)}.")


VERDICTS = (
    Verdict("fig3", "**Verdict: partly reproduced, qualitatively.**", fig3),
    Verdict("pooling", "**Verdict: reproduced:** softmax attention outputs shrink", pooling),
    Verdict("unselectable", "**Verdict: reproduced.** Without LayerNorm, unselectable keys",
            unselectable),
    Verdict("unselectable-lm", "**Verdict: not reproduced in size.**", unselectable_lm),
    Verdict("explaining-away", "**Verdict: the theorem holds; the size of the effect is not "
            "reproduced.**", explaining_away),
    Verdict("albert", "**Verdict: the pipeline runs end to end;", albert),
    Verdict("finetune", "**Verdict: not reproduced at this scale; no scheme is better.**",
            finetune),
    Verdict("majority", "**Verdict: reproduced for the comparison the authors' code ran;",
            majority),
    Verdict("mixing", "**Verdict.** The paper's main finding carries over to MiniLM", mixing),
    Verdict("table4-mode", "**Verdict: the headline finding is reproduced; BERT is not, at this "
            "scale.**", table4_mode),
    Verdict("table1", "**Verdict: partly reproduced.** Dropping warm-up and clipping", table1),
    Verdict("fig5-gpu", "**Verdict: reproduced at d = 128, the paper's setting; partly at d = "
            "64.**", fig5_gpu),
    Verdict("table3-reduced", "**Verdict: not reproduced at our scale.** Max pooling does the "
            "first-token task best", table3_reduced),
    Verdict("n128-d64", "**Verdict: superseded by the GPU run above**", n128_d64_superseded),
    Verdict("n128-d64-cpu", "**Verdict: consistent with headline (1) against BERT;", n128_d64_cpu),
    Verdict("fig7", "**Verdict: reproduced qualitatively.** (1) Sum pooling, with the right prior",
            fig7_mode),
    Verdict("regularisation", "**Verdict: reproduced, at reduced scale.** (1) Regularisation",
            regularisation),
    Verdict("fig5-reduced", "**Verdict: partly.** Observations (1) every model reaches the",
            fig5_reduced),
    Verdict("fig4", "**Verdict: consistent with the trend, not with (3) as stated.**", fig4),
    Verdict("fig16", "**Verdict: partly reproduced.** (1) Max pooling fails at every S",
            fig16_vocab),
    Verdict("table5-75s", "**Verdict for (3): partly reproduced.** At S = 2N NAP leads",
            table5_75s),
    Verdict("table5-400s", "**Verdict for (3), \"NAP outperforms all others when S exceeds the "
            "training length\": not", table5_400s),
    Verdict("fig15", "**Verdict: not tested at this scale; (3) consistent in its ordering only.**",
            fig15),
    Verdict("fig6", "**Verdict: partly.** More heads help MTE", fig6_heads),
    Verdict("fig13", "**Verdict: (1) partly reproduced (BERT and MTE only), (2) not.**", fig13),
)
