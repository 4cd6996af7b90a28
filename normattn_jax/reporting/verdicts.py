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

from normattn_jax.reporting import reproduction as rep
from normattn_jax.reporting.reproduction import ARCH_NAMES, Results, pct, rate

# A number as the document writes it: 1,000; 94.3; 2.19e-4; 0.027. A digit glued to a letter, a
# dot, a caret or a slash before it (L1, d128, .json, 0.3^7, N/2) is part of a name or a power.
NUMBER = re.compile(r"(?<![\w.^/])(?:\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)(?![\w])")
CODE = re.compile(r"`[^`]*`")
PARAGRAPH = re.compile(r"\n[ \t]*\n")
VERDICT_OPENING = "**Verdict"

# The papers' values that verdicts compare with, as their papers print them.
PAPERS = {
    # NAP paper, Table 3 (N = 128, d = 128): best mean training / validation accuracy.
    "nap.table3": {"nap": ("94.5", "83.9"), "bert": ("36.6", "36.7"), "mte": ("66.5", "50.6"),
                   "max": ("97.8", "88.5"), "non": ("23.2", "29.6"), "sum": ("22.8", "28.5")},
}


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
  """Each verdict whose paragraph is missing, or whose numbers differ from its spec's."""
  out = []
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
  want = {k: float(v) for k, v in (params or {}).items()}
  return next(c for c in r.json(f"{workdir}/summary.json")["cells"]
              if c["arch"] == arch and abs(c["learning_rate"] / lr - 1) < 1e-2
              and {k: float(v) for k, v in c["params"].items()} == want)


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
  same_cell = lambda arch, d: [
      f"{c['ours_vs_authors'][s]:.2f}".replace("1.00", "1.0")
      for c in [next(c for c in rep.seed_cells(r, f"{FIG5_GPU}/seeds_authors.json", at(d))[arch]
                     if abs(c["learning_rate"] / seed_report(r, seeds_json, at(d), arch)[
                         "learning_rate"] - 1) < 1e-2)]
      for s in ("train_acc", "val_acc")]
  pixels = lambda d, arch: rep.case_pixel(r, f"{FIG5_GPU}/d{d}_{arch}", arch, {"model.d_model": d})
  weak64 = {a: min(pixels(64, a)[1]) for a in ARCH_NAMES}
  weak128_others = max(min(pixels(128, a)[1]) for a in ARCH_NAMES if a not in ("nap", "max"))
  mte64 = seed_report(r, seeds_json, at(64), "mte")
  nap64 = seed_report(r, seeds_json, at(64), "nap")
  mte64_cases = pixels(64, "mte")[1]
  authors_nap64 = next(c for c in rep.seed_cells(r, f"{FIG5_GPU}/seeds_authors.json", at(64))["nap"]
                       if abs(c["learning_rate"] / nap64["learning_rate"] - 1) < 1e-2)
  return ([*case_means(r, f"{FIG5_GPU}/d128_nap", "nap", {"model.d_model": 128}),
           *case_means(r, f"{FIG5_GPU}/d128_max", "max", {"model.d_model": 128}),
           pct(weak128_others),
           pct(nap128["train_acc"]["pixel"]["mean"]), pct(nap128["val_acc"]["pixel"]["mean"]),
           *PAPERS["nap.table3"]["nap"], *same_cell("nap", 128),
           max(tests, key=float),
           pct(weak64["nap"]), pct(weak64["max"]),
           pct(max(v for a, v in weak64.items() if a not in ("nap", "max"))),
           pct(mte64["ours"]["train_acc"]["pixel"]["mean"]),
           pct(nap64["ours"]["train_acc"]["pixel"]["mean"]),
           p_test(r, seeds_json, "nap", "mte", at(64)),
           pct(mte64_cases[0]), pct(mte64_cases[2]),
           pct(nap64["ours"]["train_acc"]["pixel"]["mean"]),
           pct(authors_nap64["authors"]["train_acc"]["pixel"]["mean"]),
           f"{authors_nap64['ours_vs_authors']['train_acc']:.2f}"])


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


VERDICTS = (
    Verdict("fig5-gpu", "**Verdict: reproduced at d = 128, the paper's setting; partly at d = 64.**",
            fig5_gpu, literals="128 64 128 3 5 5 64 64 3 64 5 5"),
    Verdict("fig5-reduced", "**Verdict: partly.** Observations (1) every model reaches the",
            fig5_reduced, literals="1 2 3 10 600 32 3 3 5 128 3"),
    Verdict("fig4", "**Verdict: consistent with the trend, not with (3) as stated.**", fig4,
            literals="3 64 3 64 50 256"),
    Verdict("fig13", "**Verdict: (1) partly reproduced (BERT and MTE only), (2) not.**", fig13,
            literals="1 2 1 0.027 8 32 128 128 8 0.0081 0.00243 8 128 0.00243 200 0.027 8 32 "
                     "32 128 0.00243 0.0081 0.00243 8 32 0.027 128 8 32 3 200 128 8"),
)
