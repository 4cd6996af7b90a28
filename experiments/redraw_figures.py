"""Draw every committed figure of ``reporting.figures`` again from the files beside it, so that
all of them carry the current key and ``figures.FIGURE_VERSION`` (which
``tests/test_committed_figures.py`` checks).

  python experiments/redraw_figures.py
  python experiments/redraw_figures.py --authors=<clone of the NAP authors' repository>

Redrawn: each sweep's accuracy.png, case_accuracy.png and learning_curves.png (from its
config.json, summary.json and metrics.npz), each report card's accuracy.png (from its
report.json) and, given ``--authors``, the pixel plots beside the authors' (``BESIDE_AUTHORS``,
from our runs and the authors' pickles). Nothing is trained and no number changes.
"""
import glob
import json
import os

from absl import app, flags

from normattn_jax.reporting import figures, seeds
from normattn_jax.train import artifacts
from normattn_jax.train import cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A figure beside the authors' -> (the glob of our runs under results/, the authors' folder in
# their repository).
BESIDE_AUTHORS = {
    "fig5_first_token_gpu/pixels_beside_authors.png":
        ("fig5_first_token_gpu/d*_*", "paper_results/cases/first_token_output/var_dim"),
}

_RESULTS = flags.DEFINE_string("results", os.path.join(REPO, "results"),
                               "The folder of the committed results.")
_AUTHORS = flags.DEFINE_string("authors", None, "A clone of the NAP authors' repository; without "
                               "it the figures beside theirs are left as they are.")


def sweep_workdirs(root: str) -> list[str]:
  """Every finished sweep under ``root``: a folder with a sweep's config.json (archs and a sweep
  section), its summary.json and metrics.npz."""
  out = []
  for config_path in sorted(glob.glob(os.path.join(root, "**", "config.json"), recursive=True)):
    workdir = os.path.dirname(config_path)
    with open(config_path) as f:
      config = json.load(f)
    if {"archs", "sweep"} <= set(config) and all(
        os.path.exists(os.path.join(workdir, name)) for name in (artifacts.SUMMARY,
                                                                 artifacts.METRICS)):
      out.append(workdir)
  return out


def card_reports(root: str) -> list[str]:
  """Every report card's report.json under ``root``."""
  return sorted(glob.glob(os.path.join(root, "report_cards", "*", "report.json")))


def main(argv):
  del argv
  root = _RESULTS.value
  workdirs = sweep_workdirs(root)
  for workdir in workdirs:
    figures.draw_finished_sweep(workdir)
  reports = card_reports(root)
  for path in reports:
    with open(path) as f:
      figures.card_accuracy(json.load(f), os.path.join(os.path.dirname(path), "accuracy.png"))
  beside = 0
  if _AUTHORS.value:
    for figure, (pattern, authors) in BESIDE_AUTHORS.items():
      runs = [seeds.OurSweep.read(w) for w in sorted(glob.glob(os.path.join(root, pattern)))]
      figures.pixels_beside_authors(
          seeds.pixel_grids(runs, os.path.join(_AUTHORS.value, authors)),
          os.path.join(root, figure), figures.lengths(runs[0].plan))
      beside += 1
  print(f"redrew the figures of {len(workdirs)} sweeps, {len(reports)} report cards and "
        f"{beside} beside the authors' (version {figures.FIGURE_VERSION})")


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
