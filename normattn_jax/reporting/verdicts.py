"""REPRODUCTION.md's verdict paragraphs, number by number.

A verdict paragraph (one that opens with ``**Verdict``) has a spec here (``VERDICTS``): the
numbers it must hold, each as the document writes it, of three kinds. Ours are computed from the
files under ``results/``; the papers' come from ``PAPERS``, the one table of the papers' values;
the rest are ``literals``, settings and labels ("d = 128", "(3)", "5 seeds") that no file holds.
The check compares the numbers found in the paragraph with the spec's, as multisets: a number
changed, added or dropped anywhere in the paragraph is a difference. ``experiments/
mutate_verdicts.py`` measures how many of the verdicts' numbers the check catches.
"""
from __future__ import annotations

import collections
import dataclasses
import re
from typing import Callable

import numpy as np

from normattn_jax.reporting import reproduction as rep
from normattn_jax.reporting.reproduction import ARCH_NAMES, Results, pct, rate
from normattn_jax.reporting.tables import REGULARIZERS, regularization_scores

# A number as the document writes it: 1,000; 94.3; 2.19e-4; 0.027; with its unit, 2.5M, 414K, 4x.
# A digit glued to a letter, a dot, a caret or a slash before it (L1, d128, .json, 0.3^7, N/2) is
# part of a name or a power.
NUMBER = re.compile(r"(?<![\w.^/])(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)[KMx]?(?![\w])")
CODE = re.compile(r"`[^`]*`")
PARAGRAPH = re.compile(r"\n[ \t]*\n")
VERDICT_OPENING = "**Verdict"

# The papers' values, as the papers print them: "tables" holds the papers' rows of the
# document's fenced tables (``{table id: {row label: {column: value}}}``, checked against the
# document by ``paper_row_problems``), "text" the values quoted in prose only.
PAPERS = "papers.json"


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One verdict paragraph: found by its ``opening`` (its first words), holding exactly the
  numbers ``numbers(results)`` (ours and the papers') and ``literals`` (space-separated)."""
  id: str
  opening: str
  numbers: Callable[[Results], list[str]]
  literals: str = ""

  def expected(self, results: Results) -> collections.Counter:
    return collections.Counter(list(self.numbers(results)) + self.literals.split())


def paper(r: Results, table: str, row: str, column: str) -> str:
  """A paper's value in one of its rows of a fenced table."""
  return r.json(PAPERS)["tables"][table][row][column]


def paper_text(r: Results, key: str) -> str:
  """A paper's value that the document quotes in prose only."""
  return r.json(PAPERS)["text"][key]


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


def numbers_in(paragraph: str) -> list[str]:
  """The numbers of a paragraph, code spans (paths, names) left out."""
  return NUMBER.findall(CODE.sub(" ", paragraph))


def paragraphs(document: str) -> list[str]:
  return [p.strip() for p in PARAGRAPH.split(document) if p.strip()]


def verdict_paragraphs(document: str) -> list[str]:
  """Every paragraph that opens with ``**Verdict``."""
  return [p for p in paragraphs(document) if p.startswith(VERDICT_OPENING)]


def paragraph_of(document: str, opening: str) -> str | None:
  """The one paragraph that opens with ``opening`` (whitespace aside), or None."""
  want = " ".join(opening.split())
  found = [p for p in paragraphs(document) if " ".join(p.split()).startswith(want)]
  return found[0] if len(found) == 1 else None


def problems(document: str, results: Results, verdicts=None) -> list[str]:
  """Each paper's row that differs from ``PAPERS``, and each verdict whose paragraph is missing
  or whose numbers differ from its spec's."""
  out = paper_row_problems(document, results)
  for verdict in VERDICTS if verdicts is None else verdicts:
    paragraph = paragraph_of(document, verdict.opening)
    if paragraph is None:
      out.append(f"verdict {verdict.id}: no one paragraph opens with {verdict.opening!r}")
      continue
    try:
      expected = verdict.expected(results)
    except (OSError, KeyError, ValueError, IndexError, StopIteration) as err:
      out.append(f"verdict {verdict.id}: its files cannot be read: {type(err).__name__}: {err}")
      continue
    found = collections.Counter(numbers_in(paragraph))
    extra, missing = found - expected, expected - found
    if extra or missing:
      out.append(f"verdict {verdict.id}: the paragraph has {sorted(extra.elements())} where the "
                 f"files, the papers' table and the literals give {sorted(missing.elements())}")
  return out


def check(document: str, results: Results) -> list[str]:
  """Everything ``reproduction.check`` finds, and every verdict whose numbers differ."""
  return rep.check(document, results) + problems(document, results)


# ----- the numbers of ours, by source -----

def summary_cell(r: Results, workdir: str, arch: str, lr: float, params: dict | None = None):
  """One cell of a sweep's ``summary.json``: an arch at a learning rate (to 1%) and point."""
  cell = rep.cell_at(rep.seeds_lib.point_cells(r.json(f"{workdir}/summary.json"), arch, params),
                     lr)
  if cell is None:
    raise KeyError(f"{workdir}: no cell of {arch!r} at lr {lr:g} and {params or {}}")
  return cell


def cell_mean(r: Results, workdir: str, arch: str, lr: float, params: dict | None = None,
              metric: str = "train_acc") -> str:
  """A cell's pixel mean (the mean over seeds at its best over training), in %."""
  return pct(summary_cell(r, workdir, arch, lr, params)["metrics"][metric]["mean"])


def weakest(r: Results, workdir: str, arch: str, params: dict | None = None) -> str:
  """The weakest case of an arch's best cell (``reproduction.case_pixel``), in %."""
  return pct(min(rep.case_pixel(r, workdir, arch, params)[1]))


def case_means(r: Results, workdir: str, arch: str, params: dict | None = None) -> list[str]:
  """The three case means of an arch's best cell, in %, and its learning rate."""
  lr, means = rep.case_pixel(r, workdir, arch, params)
  return [pct(m) for m in means] + [rate(lr)]


def seed_report(r: Results, path: str, point: str, arch: str) -> dict:
  """An arch's best cell (mean training accuracy) in a ``compare_seeds`` report."""
  return rep.best_cell(rep.seed_cells(r, path, point)[arch])


def seed_range(values, digits: int = 1) -> list[str]:
  """A range of per-seed values as the document writes it: its lowest and highest, in %."""
  return [pct(min(values), digits), pct(max(values), digits)]


def one_value(*values: str) -> str:
  """One number the document gives for several values ("0.00243 and 0.0081 give 94.9%"): the
  value, or, where they differ, all of them joined, which no paragraph holds."""
  return values[0] if len(set(values)) == 1 else "|".join(values)


def p_test(r: Results, path: str, better: str, worse: str, point: str, split: str = "train_acc",
           source: str = "ours") -> str:
  return rep.p_value(rep.one_sided_test(r.json(path), better, worse, point, source)[split])


# ----- the specs -----

FIG5_GPU = "fig5_first_token_gpu"


def fig5_gpu(r: Results) -> list[str]:
  seeds_json = f"{FIG5_GPU}/seeds.json"
  at = lambda d: f"model.d_model={d}"
  nap128 = seed_report(r, seeds_json, at(128), "nap")["ours"]
  tests = [p_test(r, seeds_json, "nap", worse, at(128), split)
           for worse in ("bert", "mte", "non", "sum") for split in ("train_acc", "val_acc")]
  pixels = lambda d, arch: rep.case_pixel(r, f"{FIG5_GPU}/d{d}_{arch}", arch, {"model.d_model": d})
  weak64 = {a: min(pixels(64, a)[1]) for a in ARCH_NAMES}
  weak128_others = max(min(pixels(128, a)[1]) for a in ARCH_NAMES if a not in ("nap", "max"))
  mte64 = seed_report(r, seeds_json, at(64), "mte")
  nap64 = seed_report(r, seeds_json, at(64), "nap")
  mte64_cases = pixels(64, "mte")[1]
  authors_nap64 = rep.fig5_authors_cell(r, 64, "nap")
  return ([*case_means(r, f"{FIG5_GPU}/d128_nap", "nap", {"model.d_model": 128}),
           *case_means(r, f"{FIG5_GPU}/d128_max", "max", {"model.d_model": 128}),
           pct(weak128_others),
           pct(nap128["train_acc"]["pixel"]["mean"]), pct(nap128["val_acc"]["pixel"]["mean"]),
           paper(r, "table3-reduced", "paper, train (N = 128)", "NAP"),
           paper(r, "table3-reduced", "paper, validated at N/2", "NAP"),
           *rep.same_cell_ps(rep.fig5_authors_cell(r, 128, "nap")),
           max(tests, key=float),
           pct(weak64["nap"]), pct(weak64["max"]),
           pct(max(v for a, v in weak64.items() if a not in ("nap", "max"))),
           pct(mte64["ours"]["train_acc"]["pixel"]["mean"]),
           pct(nap64["ours"]["train_acc"]["pixel"]["mean"]),
           p_test(r, seeds_json, "nap", "mte", at(64)),
           pct(mte64_cases[0]), pct(mte64_cases[2]),
           pct(nap64["ours"]["train_acc"]["pixel"]["mean"]),
           pct(authors_nap64["authors"]["train_acc"]["pixel"]["mean"]),
           rep.same_cell_ps(authors_nap64)[0], *fig5_gpu_seeds(r)])


def fig5_gpu_seeds(r: Results) -> list[str]:
  """The Fig. 5 verdict's seed-by-seed view: per-seed cases against the floor."""
  seeds_json = f"{FIG5_GPU}/seeds.json"
  cell = lambda d, arch: seed_report(r, seeds_json, f"model.d_model={d}", arch)
  cases = lambda d, arch, case: cell(d, arch)["ours"]["cases"][case]
  above = lambda d, arch: [i for i, ok in enumerate(cell(d, arch)["ours"]["learned_all"]) if ok]
  bert = cell(128, "bert")
  bert_seeds = sorted(bert["ours"]["train_acc"]["seeds"])
  theirs = rep.fig5_authors_cell(r, 128, "bert")
  non128 = above(128, "non")
  assert len(non128) == 1, non128
  non64 = above(64, "non")
  return [*seed_range(cases(128, "nap", "argmax")), *seed_range(bert_seeds[-4:]),
          *seed_range(cases(128, "bert", "argmax")),
          pct(bert["ours"]["train_acc"]["pixel"]["mean"]),
          pct(bert["ours"]["val_acc"]["pixel"]["mean"]),
          pct(theirs["authors"]["train_acc"]["pixel"]["mean"]),
          pct(theirs["authors"]["val_acc"]["pixel"]["mean"]),
          *rep.same_cell_ps(theirs),
          f"{100 * min(theirs['authors']['train_acc']['seeds']):.0f}",
          f"{100 * sum(bert_seeds[-4:]) / 4:.0f}",
          pct(max(cases(128, "mte", "argmax"))),
          pct(cases(128, "non", "argmin")[non128[0]]), pct(cases(128, "non", "argmax")[non128[0]]),
          *seed_range(cases(64, "nap", "argmax")),
          *seed_range([cases(64, "non", "argmax")[i] for i in non64]),
          *seed_range(cases(64, "max", "argmax")),
          rep.p_value(rep.seeds_lib.rank_test(np.asarray(cases(64, "nap", "argmax")),
                                              np.asarray(cases(64, "non", "argmax"))))]


def fig5_reduced(r: Results) -> list[str]:
  w = "fig5_first_token_reduced"
  return [weakest(r, w, "max", {"model.d_model": d}) for d in (16, 32)]


def fig4(r: Results) -> list[str]:
  w, at = "fig4_case_seq_len_reduced", {"task.seq_len": 64}
  low = lambda archs: sorted(float(weakest(r, w, a, at)) for a in archs)
  nap_max = low(("nap", "max"))
  others = low(("bert", "mte", "sum"))
  return [f"{nap_max[0]:.0f}", f"{nap_max[-1]:.0f}", f"{others[0]:.0f}", f"{others[-1]:.0f}",
          f"{float(weakest(r, w, 'non', at)):.0f}"]


def fig13(r: Results) -> list[str]:
  w, rates = "fig13_case_batch_reduced", (0.027, 0.0081, 0.00243)
  cell = lambda arch, batch, lr: cell_mean(r, w, arch, lr, {"train.batch_size": batch})
  spread = lambda arch, batch: (max(float(cell(arch, batch, lr)) for lr in rates)
                                - min(float(cell(arch, batch, lr)) for lr in rates))
  bert_high = summary_cell(r, w, "bert", 0.027, {"train.batch_size": 8})["metrics"]
  return [cell("bert", 8, 0.027), cell("bert", 32, 0.027), cell("bert", 128, 0.027),
          cell("mte", 8, 0.027), cell("mte", 128, 0.027),
          cell("non", 8, 0.027), cell("non", 8, 0.0081), cell("non", 8, 0.00243),
          cell("sum", 8, 0.027),
          cell("non", 128, 0.00243), cell("sum", 128, 0.00243), cell("bert", 128, 0.00243),
          cell("mte", 128, 0.00243),
          cell("nap", 8, 0.027), cell("nap", 32, 0.027), cell("nap", 128, 0.027),
          one_value(cell("nap", 128, 0.00243), cell("nap", 128, 0.0081)),
          *(weakest(r, w, a, {"train.batch_size": 128}) for a in ("max", "nap", "mte", "bert",
                                                                    "sum")),
          f"{max(float(cell('sum', 8, lr)) for lr in rates) - float(cell('sum', 8, 0.027)):.1f}",
          f"{max(spread('max', batch) for batch in (8, 32)):.1f}",
          *(pct(bert_high[f"case_acc_{case}"]["mean"], 0) for case in ("first", "argmin",
                                                                       "argmax"))]


def fig3(r: Results) -> list[str]:
  w, table = "fig3_reduced", "fig3-best"
  val = lambda arch: pct(rep.best_over_points(r, w, arch, "val"))
  paper_val = lambda name: paper(r, table, "paper, validated at N/2 = 64", name)
  bert16 = r.json(f"{w}/summary.json")["best"]["bert model.d_model=16"]["learning_rate"]
  return [val("sum"), paper_val("sum"), paper_val("NAP"), paper_val("BERT"), val("nap"),
          val("bert"), f"{bert16:g}"]


def unselectable_lm(r: Results) -> list[str]:
  summary = r.json("unselectable_lm/summary.json")
  seeds = {k: v["seeds"][0] for k, v in summary["variants"].items()}
  counted = lambda stage: rep.lm_counted(seeds["without_scaling"][stage]["attention_inputs"])
  trained, untrained = counted("trained")["mean_percent"], counted("init")["mean_percent"]
  assert all(t < u for t, u in zip(trained, untrained)) and trained.index(max(trained)) == 0
  theirs = [float(x) for x in r.json(PAPERS)["tables"]["unselectable-lm"][
      "w/o scaling (paper)"].values()]
  fewer = paper_text(r, "layernorm.lm.train-tokens") / summary["tokens_seen_per_model"]
  gap = lambda key: seeds["without_scaling"][key] - seeds["with_scaling"][key]
  return [f"{min(trained):.0f}", f"{max(trained):.0f}", f"{min(theirs):.0f}", f"{max(theirs):.0f}",
          f"{min(theirs):.0f}", f"{min(untrained):.0f}", f"{max(untrained):.0f}",
          str(summary["window"]), f"{round(fewer, -2):.0f}",
          one_value(f"{gap('final_train_loss'):.2f}", f"{gap('heldout_loss'):.2f}")]


def explaining_away(r: Results) -> list[str]:
  runs = r.json("explaining_away/explaining_away.json")
  share = pct(runs["UNAS"]["explained_away_fraction"], 0)
  return [share, f"{-runs['UNAS']['min_log_sum']:.0f}",
          paper_text(r, "dnas.fig1.explained-away-log-sum"), paper_text(r, "dnas.fig1.keys"),
          share, str(runs["args"]["seq_len"]), share]


def majority(r: Results) -> list[str]:
  result = r.json("majority/majority.json")
  v = {name: result["variants"][name]["steps_to_test_accuracy"] for name in rep.MAJORITY_VARIANTS}
  final = {name: result["variants"][name]["final"] for name in rep.MAJORITY_VARIANTS}
  with_, without, code = (v[name] for name in rep.MAJORITY_VARIANTS)
  ratios = [code[t]["seed_mean_curve"] / with_[t]["seed_mean_curve"] for t in ("0.5", "0.7", "0.8")]
  paired = [c / w for c, w in zip(code["0.5"]["per_seed"], with_["0.5"]["per_seed"])]
  assert all(with_[t]["seed_mean_curve"] == without[t]["seed_mean_curve"] for t in ("0.5", "0.7"))
  pairs = list(zip(without["0.8"]["per_seed"], with_["0.8"]["per_seed"]))
  crossing = re.findall(r"\d+(?:\.\d+)?x?", rep.majority_loss_crossing(r))
  history = r.jsonl("majority/history.jsonl")
  seeds = r.json("majority/config.json")["num_seeds"]
  first_loss = next(  # the paper's variant: the second of MAJORITY_VARIANTS
      row["step"] for row in sorted(history, key=lambda row: row["step"])
      if "train_loss" in row and sum(row["train_loss"][seeds:2 * seeds]) / seeds <= 0.45)
  text = r.json(PAPERS)["text"]
  steps = result["steps_run"]
  return [f"{min(ratios):.1f}", f"{max(ratios):.1f}x", f"{ratios[0]:.1f}x",
          f"{min(paired):.1f}", f"{max(paired):.1f}x", f"{ratios[1]:.1f}x", f"{ratios[2]:.1f}x",
          str(with_["0.9"]["reached"]), str(with_["0.9"]["of"]),
          str(with_["0.9"]["seed_mean_curve"]),
          f"{final['without_projection_code']['test_accuracy']['mean']:.2f}", str(steps),
          *text["layernorm.fig2.speed-up-50-70-80"],
          text["layernorm.fig2.without-accuracy-at-5000"],
          text["layernorm.fig2.steps"], text["layernorm.fig2.loss-speed-up"], *crossing[1:],
          *text["layernorm.fig2.loss-0.45-steps"], str(first_loss),
          f"{with_['0.8']['mean_over_reached'] - without['0.8']['mean_over_reached']:.0f}",
          str(sum(a < b for a, b in pairs)), str(sum(a > b for a, b in pairs)),
          str(min(with_["0.8"]["per_seed"])), str(max(with_["0.8"]["per_seed"])),
          str(without["0.9"]["seed_mean_curve"]), str(with_["0.9"]["seed_mean_curve"]),
          str(without["0.9"]["reached"]), str(with_["0.9"]["reached"]), str(with_["0.9"]["of"]),
          str(steps), one_value(*(f"{final[n]['test_accuracy']['mean']:.3f}"
                                  for n in ("with_projection", "without_projection"))),
          *re.findall(r"\d+", rep.majority_angle(r)),
          f"{final['with_projection']['query_angle']['mean']:.0f}", str(steps),
          f"{final['with_projection']['query_angle']['min']:.0f}",
          f"{final['without_projection_code']['query_angle']['mean']:.0f}",
          f"{final['without_projection']['query_angle']['mean']:.0f}",
          text["layernorm.fig3.late-angle"], f"{result['paper_steps'] // 1000}K",
          f"{result['paper_steps'] / steps:.0f}x"]


def albert(r: Results) -> list[str]:
  runs = r.json("albert_tiny/comparison.json")
  mlm = [runs[s]["mlm_accuracy"] for s in ("softmax", "dnas", "hnas")]
  layer1 = r.json("albert_tiny/hnas/summary.json")["hybrid_weights_per_head"][0]
  return [f"{100 * (max(mlm) - min(mlm)):.2f}",
          one_value(*(pct(runs[s]["sop_accuracy"], 2) for s in ("softmax", "dnas", "hnas"))),
          str(runs["softmax"]["eval_examples"]), str(runs["softmax"]["eval_examples"]),
          str(runs["hnas"]["steps"]), f"{min(layer1):.2f}"]


def finetune(r: Results) -> list[str]:
  runs = {label: r.json(f"finetune_genre/{run}/summary.json")["best"]["accuracy"]
          for label, run in rep.SCHEMES.items()}
  means = [x["mean"] for x in runs.values()]
  unas = runs["UNAS"]
  gap = lambda other: 100 * (unas["mean"] - runs[other]["mean"])
  in_se = lambda other: gap(other) / 100 / (unas["std_error"] ** 2
                                            + runs[other]["std_error"] ** 2) ** 0.5
  description = r.json("finetune_genre/softmax/summary.json")["task_description"]
  majority = float(re.search(r"majority (0\.\d+)", description).group(1))
  dev = re.search(r"(\d+) dev passages", description).group(1)
  best_single = max(max(x["per_seed"]) for x in runs.values())
  both = [label for label, x in runs.items() if max(x["per_seed"]) == best_single]
  assert both == ["UNAS", "DNAS"], both
  losses = rep.finetune_choices(r)[1].split(" is ")[1].split("-")
  return [pct(min(means)), pct(max(means)), pct(majority), *losses,
          f"{gap('DNAS'):.1f}", f"{gap('HNAS'):.1f}", f"{in_se('DNAS'):.1f}",
          f"{in_se('HNAS'):.1f}", pct(best_single), dev,
          f"{100 * r.json('albert_tiny/comparison.json')['softmax']['mlm_accuracy']:.0f}"]


def mixing(r: Results) -> list[str]:
  m, a = r.json("mixing/mixing.json"), r.json("mixing/mixing_authors.json")
  types = m["per_layer_token_type"]["ATTNRESLN-N"]
  rng = lambda xs: [f"{100 * min(xs):.0f}", f"{100 * max(xs):.0f}"]
  mean_moves = max(abs(m["overall"][k]["mean"] - a["overall"][k]["mean"])
                   for k in rep.MIXING_METHODS)
  assert 100 * mean_moves < 0.1, mean_moves
  layer_moves = lambda k: max(  # per layer and token type
      abs(x - y) for kind, ours in m["per_layer_token_type"][k].items()
      for x, y in zip(ours, a["per_layer_token_type"][k][kind]))
  tokens = one_value(*(str(v["tokens"]) for v in m["frequency_spearman"].values()))
  return [f"{100 * m['overall']['ATTN-N']['mean']:.0f}",
          f"{100 * m['overall']['ATTNRESLN-N']['mean']:.0f}",
          f"{m['expansion_rate']['mean']:.2f}",
          f"{100 * m['overall']['ATTNRESLN-N']['mean']:.0f}",
          *rng(types["[MASK]"]), *rng(types["normal"]), tokens, str(m["num_sequences"]),
          f"{100 * layer_moves('ATTNRESLN-N'):.1f}",
          f"{100 * max(layer_moves(k) for k in rep.MIXING_METHODS):.1f}"]


def table4_mode(r: Results) -> list[str]:
  w = "table4_mode_reduced"
  best = r.json(f"{w}/summary.json")["best"]
  chance = f"{100 / rep.seeds_lib.OurSweep.read(r.path(w)).config.task.vocab_size:.0f}"
  return [pct(r.best(w, "max")), chance, pct(r.best(w, "sum")), pct(r.best(w, "sum", "val")),
          pct(r.best(w, "bert")), rate(best["bert"]["learning_rate"]), chance,
          str(r.json(f"{w}/config.json")["train"]["num_steps"])]


def table1(r: Results) -> list[str]:
  w = "table1_ablation_reduced"
  stage = lambda k: r.best(w, f"bert ablation={k}")
  cost = sorted(100 * (stage(0) - stage(k)) for k in (3, 4))
  paper_cost = (float(paper(r, "table1-ablation", "paper, train", "BERT"))
                - float(paper(r, "table1-ablation", "paper, train", "+ GELU (= MTE)")))
  picks = [f"{r.json(f'{w}/summary.json')['best'][f'bert ablation={k}']['learning_rate']:g}"
           for k in (3, 4)]
  return [pct(stage(0)), pct(stage(1)), pct(stage(2)), f"{cost[0]:.1f}", f"{cost[-1]:.1f}",
          f"{paper_cost:.1f}", one_value(*picks)]


def case_shares(seq_len: int, vocab_size: int) -> list[str]:
  """How often each case occurs (argmin, first, argmax), in %: the argmin token is in a sequence
  with probability q = 1 - (1 - 1/V)^N, else the first token with q, else argmax."""
  q = 1 - (1 - 1 / vocab_size) ** seq_len
  return [pct(q), pct((1 - q) * q), pct((1 - q) ** 2)]


def table3_reduced(r: Results) -> list[str]:
  w32, w64 = "table3_first_token_reduced", "table3_first_token_d64"
  b32 = lambda arch, split="train": pct(r.best(w32, arch, split))
  b64 = lambda arch, split="train": pct(r.best(w64, arch, split))
  row = lambda arch: paper(r, "table3-reduced", "paper, train (N = 128)", arch)
  task = rep.seeds_lib.OurSweep.read(r.path(w32)).config.task
  nap64 = seed_report(r, f"{FIG5_GPU}/seeds.json", "model.d_model=64", "nap")
  lead = 100 * (r.best(w64, "nap") - r.best(w64, "bert"))
  return [b32("max"), b32("bert"), b32("nap"), b32("bert", "val"), b32("nap", "val"), b32("mte"),
          f"{lead:.0f}", b64("nap"), b64("bert"), b64("nap", "val"), b64("bert", "val"),
          b64("mte"), row("NAP"), row("BERT"), row("MTE"),
          *case_shares(int(task.seq_len), int(task.vocab_size)),
          paper_text(r, "nap.authors-code.first-token.d32.nap"),
          paper_text(r, "nap.authors-code.first-token.d32.bert"),
          *seed_range(nap64["ours"]["cases"]["argmax"])]


def n128_d64_superseded(r: Results) -> list[str]:
  nap64 = seed_report(r, f"{FIG5_GPU}/seeds.json", "model.d_model=64", "nap")
  cpu = rep.cell_at(rep.seed_cells(r, "table3_first_token_n128_d64_seeds.json")["nap"], 2.19e-4)
  return [pct(nap64["ours"]["train_acc"]["pixel"]["mean"]),
          pct(cpu["ours"]["train_acc"]["pixel"]["mean"]),
          *seed_range(cpu["ours"]["cases"]["argmax"])]


def n128_d64_cpu(r: Results) -> list[str]:
  seeds = lambda arch, lr: rep.seeds_lib.best_per_seed(rep.n128_d64_curves(r, arch, lr,
                                                                           "train_acc"))
  mean = lambda arch, lr, metric="train_acc": 100 * rep.seeds_lib.pixel(
      rep.n128_d64_curves(r, arch, lr, metric))["mean"]
  nap, bert, mte = seeds("nap", 2.19e-4), seeds("bert", 2.43e-3), seeds("mte", 2.43e-3)
  theirs_bert, theirs_nap = rep.authors_d64(r, "bert", 2.43e-3), rep.authors_d64(r, "nap", 2.19e-4)
  late = sorted(nap)[:2]
  d128 = [p_test(r, f"{FIG5_GPU}/seeds.json", "nap", worse, "model.d_model=128", split)
          for worse in ("bert", "mte") for split in ("train_acc", "val_acc")]
  val = lambda table_row, arch: paper(r, "table3-reduced", table_row, arch)
  return [f"{mean('nap', 2.19e-4) - mean('bert', 2.43e-3):.0f}",
          f"{mean('nap', 2.19e-4, 'val_acc') - mean('bert', 2.43e-3, 'val_acc'):.0f}",
          *seed_range(nap), pct(max(bert)), *seed_range(bert), pct(min(theirs_bert["seeds"])),
          rate(2.43e-3), f"{2.43e-3 / 2.19e-4:.0f}",
          f"{mean('mte', 2.43e-3):.1f}", f"{mean('nap', 2.19e-4):.1f}",
          f"{mean('nap', 2.19e-4, 'val_acc') - mean('mte', 2.43e-3, 'val_acc'):.0f}",
          f"{mean('mte', 2.43e-3, 'val_acc'):.1f}", f"{mean('nap', 2.19e-4, 'val_acc'):.1f}",
          val("paper, validated at N/2", "MTE"), val("paper, validated at N/2", "NAP"),
          *(pct(x) for x in nap), *(pct(x) for x in mte), *(pct(x) for x in late),
          f"{mean('nap', 2.19e-4):.1f}", pct(theirs_nap["pixel"]["mean"]), max(d128, key=float)]


REGULARISED = {"all-token case": ("table2_case_tokens_l2_reduced",
                                  "table2_case_tokens_dropout_reduced", "regularisation-table2"),
               "first-token case": ("table3_first_token_l2_reduced",
                                    "table3_first_token_dropout_reduced", "regularisation-table3"),
               "mode": ("table4_mode_l2_reduced", "table4_mode_dropout_reduced",
                        "regularisation-table4")}


def regularisation(r: Results) -> list[str]:
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
  counts = rep.regularisation_counts(r)
  entries, above = re.findall(r"\d+", counts[0])[:1] + re.findall(r"(\d+) are above", counts[0])
  smallest = re.search(r"in (\d+) of", counts[1]).group(1)
  mode = scores["mode"]
  table = lambda key, row, arch: paper(r, REGULARISED[key][2], row, arch).split(" ")[0]
  cost = lambda row_of: [row_of(arch) for arch in archs]
  ours_cost = cost(lambda a: 100 * (scores["all-token case"][("train", "unregularised")][a][0]
                                    - scores["all-token case"][("train", "with dropout")][a][0]))
  names = [ARCH_NAMES[a] for a in archs]
  paper_cost = cost(lambda a: float(table("all-token case", "paper, train, unregularised",
                                          names[archs.index(a)]))
                    - float(table("all-token case", "paper, train, with dropout",
                                  names[archs.index(a)])))
  sum_val = scores["all-token case"]
  return [entries, above, f"{rest:.1f}", pct(mode[("train", "unregularised")]["max"][0]),
          pct(mode[("train", "with dropout")]["max"][0]),
          table("mode", "paper, train, unregularised", "max"),
          table("mode", "paper, train, with dropout", "max"),
          f"{min(ours_cost):.0f}", f"{max(ours_cost):.0f}", f"{min(paper_cost):.0f}",
          f"{max(paper_cost):.0f}", smallest, entries,
          pct(sum_val[("val", "unregularised")]["sum"][0]),
          pct(sum_val[("val", "with dropout")]["sum"][0]),
          table("all-token case", "paper, validation, unregularised", "sum")]


def fig16_vocab(r: Results) -> list[str]:
  w = "fig16_mode_vocab_reduced"
  best = lambda arch, s: pct(r.best(w, f"{arch} task.vocab_size={s}"))
  seeds = lambda lr, metric="train_acc": rep.seeds_lib.best_per_seed(
      r.sweep(w).seeds("nap", metric, lr, {"task.vocab_size": 2}))
  others = [100 * r.best(w, f"{a} task.vocab_size=2") for a in ("bert", "mte", "non", "sum")]
  return [best("max", 2), best("max", 16),
          paper(r, "fig16-vocab", "S = 2, paper", "max"),
          paper(r, "fig16-vocab", "S = 16, paper", "max"),
          paper(r, "fig16-vocab", "S = 2, paper", "NAP"),
          paper_text(r, "nap.table5.s2.nap.validation"),
          *seed_range(seeds(0.027)), cell_mean(r, w, "nap", 0.027, {"task.vocab_size": 2}),
          cell_mean(r, w, "nap", 0.027, {"task.vocab_size": 2}, "val_acc"),
          pct(max(max(seeds(lr)) for lr in (0.0081, 0.00243))),
          f"{min(others):.0f}", f"{max(others):.0f}", best("nap", 16)]


# The papers' Table 5 rows (S = N and 2N at N = 128), train / validation.
TABLE5_N = "paper, S = 128 = N (N = 128): train / validation"
TABLE5_2N = "paper, S = 256 = 2N: train / validation"


def table5_cells(r: Results, s: int, steps: str = ""):
  """Per arch the cells of a Table 5 run (S = s; ``steps`` "_400s" for the 400 S run)."""
  return rep.seed_cells(r, f"table5_mode_vocab_n32_s{s}{steps}/seeds.json",
                        f"task.vocab_size={s}")


def table5_75s(r: Results) -> list[str]:
  n, two_n = table5_cells(r, 32), table5_cells(r, 64)
  seeds = lambda arch: seed_range(rep.best_cell(two_n[arch])["ours"]["train_acc"]["seeds"])
  best = lambda cells, arch, split: pct(rep.best_pixel(cells[arch], split))
  path = "table5_mode_vocab_n32_s64/seeds.json"
  test = lambda better, worse: "{:g}".format(rep.one_sided_test(
      r.json(path), better, worse, "task.vocab_size=64")["train_acc"])
  row = lambda label, arch: paper(r, "table5-75s", label, arch).split(" / ")[0]
  nap_rate = rep.best_cell(n["nap"])["learning_rate"]
  gap = 100 * (rep.best_pixel(n["sum"], "train_acc") - rep.best_pixel(n["nap"], "train_acc"))
  return [*seeds("nap"), *seeds("mte"), *seeds("bert"),
          one_value(test("nap", "mte"), test("nap", "bert")), best(two_n, "nap", "val_acc"),
          best(two_n, "mte", "val_acc"), best(two_n, "bert", "val_acc"),
          best(two_n, "nap", "train_acc"), best(two_n, "sum", "train_acc"), test("nap", "sum"),
          best(two_n, "nap", "val_acc"), best(two_n, "sum", "val_acc"),
          best(n, "sum", "train_acc"), best(two_n, "sum", "train_acc"),
          best(n, "nap", "train_acc"), best(two_n, "nap", "train_acc"),
          row(TABLE5_N, "sum"), row(TABLE5_2N, "sum"), row(TABLE5_N, "NAP"), row(TABLE5_2N, "NAP"),
          f"{gap:.0f}", rate(nap_rate, decimal_from=0.01)]


def table5_400s(r: Results) -> list[str]:
  n, two_n = table5_cells(r, 32, "_400s"), table5_cells(r, 64, "_400s")
  best = lambda cells, arch, split="train_acc": rep.best_pixel(cells[arch], split)
  val_pick = lambda arch: max(two_n[arch], key=lambda c: c["ours"]["val_acc"]["pixel"]["mean"])
  picks = [x for arch in ("sum", "non", "mte")
           for x in (pct(val_pick(arch)["ours"]["val_acc"]["pixel"]["mean"]),
                     rate(val_pick(arch)["learning_rate"]))]
  row = lambda label, arch: paper(r, "table5-75s", label, arch).split(" / ")
  fall = lambda arch: 100 * (best(n, arch) - best(two_n, arch))
  paper_fall = lambda arch: float(row(TABLE5_N, arch)[0]) - float(row(TABLE5_2N, arch)[0])
  path = lambda s: f"table5_mode_vocab_n32_s{s}_400s/seeds.json"
  test = lambda s, better, worse, split: rep.p_value(rep.one_sided_test(
      r.json(path(s)), better, worse, f"task.vocab_size={s}")[split])
  return [*picks, pct(best(two_n, "nap")), pct(best(two_n, "nap", "val_acc")),
          pct(best(two_n, "sum")), pct(best(two_n, "sum", "val_acc")),
          *row(TABLE5_2N, "NAP"), *row(TABLE5_2N, "sum"),
          f"{fall('sum'):.0f}", pct(best(n, "sum")), pct(best(two_n, "sum")),
          f"{fall('nap'):.0f}", pct(best(n, "nap")), pct(best(two_n, "nap")),
          f"{paper_fall('sum'):.0f}", f"{paper_fall('NAP'):.0f}",
          pct(best(two_n, "bert")), pct(best(two_n, "bert", "val_acc")),
          test(64, "bert", "nap", "train_acc"), test(64, "bert", "nap", "val_acc"),
          rate(rep.best_cell(two_n["bert"])["learning_rate"]),
          paper_text(r, "nap.authors-code.mode.s256.bert-at-8.1e-3"),
          paper_text(r, "nap.authors-code.mode.s256.bert-best-rate"), row(TABLE5_2N, "BERT")[0],
          pct(best(n, "bert")), pct(best(two_n, "bert")),
          pct(best(n, "nap")), pct(best(n, "nap", "val_acc")), pct(best(n, "sum")),
          pct(best(n, "sum", "val_acc")), test(32, "sum", "nap", "train_acc"),
          row(TABLE5_N, "NAP")[0], row(TABLE5_N, "sum")[0]]


def fig7_mode(r: Results) -> list[str]:
  return [f"{100 * rep.best_over_points(r, 'fig7_mode_reduced', 'max', 'train'):.0f}"]


def fig15(r: Results) -> list[str]:
  w, depths = "fig15_first_token_depth_reduced", (1, 2, 4)
  cells = [c["metrics"]["train_acc"]["mean"] for c in r.json(f"{w}/summary.json")["cells"]
           if c["arch"] == "max"]
  best = [r.best(w, f"{a} model.num_layers={n}") for a in ("bert", "nap", "non") for n in depths]
  return [f"{100 * min(cells):.0f}", f"{100 * max(cells):.0f}", f"{100 * min(best):.0f}",
          f"{100 * max(best):.0f}"]


def fig6_heads(r: Results) -> list[str]:
  w = "fig6_first_token_heads_reduced"
  at = lambda arch, m: pct(r.best(w, f"{arch} model.num_heads={m}"))
  lead = 100 * (r.best(w, "mte model.num_heads=16") - r.best(w, "nap model.num_heads=16"))
  return [at("mte", 1), at("mte", 4), at("mte", 16), at("bert", 1), at("bert", 4), at("bert", 16),
          at("bert", 4), at("nap", 4), f"{lead:.0f}"]


VERDICTS = (
    Verdict("fig3", "**Verdict: partly reproduced, qualitatively.**", fig3,
            literals="1 3 3 16 32 2 16 32 5.1"),
    Verdict("pooling", "**Verdict: reproduced:** softmax attention outputs shrink", lambda r: [],
            literals="1"),
    Verdict("unselectable", "**Verdict: reproduced.** Without LayerNorm, unselectable keys",
            lambda r: []),
    Verdict("unselectable-lm", "**Verdict: not reproduced in size.**", unselectable_lm,
            literals="0 8 8 1"),
    Verdict("explaining-away", "**Verdict: the theorem holds; the size of the effect is not "
            "reproduced.**", explaining_away, literals="1 1 2 1 1 1 2 4 2.6"),
    Verdict("albert", "**Verdict: the pipeline runs end to end;", albert,
            literals="2.5M 19 2 2 4 4 0.5 1 0.5 2"),
    Verdict("finetune", "**Verdict: not reproduced at this scale; no scheme is better.**", finetune,
            literals="100 3 1.10 4 2.5M 2"),
    Verdict("majority", "**Verdict: reproduced for the comparison the authors' code ran;", majority,
            literals="1 50 70 80 90 50 80 0.45 2 3 50 70 80 90 1 64 8 8"),
    Verdict("mixing", "**Verdict.** The paper's main finding carries over to MiniLM", mixing,
            literals="1 0.1 3 2"),
    Verdict("table4-mode", "**Verdict: the headline finding is reproduced; BERT is not, at this "
            "scale.**", table4_mode, literals="3200 7 1e-3"),
    Verdict("table1", "**Verdict: partly reproduced.** Dropping warm-up and clipping", table1,
            literals="2 600 32"),
    Verdict("fig5-gpu", "**Verdict: reproduced at d = 128, the paper's setting; partly at d = "
            "64.**", fig5_gpu, literals="128 64 128 3 5 5 64 64 3 64 5 5 128 5 5 64 5 3"),
    Verdict("table3-reduced", "**Verdict: not reproduced at our scale.** Max pooling does the "
            "first-token task best", table3_reduced,
            literals="32 64 128 128 3200 32 0.3 2.19e-4 64 1024 32 1e-6 128 128 128 64 32"),
    Verdict("n128-d64", "**Verdict: superseded by the GPU run above**", n128_d64_superseded,
            literals="64 5 10 2.19e-4 80 64 128"),
    Verdict("n128-d64-cpu", "**Verdict: consistent with headline (1) against BERT;", n128_d64_cpu,
            literals="1 64 128 64 10 5 128 3200 5 64 64 5 128"),
    Verdict("fig7", "**Verdict: reproduced qualitatively.** (1) Sum pooling, with the right prior",
            fig7_mode, literals="1 2 10 3200 99"),
    Verdict("regularisation", "**Verdict: reproduced, at reduced scale.** (1) Regularisation",
            regularisation, literals="1 3 6 2 1e-4 2 3 3 3 800 1000 32"),
    Verdict("fig5-reduced", "**Verdict: partly.** Observations (1) every model reaches the",
            fig5_reduced, literals="1 2 3 10 600 32 3 3 5 128 3"),
    Verdict("fig4", "**Verdict: consistent with the trend, not with (3) as stated.**", fig4,
            literals="3 64 3 64 50 256"),
    Verdict("fig16", "**Verdict: partly reproduced.** (1) Max pooling fails at every S",
            fig16_vocab,
            literals="1 2 16 2 2 5 0.027 0.0081 0.00243 150 800 3 3 100 3 16 400 5 32 32"),
    Verdict("table5-75s", "**Verdict for (3): partly reproduced.** At S = 2N NAP leads", table5_75s,
            literals="3 3 3 75 400 400"),
    Verdict("table5-400s", "**Verdict for (3), \"NAP outperforms all others when S exceeds the "
            "training length\": not", table5_400s,
            literals="3 32 32 75 80 128 128 256 128 128 256 102,400 2 10 3 5 64 5 128"),
    Verdict("fig15", "**Verdict: not tested at this scale; (3) consistent in its ordering only.**",
            fig15, literals="3 3 10 600 32 20 32 1 2 1 3 1 64"),
    Verdict("fig6", "**Verdict: partly.** More heads help MTE", fig6_heads,
            literals="1 4 4 16 4 8 1 4 4 16 3 64 32 1500"),
    Verdict("fig13", "**Verdict: (1) partly reproduced (BERT and MTE only), (2) not.**", fig13,
            literals="1 2 1 0.027 8 32 128 128 8 0.0081 0.00243 8 128 0.00243 200 0.027 8 32 "
                     "32 128 0.00243 0.0081 0.00243 8 32 0.027 128 8 32 3 200 128 8"),
)
