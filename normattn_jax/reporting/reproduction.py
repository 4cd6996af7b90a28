"""REPRODUCTION.md's numbers, generated and checked from the files under ``results/``.

A table that quotes results is fenced in the document by ``<!-- table: <id> -->`` and
``<!-- /table -->``; its spec here (``TABLES``) gives the rows it owns, each keyed by its first
cells (a row label, or e.g. "d | arch"), as the other cells computed from the committed files.
A cell given as None, and every row not named by the spec (the papers' numbers), stay as the
document has them, so the text keeps the papers' rows beside ours and reads as before.
``render`` rewrites the owned cells, ``problems`` lists where the document and the files
disagree. A number quoted in prose is a ``Quote``: a sentence fragment formatted from the files
that the document must contain (whitespace and line breaks aside).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import Callable

import numpy as np

from normattn_jax.analysis.causal_lm_keys import layer_statistics
from normattn_jax.sweep import seeds as seeds_lib
from normattn_jax.reporting.tables import REGULARIZERS, regularization_scores
from normattn_jax.tasks import synthetic

TABLE_START = re.compile(r"^<!-- table: ([\w-]+) -->$")
TABLE_END = "<!-- /table -->"
ARCH_NAMES = {"bert": "BERT", "mte": "MTE", "nap": "NAP", "non": "NON", "sum": "sum",
              "max": "max"}
ARCHS = tuple(ARCH_NAMES)


class Results:
  """The files under a results folder, each read once."""

  def __init__(self, root: str):
    self.root = root
    self._cache: dict = {}

  def path(self, relative: str) -> str:
    return os.path.join(self.root, relative)

  def json(self, relative: str):
    """A JSON file under the folder."""
    if relative not in self._cache:
      with open(self.path(relative)) as f:
        self._cache[relative] = json.load(f)
    return self._cache[relative]

  def jsonl(self, relative: str) -> list:
    """A JSON-lines file (e.g. a ``history.jsonl``) under the folder."""
    if relative not in self._cache:
      with open(self.path(relative)) as f:
        self._cache[relative] = [json.loads(line) for line in f if line.strip()]
    return self._cache[relative]

  def sweep(self, workdir: str) -> seeds_lib.OurSweep:
    """A finished sweep (its ``config.json`` and ``metrics.npz``)."""
    key = ("sweep", workdir)
    if key not in self._cache:
      self._cache[key] = seeds_lib.OurSweep.read(self.path(workdir))
    return self._cache[key]

  def best(self, workdir: str, key: str, split: str = "train") -> float:
    """A sweep's table entry (``summary.json``'s ``best``): its best mean ``split`` accuracy."""
    return self.json(f"{workdir}/summary.json")["best"][key][f"{split}_acc"]


Row = tuple[tuple[str, ...], list]  # (key cells, the other cells: str, or None to keep)


@dataclasses.dataclass(frozen=True)
class Table:
  """A fenced table of the document: ``rows(results)`` gives the rows this spec owns."""
  id: str
  rows: Callable[[Results], list[Row]]
  key_columns: int = 1


@dataclasses.dataclass(frozen=True)
class Quote:
  """A number quoted in prose: ``text(results)`` must occur in the document."""
  id: str
  text: Callable[[Results], str]


# ----- formatting -----

def pct(x: float, digits: int = 1) -> str:
  """A fraction as a percentage."""
  return f"{100 * x:.{digits}f}"


def pcts(values, digits: int = 1) -> str:
  """Fractions as comma-separated percentages."""
  return ", ".join(pct(x, digits) for x in values)


def rate(lr: float, decimal_from: float = math.inf) -> str:
  """A learning rate as the document writes it: 2.19e-4, 8.1e-3 (from ``decimal_from`` up, as
  a decimal: 0.027)."""
  if lr >= decimal_from:
    return f"{lr:g}"
  exponent = math.floor(math.log10(lr))
  return f"{lr / 10 ** exponent:.3g}e{exponent}"


def short_float(value: float) -> str:
  """A regularisation value: powers of ten as 1e-4, the others as decimals (0.0625)."""
  exponent = round(math.log10(value))
  return f"1e{exponent}" if math.isclose(value, 10.0 ** exponent) else f"{value:g}"


def sci(x: float) -> str:
  """A small positive number in the document's short scientific form: 6.5e-2, 1.3."""
  if 1 <= x < 10:
    return f"{x:.1f}"
  mantissa, exponent = f"{x:.1e}".split("e")
  return f"{mantissa}e{int(exponent)}"


def signed(x: float) -> str:
  """A slope with its sign, 0.00 unsigned."""
  text = f"{x:+.2f}"
  return "0.00" if text in ("+0.00", "-0.00") else text


def p_value(p: float) -> str:
  """A test's p: three decimals below 0.1, two above."""
  return f"{p:.3f}" if p < 0.1 else f"{p:.2f}"


def mean_spread(stats: dict) -> str:
  """A fine-tuning cell: mean +- standard error (min-max), in %."""
  return (f"{pct(stats['mean'])} ± {pct(stats['std_error'])} "
          f"({pct(stats['min'])}-{pct(stats['max'])})")


# ----- the tables: sweeps -----

def best_over_points(r: Results, workdir: str, arch: str, split: str) -> float:
  """The best of an arch's table entries over the static points of a sweep."""
  best = r.json(f"{workdir}/summary.json")["best"]
  return max(v[f"{split}_acc"] for k, v in best.items() if k.split(" ")[0] == arch)


def arch_rows(workdir: str, labels: dict, archs=ARCHS, over_points: bool = False):
  """Rows ``label -> per arch its best mean accuracy`` of one sweep (split per label)."""
  def rows(r: Results) -> list[Row]:
    out = []
    for label, split in labels.items():
      entry = ((lambda a: best_over_points(r, workdir, a, split)) if over_points
               else (lambda a: r.best(workdir, a, split)))
      out.append(((label,), [pct(entry(a)) for a in archs]))
    return out
  return rows


def point_rows(workdir: str, field: str, values: dict, splits=("train",), archs=ARCHS):
  """Rows ``label -> per arch its best mean accuracy at field=value`` (splits joined by /)."""
  def rows(r: Results) -> list[Row]:
    return [((label,), [" / ".join(pct(r.best(workdir, f"{a} {field}={value}", s))
                                   for s in splits) for a in archs])
            for label, value in values.items()]
  return rows


def ablation_rows(r: Results) -> list[Row]:
  """NAP Table 1: the best mean accuracy of each ablation stage."""
  workdir = "table1_ablation_reduced"
  return [((label,), [pct(r.best(workdir, f"bert ablation={stage}", split))
                      for stage in range(5)])
          for label, split in (("ours, train", "train"), ("ours, validation", "val"))]


def regularisation_rows(l2: str, dropout: str):
  """The ours rows of one of the NAP paper's Tables 2-4 (``tables.regularization_scores``)."""
  def rows(r: Results) -> list[Row]:
    archs, scores = regularization_scores([r.json(f"{l2}/summary.json"),
                                           r.json(f"{dropout}/summary.json")])
    out = []
    for split, label in (("train", "train"), ("val", "validation")):
      for row in ("unregularised", *REGULARIZERS.values()):
        cells = scores[(split, row)]
        out.append(((f"ours, {label}, {row}",), [
            pct(cells[a][0]) + ("" if cells[a][1] is None else f" ({short_float(cells[a][1])})")
            for a in archs]))
    return out
  return rows


def seed_cells(r: Results, path: str, point: str = "") -> dict:
  """``arch -> [cells]`` of a ``compare_seeds`` report at one point."""
  out: dict = {}
  for cell in r.json(path)["cells"]:
    if cell["point"] == point:
      out.setdefault(cell["arch"], []).append(cell)
  return out


def cell_at(cells: list, learning_rate: float) -> dict | None:
  """The cell of ``cells`` (a report's or a summary's) at a learning rate (to 1%), or None."""
  return next((c for c in cells
               if math.isclose(c["learning_rate"], learning_rate, rel_tol=1e-2)), None)


def best_cell(cells: list, source: str = "ours", split: str = "train_acc") -> dict:
  """The cell of the best mean (pixel) accuracy."""
  return max(cells, key=lambda c: c[source][split]["pixel"]["mean"])


def best_pixel(cells: list, split: str, source: str = "ours") -> float:
  """The paper's table entry: the best pixel mean over the learning rates."""
  return max(c[source][split]["pixel"]["mean"] for c in cells if source in c)


def fig5_gpu_rows(r: Results) -> list[Row]:
  """Fig. 5 at the paper's scale: per d and arch its best learning rate's seeds (train, argmin,
  argmax, learned by the per-case rule, pixel means), and the authors' seeds in the same cell."""
  out = []
  for d in (128, 64):
    point = f"model.d_model={d}"
    ours, authors = (seed_cells(r, f"fig5_first_token_gpu/{name}.json", point)
                     for name in ("seeds", "seeds_authors"))
    for arch in ARCHS:
      cell = best_cell(ours[arch])
      s = cell["ours"]
      theirs = cell_at(authors.get(arch, []), cell["learning_rate"])
      mine = [pcts(s["train_acc"]["seeds"]), pcts(s["cases"]["argmin"]),
              pcts(s["cases"]["argmax"]), f"{sum(s['learned_all'])}/{len(s['learned_all'])}",
              f"{pct(s['train_acc']['pixel']['mean'])} / {pct(s['val_acc']['pixel']['mean'])}"]
      if theirs and "authors" in theirs:  # the authors' seeds in the same cell
        a = theirs["authors"]
        other = [pcts(a["train_acc"]["seeds"]), f"{pct(a['train_acc']['pixel']['mean'])} / "
                                                 f"{pct(a['val_acc']['pixel']['mean'])}"]
      else:
        other = [None, None]
      out.append(((str(d), ARCH_NAMES[arch]), [rate(cell["learning_rate"])] + mine + other))
  return out


def case_pixel(r: Results, workdir: str, arch: str, params: dict | None = None):
  """An arch's cell whose weakest case is highest (``seeds.best_case_pixel``): ``(learning
  rate, [argmin, first, argmax])``."""
  return seeds_lib.best_case_pixel(r.json(f"{workdir}/summary.json"), arch, params)


def learned_word(means) -> str:
  """"yes" where the weakest case reaches ``seeds.CASES_LEARNED`` (the document's "learned")."""
  return "yes" if min(means) >= seeds_lib.CASES_LEARNED else "no"


def fig5_gpu_pixel_rows(r: Results) -> list[Row]:
  """Fig. 5 on the paper's pixels: per d and arch the learning rate whose weakest case mean is
  highest, its three case means, the weakest, and whether it learned."""
  out = []
  for d in (128, 64):
    for arch in ARCHS:
      lr, means = case_pixel(r, f"fig5_first_token_gpu/d{d}_{arch}", arch, {"model.d_model": d})
      out.append(((str(d), ARCH_NAMES[arch]),
                  [rate(lr), " / ".join(pct(m) for m in means), pct(min(means)),
                   learned_word(means)]))
  return out


def weakest_case_rows(workdir: str, field: str, values: tuple, archs=ARCHS):
  """Per arch, at each swept value, the weakest case mean of its best cell (its learning rate in
  brackets): a case figure's crosses and titles as a table."""
  def rows(r: Results) -> list[Row]:
    out = []
    for arch in archs:
      cells = []
      for value in values:
        lr, means = case_pixel(r, workdir, arch, {field: value})
        cells.append(f"{pct(min(means))} ({rate(lr)})")
      out.append(((ARCH_NAMES[arch],), cells))
    return out
  return rows


def one_sided_test(report: dict, better: str, worse: str, point: str, source: str = "ours"):
  """A one-sided test of a ``compare_seeds`` report, or None."""
  return next((t[source] for t in report["tests"] if (t["better"], t["worse"], t["point"])
               == (better, worse, point) and source in t), None)


def tests_rows(columns: list, tests: tuple, fmt: Callable = p_value):
  """Rows ``"A > B"`` of one-sided tests, one column per (report, point, source); "-" where a
  report has no such test."""
  def rows(r: Results) -> list[Row]:
    out = []
    for better, worse in tests:
      cells = []
      for path, point, source in columns:
        t = one_sided_test(r.json(path), better, worse, point, source)
        cells.append("-" if t is None else f"{fmt(t['train_acc'])} / {fmt(t['val_acc'])}")
      out.append(((f"{ARCH_NAMES[better]} > {ARCH_NAMES[worse]}",), cells))
    return out
  return rows


def n128_d64_nap_rows(r: Results) -> list[Row]:
  """NAP at N = 128, d = 64, 5 seeds: per learning rate ours and the authors' seeds, and the
  two-sided test between them."""
  ours = seed_cells(r, "table3_first_token_n128_d64_seeds.json")["nap"]
  authors = seed_cells(r, "table3_first_token_n128_d64_seeds_authors.json")["nap"]
  out = []
  for cell in sorted(ours, key=lambda c: -c["learning_rate"]):
    s = cell["ours"]
    a = next(c for c in authors if math.isclose(c["learning_rate"], cell["learning_rate"]))
    cases = ", ".join(f"{pct(lo)} / {pct(hi)}"
                      for lo, hi in zip(s["cases"]["argmin"], s["cases"]["argmax"]))
    p = a["ours_vs_authors"]
    out.append(((rate(cell["learning_rate"]),), [
        pcts(s["train_acc"]["seeds"]), cases, pcts(a["authors"]["train_acc"]["seeds"]),
        f"{sum(s['learned_all'])} / -", pcts(s["val_acc"]["seeds"]),
        pcts(a["authors"]["val_acc"]["seeds"]),
        f"{p['train_acc']:.2f} / {p['val_acc']:.2f}"]))
  return out


# The N = 128, d = 64 runs of 1-3 seeds: per arch and learning rate, the workdirs whose seeds
# make the row, in seed order.
N128_D64_RUNS = {("nap", 2.19e-4): ("nap", "nap_seeds"), ("nap", 7.29e-4): ("nap",),
                 ("bert", 2.43e-3): ("bert", "bert_seeds"), ("bert", 7.29e-4): ("bert",),
                 ("mte", 2.43e-3): ("mte_lr",), ("mte", 7.29e-4): ("mte", "mte_seeds"),
                 ("mte", 2.19e-4): ("mte",)}


def n128_d64_curves(r: Results, arch: str, lr: float, metric: str) -> np.ndarray:
  """``[evaluations, seeds]`` of one arch and learning rate over its workdirs."""
  return np.concatenate([r.sweep(f"table3_first_token_d64_n128_{w}").seeds(arch, metric, lr)
                         for w in N128_D64_RUNS[(arch, lr)]], axis=1)


def authors_d64(r: Results, arch: str, lr: float):
  """The authors' seeds of an arch at d = 64 and one learning rate (from the reports that hold
  them), or None."""
  cells = (seed_cells(r, "table3_first_token_n128_d64_seeds_authors.json").get(arch, [])
           + seed_cells(r, "fig5_first_token_gpu/seeds_authors.json",
                        "model.d_model=64").get(arch, []))
  return next((c["authors"]["train_acc"] for c in cells if "authors" in c
               and math.isclose(c["learning_rate"], lr, rel_tol=1e-2)), None)


def n128_d64_seed_rows(r: Results) -> list[Row]:
  out = []
  for arch, lr in N128_D64_RUNS:
    theirs = authors_d64(r, arch, lr)
    out.append(((f"{ARCH_NAMES[arch]}, {rate(lr)}",), [
        pcts(seeds_lib.best_per_seed(n128_d64_curves(r, arch, lr, "train_acc"))),
        None if theirs is None else f"{pcts(theirs['seeds'])} ({pct(theirs['pixel']['mean'])})"]))
  return out


def n128_d64_mean_rows(r: Results) -> list[Row]:
  """The 1-3 seed runs at N = 128, d = 64: the pixel mean of each arch at its best rate."""
  picks = (("bert", 2.43e-3), ("mte", 2.43e-3), ("nap", 2.19e-4))
  return [((label,), [pct(seeds_lib.pixel(n128_d64_curves(r, arch, lr, metric))["mean"])
                      for arch, lr in picks])
          for label, metric in (("ours, train", "train_acc"),
                                ("ours, validated at N/2", "val_acc"))]


def table5_75s_rows(r: Results) -> list[Row]:
  """Table 5 at S = N and 2N, 75 S steps: per arch its best rate's seeds and table entries."""
  out = []
  for s, label in ((32, "32 = N"), (64, "64 = 2N")):
    workdir = f"table5_mode_vocab_n32_s{s}"
    cells = seed_cells(r, f"{workdir}/seeds.json", f"task.vocab_size={s}")
    out.append(((f"S = {label}, train",),
                [pcts(best_cell(cells[a])["ours"]["train_acc"]["seeds"]) for a in ARCHS]))
    out.append(((f"S = {s}, best mean train / validation at 2N",),
                [f"{pct(r.best(workdir, f'{a} task.vocab_size={s}'))} / "
                 f"{pct(r.best(workdir, f'{a} task.vocab_size={s}', 'val'))}" for a in ARCHS]))
  return out


def table5_400s_rows(r: Results) -> list[Row]:
  """Table 5 at S = N and 2N, 400 S steps: per arch its best rate's seeds, how many learned
  (>= 80% training accuracy), and the table entries (train and validation at their own rates)."""
  out = []
  for s, label in ((32, "32 = N"), (64, "64 = 2N")):
    cells = seed_cells(r, f"table5_mode_vocab_n32_s{s}_400s/seeds.json", f"task.vocab_size={s}")
    for arch in ARCHS:
      cell = best_cell(cells[arch])
      o = cell["ours"]
      out.append(((label, ARCH_NAMES[arch]), [
          rate(cell["learning_rate"], decimal_from=0.01), pcts(o["train_acc"]["seeds"]),
          f"{o['train_acc']['learned']}/{len(o['train_acc']['seeds'])}",
          pcts(o["val_acc"]["seeds"]),
          f"{pct(best_pixel(cells[arch], 'train_acc'))} / "
          f"{pct(best_pixel(cells[arch], 'val_acc'))}"]))
  return out


# ----- the tables: analyses -----

def mode_collapse_rows(r: Results) -> list[Row]:
  """DNAS Appendix E: the clusters after each step, per data and scheme."""
  result = r.json("mode_collapse/mode_collapse.json")
  out = []
  for data, label in (("unbalanced", "500 / 50"), ("balanced", "225 / 225")):
    for scheme in ("unas", "dnas"):
      counts = [str(c) for c in result[data][scheme]]
      if data == "unbalanced":  # the step the paper's claim is about
        counts[-1] = f"**{counts[-1]}**"
      out.append(((label, scheme.upper()), [", ".join(counts), None]))
  return out


def sinkhorn_rows(r: Results) -> list[Row]:
  """The largest column deviation after 1, 5, 10 and 30 Sinkhorn iterations."""
  sinkhorn = r.json("geometry/geometry.json")["sinkhorn"]
  return [((str(std),), [sci(sinkhorn[f"logit_std={std}"]["column"][i - 1])
                         for i in (1, 5, 10, 30)]) for std in (1, 3, 10)]


def pooling_rows(r: Results) -> list[Row]:
  """The log-log slopes of the pooled output's scale against N."""
  slopes = r.json("geometry/geometry.json")["log_log_slope_from_N_4"]
  return [((name,), [signed(slopes[f"{name} std"]), signed(slopes[f"{name} norm"])])
          for name in ("softmax attention", "mean", "sum", "max", "normalised sum")]


def unselectable_rows(r: Results) -> list[Row]:
  """Brody et al. Fig. 1c/1d: the share of draws with an unselectable vector per (d, n), and
  the largest with LayerNorm."""
  result = r.json("unselectable/unselectable.json")
  at = lambda d, n: result["without_layer_norm"][result["dims"].index(d)][result["ns"].index(n)]
  cells = [f"{at(d, n):.2f}" for d, n in ((3, 10), (5, 30), (8, 60), (10, 60), (12, 60),
                                          (15, 60))]
  return [(("ours",), cells + [f"{np.max(result['with_layer_norm']):.2f}"])]


def lm_counted(stats: dict) -> dict:
  """A layer table's statistics computed again from the per-window counts the run committed,
  not read from its stored means (``causal_lm_keys.layer_statistics``)."""
  return layer_statistics(stats["unselectable_per_window"], stats["vectors_per_window"])


def lm_cells(stats: dict) -> list[str]:
  """Per layer mean ± std (%) from the per-window counts, a layer without unselectable keys as
  0.0."""
  counted = lm_counted(stats)
  return [f"{m:.1f}" if m == s == 0 else f"{m:.1f} ± {s:.1f}"
          for m, s in zip(counted["mean_percent"], counted["std_percent"])]


def unselectable_lm_rows(r: Results) -> list[Row]:
  """Brody et al. Table 1 and 2: % unselectable per layer, trained and untrained."""
  variants = r.json("unselectable_lm/summary.json")["variants"]
  with_, without = variants["with_scaling"]["seeds"][0], variants["without_scaling"]["seeds"][0]
  return [(("**w/o scaling (ours)**",), lm_cells(without["trained"]["attention_inputs"])),
          (("**w/ scaling (ours)**",), lm_cells(with_["trained"]["attention_inputs"])),
          (("w/ scaling, before its LayerNorm (ours, Table 2)",),
           lm_cells(with_["trained"]["norm_inputs"])),
          (("w/o scaling, untrained (ours, 4 windows)",),
           lm_cells(without["init"]["attention_inputs"])),
          (("w/ scaling, untrained (ours, 4 windows)",),
           lm_cells(with_["init"]["attention_inputs"]))]


def explaining_away_rows(r: Results) -> list[Row]:
  """DNAS Fig. 1: accuracy, share of keys explained away and the smallest log-sum."""
  result = r.json("explaining_away/explaining_away.json")
  unas, dnas = result["UNAS"], result["DNAS"]
  share = lambda x: f"{pct(x)}%" if x else "0%"
  return [(("UNAS",), [f"{pct(unas['val_acc'])}%", share(unas["explained_away_fraction"]),
                       f"{unas['min_log_sum']:.1f} (and {unas['underflowed_keys']} of 65,536 "
                       "sums that underflow float32 to 0)", f"{unas['log_one_over_S']:.2f}"]),
          (("DNAS",), [f"{pct(dnas['val_acc'])}%", share(dnas["explained_away_fraction"]),
                       f"{dnas['min_log_sum']:.3f}", f"{dnas['log_one_over_S']:.2f}"])]


def albert_rows(r: Results) -> list[Row]:
  """The toy ALBERT pre-training of each scheme."""
  comparison = r.json("albert_tiny/comparison.json")
  return [((label,), [f"{pct(s['mlm_accuracy'], 2)}%", f"{s['mlm_loss']:.3f}",
                      f"{pct(s['sop_accuracy'], 2)}%", f"{s['tokens_per_second']:,.0f}"])
          for label, s in (("UNAS (softmax)", comparison["softmax"]),
                           ("DNAS", comparison["dnas"]), ("HNAS", comparison["hnas"]))]


SCHEMES = {"UNAS": "softmax", "DNAS": "dnas", "HNAS": "hnas"}


def finetune_rows(r: Results) -> list[Row]:
  """The Folio genre column beside DNAS Table 2: each scheme at its best learning rate."""
  return [((label,), [None] * 4 + [mean_spread(
      r.json(f"finetune_genre/{run}/summary.json")["best"]["accuracy"])])
          for label, run in SCHEMES.items()]


def finetune_rate_rows(r: Results) -> list[Row]:
  """The Folio genre task at both learning rates."""
  out = []
  for label, run in SCHEMES.items():
    cells = {c["learning_rate"]: c for c in r.json(f"finetune_genre/{run}/summary.json")["cells"]}
    out.append(((label,), [mean_spread(cells[lr]["accuracy"]) for lr in (1e-4, 3e-4)]))
  return out


MINILM_RUNS = {"softmax (as pre-trained)": "softmax", "switched to HNAS, u from 0": "hnas",
               "switched to DNAS": "dnas", "switched to NAP": "nap"}


def minilm_rows(r: Results) -> list[Row]:
  """MiniLM fine-tuned as pre-trained and switched to another normalisation."""
  out = []
  for label, run in MINILM_RUNS.items():
    best = r.json(f"finetune_minilm_genre/{run}/summary.json")["best"]
    out.append(((label,), [mean_spread(best["accuracy"]), f"{best['train_loss']['mean']:.2f}"]))
  return out


MAJORITY_VARIANTS = ("with_projection", "without_projection", "without_projection_code")


def majority_rows(r: Results) -> list[Row]:
  """Brody et al. Fig. 2/3: steps to each test accuracy and the state at the last step."""
  result = r.json("majority/majority.json")
  variants = [result["variants"][v] for v in MAJORITY_VARIANTS]
  out = []
  for threshold in ("0.5", "0.7", "0.8", "0.9"):
    to = [v["steps_to_test_accuracy"][threshold] for v in variants]
    level = f"{round(100 * float(threshold))}%"
    out.append(((f"steps to {level} test accuracy, seeds' mean curve",),
                ["not reached" if t["seed_mean_curve"] is None else str(t["seed_mean_curve"])
                 for t in to] + [None]))
    out.append((("per seed: mean [min, max], seeds reaching it",),
                [_reaching(t) for t in to] + [None]))
  step = result["steps_run"]
  for metric, label, digits, unit in (
      ("test_accuracy", "test accuracy", 3, ""), ("train_loss", "training loss", 3, ""),
      ("query_angle", "query angle", 1, " (deg)")):
    finals = [v["final"][metric] for v in variants]
    out.append(((f"{label} at step {step}, mean [min, max]{unit}",),
                [f"{f['mean']:.{digits}f} [{f['min']:.{digits}f}, {f['max']:.{digits}f}]"
                 for f in finals] + [None]))
  return out


def _reaching(steps_to: dict) -> str:
  """Steps to an accuracy per seed: mean [min, max] over the seeds that reach it, and how many."""
  reached = [s for s in steps_to["per_seed"] if s is not None]
  if not reached:
    return "none"
  count = (str(steps_to["reached"]) if steps_to["reached"] == steps_to["of"]
           else f"{steps_to['reached']} of {steps_to['of']}")
  return f"{round(steps_to['mean_over_reached'])} [{min(reached)}, {max(reached)}], {count}"


MIXING_METHODS = ("ATTN-W", "ATTN-N", "ATTNRES-W", "ATTNRES-N", "ATTNRESLN-N")


def mixing_rows(r: Results) -> list[Row]:
  """Kobayashi et al. Table 2: mean / max / min mixing ratio, both masking protocols."""
  runs = [r.json("mixing/mixing.json")["overall"], r.json("mixing/mixing_authors.json")["overall"]]
  return [((method,), [" / ".join(pct(run[method][k]) for k in ("mean", "max", "min"))
                       for run in runs] + [None, None]) for method in MIXING_METHODS]


def expansion_rows(r: Results) -> list[Row]:
  """Kobayashi et al. Table 8: the expansion rate of the value-output map."""
  rate_ = r.json("mixing/mixing.json")["expansion_rate"]
  return [(("MiniLM-L6 (ours)",), [f"{rate_[k]:.2f}" for k in ("mean", "min", "max")])]


TABLES = (
    Table("fig3-best", arch_rows("fig3_reduced", {"ours, train (N = 32)": "train",
                                                  "ours, validated at N/2 = 16": "val"},
                                 over_points=True)),
    Table("mode-collapse", mode_collapse_rows, key_columns=2),
    Table("sinkhorn", sinkhorn_rows),
    Table("pooling-slopes", pooling_rows),
    Table("unselectable", unselectable_rows),
    Table("unselectable-lm", unselectable_lm_rows),
    Table("explaining-away", explaining_away_rows),
    Table("albert-tiny", albert_rows),
    Table("finetune-genre", finetune_rows),
    Table("finetune-genre-rates", finetune_rate_rows),
    Table("finetune-minilm", minilm_rows),
    Table("majority", majority_rows),
    Table("mixing-table2", mixing_rows),
    Table("mixing-table8", expansion_rows),
    Table("table4-mode", arch_rows("table4_mode_reduced", {"ours, train (N = 32)": "train",
                                                           "ours, validated at 2N = 64": "val"})),
    Table("table1-ablation", ablation_rows),
    Table("table3-reduced", arch_rows("table3_first_token_reduced",
                                      {"ours, train (N = 32)": "train",
                                       "ours, validated at N/2": "val"})),
    Table("fig5-gpu-seeds", fig5_gpu_rows, key_columns=2),
    Table("fig5-gpu-pixels", fig5_gpu_pixel_rows, key_columns=2),
    Table("fig5-reduced-pixels", weakest_case_rows("fig5_first_token_reduced", "model.d_model",
                                                   (16, 32))),
    Table("fig4-pixels", weakest_case_rows("fig4_case_seq_len_reduced", "task.seq_len",
                                           (16, 32, 64))),
    Table("fig13-pixels", weakest_case_rows("fig13_case_batch_reduced", "train.batch_size",
                                            (8, 32, 128))),
    Table("fig5-gpu-tests", tests_rows(
        [(f"fig5_first_token_gpu/seeds{suffix}.json", f"model.d_model={d}", source)
         for d in (128, 64) for suffix, source in (("", "ours"), ("_authors", "authors"))],
        (("nap", "bert"), ("nap", "mte"), ("nap", "non"), ("nap", "sum"), ("max", "nap")))),
    Table("n128-d64-nap", n128_d64_nap_rows),
    Table("n128-d64-seeds", n128_d64_seed_rows),
    Table("n128-d64-means", n128_d64_mean_rows),
    Table("regularisation-table2", regularisation_rows("table2_case_tokens_l2_reduced",
                                                       "table2_case_tokens_dropout_reduced")),
    Table("regularisation-table4", regularisation_rows("table4_mode_l2_reduced",
                                                       "table4_mode_dropout_reduced")),
    Table("regularisation-table3", regularisation_rows("table3_first_token_l2_reduced",
                                                       "table3_first_token_dropout_reduced")),
    Table("fig16-vocab", point_rows("fig16_mode_vocab_reduced", "task.vocab_size",
                                    {f"S = {s}, ours": s for s in (2, 4, 8, 16)})),
    Table("table5-75s", table5_75s_rows),
    Table("table5-400s-seeds", table5_400s_rows, key_columns=2),
    Table("table5-400s-tests", tests_rows(
        [(f"table5_mode_vocab_n32_s{s}_400s/seeds.json", f"task.vocab_size={s}", "ours")
         for s in (32, 64)],
        (("nap", "bert"), ("bert", "nap"), ("nap", "mte"), ("nap", "non"), ("nap", "sum"),
         ("sum", "nap"), ("nap", "max")), fmt=lambda p: f"{p:.3f}")),
    Table("fig15-depth", point_rows("fig15_first_token_depth_reduced", "model.num_layers",
                                    {f"L = {n}": n for n in (1, 2, 4)})),
    Table("fig6-heads", point_rows("fig6_first_token_heads_reduced", "model.num_heads",
                                   {f"M = {m}": m for m in (1, 4, 16)}, ("train", "val"),
                                   ("bert", "mte", "nap", "non"))),
)


# ----- numbers in prose -----

def best_pairs(workdir: str, field: str, values: tuple, splits=("train",), archs=ARCHS,
               sep: str = ", ") -> Callable[[Results], str]:
  """"BERT 25.5 / 25.9, MTE ...": per arch its best mean accuracy at each value (or split)."""
  def text(r: Results) -> str:
    return sep.join(
        f"{ARCH_NAMES[a]} " + " / ".join(pct(r.best(workdir, f"{a} {field}={v}" if field else a, s))
                                         for v in values for s in splits)
        for a in archs)
  return text


def hybrid_weights_after_finetuning(r: Results) -> str:
  """HNAS's u after fine-tuning the switched MiniLM: its largest value in any head, and the
  range of the per-layer means (over heads and seeds)."""
  u = np.asarray(r.json("finetune_minilm_genre/hnas/summary.json")["best"]["hybrid_weights"])
  layer_means = u.mean(axis=(0, 2))
  return (f"u is at most {u.max():.3f} in any head (mean {layer_means.min():.4f}-"
          f"{layer_means.max():.4f} per layer")


def majority_data(r: Results) -> str:
  """The data sets' statistics: types per sequence (mean, range per data set), majority."""
  data = r.json("majority/majority.json")["data"]
  per_set = data["types_per_sequence_per_data_set"]
  return (f"a sequence holds {data['types_per_sequence']:.2f} types on average "
          f"({min(per_set):.1f}-{max(per_set):.1f} per data set) and the majority type "
          f"{data['majority_count']:.1f} of the 50 tokens")


def majority_loss_crossing(r: Results) -> str:
  """The first step at which the seeds' mean training loss reaches 0.45, per variant."""
  history = r.jsonl("majority/history.jsonl")
  seeds = r.json("majority/config.json")["num_seeds"]
  first = {}
  for index, name in enumerate(MAJORITY_VARIANTS):
    first[name] = next(row["step"] for row in sorted(history, key=lambda row: row["step"])
                       if "train_loss" in row and np.mean(
                           row["train_loss"][index * seeds:(index + 1) * seeds]) <= 0.45)
  ratio = first["without_projection_code"] / first["with_projection"]
  return (f"reaches 0.45 at step {first['with_projection']} with projection and at step "
          f"{first['without_projection_code']} for the code's variant, {ratio:.2f}x")


def majority_angle(r: Results, step: int = 1652) -> str:
  """The seeds' mean query angle with projection at one evaluation."""
  row = next(row for row in r.jsonl("majority/history.jsonl") if row["step"] == step)
  seeds = r.json("majority/config.json")["num_seeds"]
  angle = np.mean(row["query_angle"][:seeds])  # with_projection's models come first
  return f"with projection it falls steadily ({angle:.0f} degrees at step {step}"


def finetune_choices(r: Results) -> str:
  """The best learning rate of each scheme, and the range of the final train losses."""
  summaries = {label: r.json(f"finetune_genre/{run}/summary.json")
               for label, run in SCHEMES.items()}
  by_rate: dict = {}
  for label, s in summaries.items():
    by_rate.setdefault(s["best"]["learning_rate"], []).append(label)
  rates = ", ".join(f"{rate(lr)} for {' and '.join(labels)}"
                    for lr, labels in sorted(by_rate.items(), reverse=True))
  losses = [c["train_loss"]["mean"] for s in summaries.values() for c in s["cells"]]
  return f"at the best learning rate ({rates})", (
      f"the mean train loss of the last 100 steps is {min(losses):.2f}-{max(losses):.2f}")


def lm_losses(r: Results) -> str:
  """The final training and held-out losses of both LMs."""
  variants = r.json("unselectable_lm/summary.json")["variants"]
  w, wo = variants["with_scaling"]["seeds"][0], variants["without_scaling"]["seeds"][0]
  return (f"Final training loss {w['final_train_loss']:.3f} (w/ scaling) vs "
          f"{wo['final_train_loss']:.3f} (w/o), held-out loss {w['heldout_loss']:.3f} vs "
          f"{wo['heldout_loss']:.3f}")


def mixing_layers(r: Results) -> str:
  """Fig. 3's per-layer ATTNRESLN-N ratios under both protocols."""
  per_layer = lambda name: ", ".join(
      pct(x) for x in r.json(f"mixing/{name}.json")["per_layer"]["ATTNRESLN-N"])
  return (f"{per_layer('mixing')} (paper protocol, per token); {per_layer('mixing_authors')} "
          "(authors' protocol, per sentence first)")


def mixing_spearman(r: Results) -> str:
  """Table 3: Spearman's rho with and without the special tokens, per method."""
  rho = r.json("mixing/mixing.json")["frequency_spearman"]
  return "ours " + ", ".join(f"{m} {rho[m]['with_special']:.2f} / {rho[m]['without_special']:.2f}"
                             for m in MIXING_METHODS)


def n128_d64_pixels(r: Results) -> str:
  """NAP's pixel values (min / mean / max) at 2.19e-4, ours and the authors'."""
  cell = next(c for c in seed_cells(r, "table3_first_token_n128_d64_seeds_authors.json")["nap"]
              if math.isclose(c["learning_rate"], 2.19e-4))
  pix = lambda source, split: " / ".join(pct(cell[source][split]["pixel"][k])
                                         for k in ("min", "mean", "max"))
  return (f"at 2.19e-4: train {pix('ours', 'train_acc')} (the authors' "
          f"{pix('authors', 'train_acc')}), validation {pix('ours', 'val_acc')} "
          f"({pix('authors', 'val_acc')})")


def fig5_authors_cell(r: Results, d: int, arch: str) -> dict:
  """The cell of the Fig. 5 GPU report with the authors' seeds at our best learning rate (on
  mean training accuracy) of ``arch`` at d."""
  point = f"model.d_model={d}"
  lr = best_cell(seed_cells(r, "fig5_first_token_gpu/seeds.json", point)[arch])["learning_rate"]
  cell = cell_at(seed_cells(r, "fig5_first_token_gpu/seeds_authors.json", point)[arch], lr)
  if cell is None:
    raise KeyError(f"the authors' report has no cell of {arch!r} at d = {d}, lr {lr:g}")
  return cell


def same_cell_ps(cell: dict) -> list[str]:
  """A cell's two-sided tests of our seeds against the authors', train and validation p."""
  return [f"{cell['ours_vs_authors'][split]:.2f}".replace("1.00", "1.0")
          for split in ("train_acc", "val_acc")]


def fig5_gpu_same_cell(r: Results) -> str:
  """Two-sided tests of our seeds against the authors' at our best learning rate."""
  p = lambda arch, d: " / ".join(same_cell_ps(fig5_authors_cell(r, d, arch)))
  return (f"NAP at d = 128 p = {p('nap', 128)}, max {p('max', 128)}, sum {p('sum', 128)}; BERT "
          f"at d = 128 {p('bert', 128)}; NAP at d = 64 {p('nap', 64)}")


def regularisation_counts(r: Results) -> str:
  """Of the regularised entries of Tables 2-4, how many beat their unregularised baseline, and
  in how many the better value is the smaller of the two tried."""
  runs = (("table2_case_tokens_l2_reduced", "table2_case_tokens_dropout_reduced"),
          ("table4_mode_l2_reduced", "table4_mode_dropout_reduced"),
          ("table3_first_token_l2_reduced", "table3_first_token_dropout_reduced"))
  entries = above = smallest = 0
  for l2, dropout in runs:
    summaries = [r.json(f"{l2}/summary.json"), r.json(f"{dropout}/summary.json")]
    archs, scores = regularization_scores(summaries)
    for name, row in REGULARIZERS.items():
      tried = sorted({float(k.split("=")[1]) for summary in summaries for k in summary["best"]
                      if k.split(" ")[1].startswith(name + "=")} - {0.0})
      for split in ("train", "val"):
        for arch in archs:
          score, value = scores[(split, row)][arch]
          entries += 1
          above += score > scores[(split, "unregularised")][arch][0]
          smallest += value == tried[0]
  return (f"of the {entries} regularised entries (3 tasks x 6 models x 2 regularisers x "
          f"train/validation), {above} are above their unregularised baseline",
          f"at the smaller of our two values in {smallest} of the {entries} entries")


def case_shares_text(r: Results) -> str:
  """How often the cases occur in the reduced Fig. 3 run (S, N from its config) and at the
  paper's N = 128 (``tasks.synthetic.case_shares``), which must give the paper's numbers."""
  task = r.json("fig3_reduced/config.json")["task"]
  shares = lambda n: " / ".join(f"{pct(x)}%" for x in synthetic.case_shares(n, task["vocab_size"]))
  paper = r.json("papers.json")["text"]["nap.case-shares-n128"]["value"]
  at_paper = shares(128)
  if at_paper != " / ".join(f"{x}%" for x in paper):
    at_paper += f" (the paper: {' / '.join(paper)})"
  return (f"at S = {task['vocab_size']}, N = {task['seq_len']} the cases occur "
          f"{shares(task['seq_len'])} (argmin / first / argmax) instead of {at_paper} at N = 128")


def argmax_share_text(r: Results) -> str:
  """The share of the argmax case at the GPU run's N, and what never solving it leaves."""
  config = r.json("fig5_first_token_gpu/d128_nap/config.json")["task"]
  share = synthetic.case_shares(config["seq_len"], config["vocab_size"])[2]
  return (f"the argmax case is {pct(share)}% of the data at N = {config['seq_len']}, so a model "
          f"that never solves it still reaches {pct(1 - share)}%")


def fig5_case_tests(r: Results) -> str:
  """One-sided rank tests of NAP's seeds against the others' on the argmax case, and on argmin
  the two that do not differ."""
  report = "fig5_first_token_gpu/seeds.json"
  cell = lambda d, arch: best_cell(seed_cells(r, report, f"model.d_model={d}")[arch])
  p = lambda d, worse, case="argmax", better="nap": p_value(seeds_lib.rank_test(
      np.asarray(cell(d, better)["ours"]["cases"][case]),
      np.asarray(cell(d, worse)["ours"]["cases"][case])))
  d128 = one_value_text([p(128, a) for a in ("bert", "mte", "non")])
  return (f"at d = 64 NAP > MTE p = {p(64, 'mte')}, NAP > BERT {p(64, 'bert')}, NAP > NON "
          f"{p(64, 'non')}, NAP > sum {p(64, 'sum')}; at d = 128 NAP > BERT, MTE and NON {d128} "
          f"each, NAP > sum {p(128, 'sum')}. On argmin, MTE and NAP do not differ at d = 64 (p = "
          f"{p(64, 'mte', 'argmin')} for NAP > MTE), nor BERT and NAP at d = 128 "
          f"({p(128, 'bert', 'argmin')})")


def one_value_text(values: list) -> str:
  """One number for several equal values; all of them, joined, where they differ."""
  return values[0] if len(set(values)) == 1 else "|".join(values)


def fig5_beside_authors(r: Results) -> str:
  """How far our pixel means are from the authors' in the cells both sides ran."""
  cells = [c for c in r.json("fig5_first_token_gpu/seeds_authors.json")["cells"]
           if "authors" in c and "ours" in c]
  gap = lambda c, split: 100 * abs(c["ours"][split]["pixel"]["mean"]
                                   - c["authors"][split]["pixel"]["mean"])
  gaps = {split: [gap(c, split) for c in cells] for split in ("train_acc", "val_acc")}
  archs = [a for a in ARCHS if any(c["arch"] == a for c in cells)]
  points = {c["point"] for c in cells}
  rates = {round(c["learning_rate"], 12) for c in cells}
  largest = sorted(cells, key=lambda c: -max(gap(c, s) for s in gaps))
  where = lambda c: (f"{ARCH_NAMES[c['arch']]} at d = {c['point'].split('=')[1]}, "
                     f"{rate(c['learning_rate'])} ({gap(c, 'train_acc'):.0f} / "
                     f"{gap(c, 'val_acc'):.0f}")
  max_gap = max(gap(c, s) for c in cells if c["arch"] == "max" for s in gaps)
  return (f"Over the {len(cells)} cells both sides hold ({', '.join(ARCH_NAMES[a] for a in archs)}"
          f" x {len(points)} d x {len(rates)} rates), the mean pixel (G) differs by a median of "
          f"{np.median(gaps['train_acc']):.2f} points on training and "
          f"{np.median(gaps['val_acc']):.2f} on validation, and by less than 2 points in "
          f"{sum(x < 2 for xs in gaps.values() for x in xs)} of {2 * len(cells)}; the largest "
          f"differences (train / validation) are {where(largest[0])} points), {where(largest[1])})"
          f" and max pooling up to {max_gap:.0f} points")


QUOTES = (
    Quote("majority-data", majority_data),
    Quote("majority-loss", majority_loss_crossing),
    Quote("majority-angle", majority_angle),
    Quote("finetune-rates", lambda r: finetune_choices(r)[0]),
    Quote("finetune-losses", lambda r: finetune_choices(r)[1]),
    Quote("minilm-hnas-u", hybrid_weights_after_finetuning),
    Quote("albert-hnas-u", lambda r: ", ".join(
        f"{u:.3f}" for u in r.json("albert_tiny/hnas/summary.json")["hybrid_weights"])),
    Quote("mode-collapse-error", lambda r: "agree with the simulated update of two point masses "
          "to " + sci(r.json("mode_collapse/mode_collapse.json")[
              "max_abs_error_eq13_eq14_vs_simulation"])),
    Quote("lm-losses", lm_losses),
    Quote("mixing-layers", mixing_layers),
    Quote("mixing-expansion", lambda r: "Per layer (ours): " + ", ".join(
        f"{x:.2f}" for x in r.json("mixing/mixing.json")["expansion_rate"]["per_layer"])),
    Quote("mixing-spearman", mixing_spearman),
    Quote("table3-d64", best_pairs("table3_first_token_d64", "", ("",), ("train", "val"),
                                   ("bert", "mte", "nap"))),
    Quote("fig5-reduced", best_pairs("fig5_first_token_reduced", "model.d_model", (16, 32))),
    Quote("fig7", best_pairs("fig7_mode_reduced", "model.d_model", (16, 32))),
    Quote("fig4", best_pairs("fig4_case_seq_len_reduced", "task.seq_len", (16, 32, 64))),
    Quote("mixing-mask-layers", lambda r: "[MASK] tokens per layer: " + "; ".join(
        ", ".join(pct(x) for x in r.json(f"mixing/{name}.json")["per_layer_token_type"][
            "ATTNRESLN-N"]["[MASK]"]) + f" ({label})"
        for name, label in (("mixing", "paper protocol"), ("mixing_authors", "authors'")))),
    Quote("n128-d64-pixels", n128_d64_pixels),
    Quote("fig5-gpu-same-cell", fig5_gpu_same_cell),
    Quote("regularisation-above", lambda r: regularisation_counts(r)[0]),
    Quote("regularisation-smallest", lambda r: regularisation_counts(r)[1]),
    Quote("fig13", best_pairs("fig13_case_batch_reduced", "train.batch_size", (8, 32, 128))),
    Quote("case-shares", case_shares_text),
    Quote("argmax-share", argmax_share_text),
    Quote("fig5-gpu-case-tests", fig5_case_tests),
    Quote("fig5-gpu-beside-authors", fig5_beside_authors),
)


# ----- the document -----

def split_row(line: str) -> list[str]:
  """A markdown table row's cells, stripped."""
  return [cell.strip() for cell in line.strip().strip("|").split("|")]


def join_row(cells: list[str]) -> str:
  """A markdown table row of ``cells`` (an empty cell as "| |")."""
  return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"


def fenced_tables(lines: list[str]) -> dict:
  """``id -> (first, end)``: the line indices of each fenced table's rows.

  Raises:
    ValueError: a fence without its end, or an id fenced twice.
  """
  out = {}
  for index, line in enumerate(lines):
    match = TABLE_START.match(line.strip())
    if not match:
      continue
    table_id = match.group(1)
    end = next((j for j in range(index + 1, len(lines)) if lines[j].strip() == TABLE_END), None)
    if end is None or any(TABLE_START.match(lines[j].strip()) for j in range(index + 1, end)):
      raise ValueError(f"table {table_id!r}: no {TABLE_END} before the next table")
    if table_id in out:
      raise ValueError(f"table {table_id!r} is fenced twice")
    out[table_id] = (index + 1, end)
  return out


def render(document: str, results: Results, tables=TABLES) -> tuple[str, list[str], list[str]]:
  """The document with every owned cell of every fenced table computed from the files.

  Args:
    document: REPRODUCTION.md's text.
    results: the files.
    tables: the specs.

  Returns:
    ``(new document, differences, errors)``: each owned cell the files changed (with the
    document's value and theirs), and what could not be rendered: a spec'd table or row the
    document lacks, a row of another width, a fenced table without a spec, files that cannot
    be read.
  """
  lines = document.split("\n")
  fenced = fenced_tables(lines)
  specs = {t.id: t for t in tables}
  differences = []
  errors = [f"table {i}: fenced in the document but has no spec" for i in fenced
            if i not in specs]
  for spec in tables:
    if spec.id not in fenced:
      errors.append(f"table {spec.id}: not fenced in the document")
      continue
    first, end = fenced[spec.id]
    table_differences, table_errors = _render_table(spec, results, lines, first, end)
    differences += table_differences
    errors += table_errors
  return "\n".join(lines), differences, errors


def _render_table(spec: Table, results: Results, lines: list[str], first: int,
                  end: int) -> tuple[list[str], list[str]]:
  """Rewrite one table's owned cells in ``lines``; its differences and errors."""
  k = spec.key_columns
  try:
    owned = spec.rows(results)
  except (OSError, KeyError, ValueError, IndexError, StopIteration) as err:
    return [], [f"table {spec.id}: its files cannot be read: {type(err).__name__}: {err}"]
  rows = [i for i in range(first, end) if lines[i].strip().startswith("|")]
  header = split_row(lines[rows[0]]) if rows else []
  differences, errors, seen = [], [], {}
  for key, cells in owned:
    occurrence = seen[key] = seen.get(key, -1) + 1
    name = f"table {spec.id}, row {' | '.join(key)!r}"
    matches = [i for i in rows if tuple(split_row(lines[i])[:k]) == key]
    if len(matches) <= occurrence:
      errors.append(f"{name}: not in the document")
      continue
    index = matches[occurrence]
    current = split_row(lines[index])
    if len(current) != k + len(cells):
      errors.append(f"{name}: {len(current)} cells, the spec gives {k + len(cells)}")
      continue
    changed = False
    for column, value in enumerate(cells, start=k):
      if value is not None and current[column] != value:
        label = header[column] if column < len(header) and header[column] else str(column)
        differences.append(f"{name}, column {label!r}: the document has {current[column]!r}, "
                           f"the files give {value!r}")
        current[column], changed = value, True
    if changed:
      lines[index] = join_row(current)
  return differences, errors


def _normalised(text: str) -> str:
  return " ".join(text.split())


def quote_problems(document: str, results: Results,
                   quotes=QUOTES) -> tuple[list[str], list[str]]:
  """``(differences, errors)``: each quote whose text, computed from the files, the document
  lacks, and each whose files cannot be read."""
  flat = _normalised(document)
  differences, errors = [], []
  for quote in quotes:
    try:
      text = quote.text(results)
    except (OSError, KeyError, ValueError, IndexError, StopIteration) as err:
      errors.append(f"quote {quote.id}: its files cannot be read: {type(err).__name__}: {err}")
      continue
    if _normalised(text) not in flat:
      differences.append(f"quote {quote.id}: the document lacks {text!r} (from the files)")
  return differences, errors


def check(document: str, results: Results, tables=TABLES, quotes=QUOTES) -> list[str]:
  """Every place where the document and the files disagree (empty: none)."""
  _, differences, errors = render(document, results, tables)
  quoted, unread = quote_problems(document, results, quotes)
  return differences + quoted + errors + unread
