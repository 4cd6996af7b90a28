"""Finished sweeps seed by seed, beside the NAP authors' stored seeds:
normattn-compare-seeds --authors=<paper_results folder> --tests=nap:bert,nap:mte \
  results/<run> ...

Prints, per arch x learning rate (x static point), each seed's best training and validation
accuracy over training, how many seeds learned the task and the paper's pixel values (min / mean
/ max over seeds), ours and the authors' for the same cell; then one-sided Mann-Whitney U tests
between archs, each at its best learning rate. On the case task each seed's best argmin / first /
argmax accuracy is printed too, and a seed has learned when it learned all three cases (each
above chance by a margin: ``sweep.seeds.case_rule``, the report card's rule), the NAP paper's
criterion; the authors stored no per-case accuracies, so their seeds are not judged by it.
Elsewhere a seed has learned when its best training accuracy reaches ``--threshold``.
``--authors`` is a folder of OliverRichter/normalized-attention's ``paper_results`` (e.g.
``paper_results/cases/first_token_output/var_dim``) whose swept hyper-parameter is read from our
config (d for ``var_dim``, S for ``var_vocab``); archs they stored no results for show ours
alone, but a missing folder, one with none of the runs' archs, or an arch with one of its two
files (or an empty one) is refused. A cell is matched by the swept value and the learning rate
only: the authors' other settings are the paper's defaults (N = 128, L = 2, H = 4, batch 32,
3200 steps, or 400 S for ``var_vocab``), so their cells are our cells' peers only for runs at
those settings.
``--out`` writes the whole report as JSON; ``--figure`` draws the authors' pixel plots beside ours
on one grid (their whole sweep, with the cells we ran in place).
"""
from absl import app, flags

from normattn_jax.reporting import figures
from normattn_jax.sweep import seeds
from normattn_jax.train.checkpoint import write_json

_AUTHORS = flags.DEFINE_string("authors", None, "A folder of the authors' paper_results pickles.")
_THRESHOLD = flags.DEFINE_float("threshold", 0.8,
                                "Best training accuracy at which a seed has learned a task "
                                "without cases (the case task: all three cases learned).")
_TESTS = flags.DEFINE_list("tests", [], "Pairs better:worse of archs to test, e.g. nap:bert.")
_OUT = flags.DEFINE_string("out", None, "Write the report as JSON here.")
_FIGURE = flags.DEFINE_string("figure", None,
                              "Draw the authors' pixel plots beside ours here (needs --authors).")


def parse_tests(items) -> tuple:
  pairs = tuple(tuple(item.split(":")) for item in items)
  bad = [":".join(p) for p in pairs if len(p) != 2 or not all(p)]
  if bad:
    raise app.UsageError(f"--tests={','.join(items)}: {bad[0]!r} is no pair better:worse")
  return pairs


def _main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("give the workdir of at least one finished sweep")
  if not 0 < _THRESHOLD.value <= 1:
    raise app.UsageError(f"--threshold={_THRESHOLD.value} must lie in (0, 1]")
  if _FIGURE.value and not _AUTHORS.value:
    raise app.UsageError(f"--figure={_FIGURE.value} draws the authors' plots: give --authors")
  try:  # our workdirs and the authors' folder: refused by the file at fault
    runs = [seeds.OurSweep.read(w) for w in workdirs]
    report = seeds.compare_with_authors(runs, _AUTHORS.value, _THRESHOLD.value,
                                        parse_tests(_TESTS.value))
  except (FileNotFoundError, ValueError) as err:
    raise app.UsageError(str(err)) from None
  report["runs"] = workdirs
  print(seeds.markdown(report))
  if _OUT.value:
    write_json(_OUT.value, report, indent=1)
  if _FIGURE.value:
    figures.pixels_beside_authors(seeds.pixel_grids(runs, _AUTHORS.value), _FIGURE.value,
                                  figures.lengths(runs[0].plan))


def main():
  """The console script ``normattn-compare-seeds``."""
  app.run(_main)


if __name__ == "__main__":
  main()
