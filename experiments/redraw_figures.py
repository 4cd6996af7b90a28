"""Draw every committed figure again from the files beside it, so that all of them carry the
current key, ``provenance.FIGURE_VERSION`` and their provenance along their bottom: the
experiment, the scale, the seeds and the machine, read from the runs' own files
(``reporting.provenance``; ``tests/test_committed_figures.py`` checks them).

  python experiments/redraw_figures.py
  python experiments/redraw_figures.py --authors=<clone of the NAP authors' repository>

Redrawn from their data: each sweep's accuracy.png, case_accuracy.png and learning_curves.png
(config.json, summary.json, metrics.npz), each report card's accuracy.png (report.json), the
analyses whose numbers are committed (``ANALYSES``: geometry, unselectable keys, the causal LM,
the majority task, the mixing ratios per layer, the ALBERT pre-training and the fine-tunings) and,
given ``--authors``, the pixel plots beside the authors' (``BESIDE_AUTHORS``). Stamped as they are
(``provenance.restamp``: their pixels kept, the provenance added below): the figures whose data
were never committed (``STAMPED``: a trained model's per-key weight sums, a model's token-by-token
contributions, the simulated point clouds), and the plots beside the authors' without
``--authors``. Nothing is trained and no number changes.
"""
import glob
import json
import os

import numpy as np
from absl import app, flags

from normattn_jax.cli.command import parse_flags
from normattn_jax.reporting import analysis_figures, figures, provenance, training_figures
from normattn_jax.sweep import artifacts, seeds

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A figure beside the authors' -> (the glob of our runs under results/, the authors' folder in
# their repository).
BESIDE_AUTHORS = {
    "fig5_first_token_gpu/pixels_beside_authors.png":
        ("fig5_first_token_gpu/d*_*", "paper_results/cases/first_token_output/var_dim"),
}
# Figures whose data are not committed: stamped in place.
STAMPED = ("mode_collapse/unbalanced.png", "mode_collapse/balanced.png",
           "mode_collapse/center_distance.png", "explaining_away/explaining_away.png",
           "mixing/mixing_tokens.png")

_RESULTS = flags.DEFINE_string("results", os.path.join(REPO, "results"),
                               "The folder of the committed results.")
_AUTHORS = flags.DEFINE_string("authors", None, "A clone of the NAP authors' repository; without "
                               "it the figures beside theirs are stamped as they are.")


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


def read(root: str, relative: str):
  with open(os.path.join(root, relative)) as f:
    return json.load(f)


def validation_rows(workdir: str) -> list[dict]:
  """A pre-training's held-out evaluations (``train.pretrain.validation_rows``, read here
  without the pre-training's packages)."""
  with open(os.path.join(workdir, "history.jsonl")) as f:
    return [row for row in map(json.loads, f) if row.get("split") == "validation"]


def draw_geometry(root: str) -> list[str]:
  result = read(root, "geometry/geometry.json")
  analysis_figures.sinkhorn(result["sinkhorn"], os.path.join(root, "geometry", "sinkhorn.png"))
  analysis_figures.pooling_scale({int(n): s for n, s in result["pooling"].items()},
                                 os.path.join(root, "geometry", "pooling_scale.png"))
  return ["geometry/sinkhorn.png", "geometry/pooling_scale.png"]


def draw_unselectable(root: str) -> list[str]:
  analysis_figures.unselectable(read(root, "unselectable/unselectable.json"),
                                os.path.join(root, "unselectable", "unselectable.png"))
  return ["unselectable/unselectable.png"]


def draw_causal_lm(root: str) -> list[str]:
  analysis_figures.causal_lm_loss(read(root, "unselectable_lm/summary.json"),
                                  os.path.join(root, "unselectable_lm", "train_loss.png"))
  return ["unselectable_lm/train_loss.png"]


def draw_majority(root: str) -> list[str]:
  from normattn_jax.analysis import majority

  workdir = os.path.join(root, "majority")
  analysis_figures.majority(majority.read_curves(workdir), read(root, "majority/config.json")[
      "num_seeds"], os.path.join(workdir, "majority.png"))
  return ["majority/majority.png"]


def draw_mixing(root: str) -> list[str]:
  out = []
  for record, figure in (("mixing.json", "mixing_layers.png"),
                         ("mixing_authors.json", "mixing_layers_authors.png")):
    analysis_figures.mixing_layers(read(root, f"mixing/{record}"),
                                   os.path.join(root, "mixing", figure))
    out.append(f"mixing/{figure}")
  return out


def draw_albert(root: str) -> list[str]:
  workdir = os.path.join(root, "albert_tiny")
  schemes = list(read(root, "albert_tiny/comparison.json"))
  training_figures.pretraining_curves(
      {scheme: validation_rows(os.path.join(workdir, scheme)) for scheme in schemes},
      os.path.join(workdir, "curves.png"))
  u = np.asarray(read(root, "albert_tiny/hnas/summary.json")["hybrid_weights_per_head"])
  training_figures.hybrid_weights(u, os.path.join(workdir, "hybrid_weights.png"))
  return ["albert_tiny/curves.png", "albert_tiny/hybrid_weights.png"]


def draw_finetuning(root: str) -> list[str]:
  out = []
  for summary_path in sorted(glob.glob(os.path.join(root, "finetune_*", "*", "summary.json"))):
    workdir = os.path.dirname(summary_path)
    with open(summary_path) as f:
      summary = json.load(f)
    training_figures.finetuning_curves(summary, os.path.join(workdir, "metrics.npz"),
                                       os.path.join(workdir, "curves.png"))
    out.append(os.path.relpath(os.path.join(workdir, "curves.png"), root))
  return out


ANALYSES = (draw_geometry, draw_unselectable, draw_causal_lm, draw_majority, draw_mixing,
            draw_albert, draw_finetuning)


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
  analyses = [figure for draw in ANALYSES for figure in draw(root)]
  stamped = list(STAMPED)
  for figure, (pattern, authors) in BESIDE_AUTHORS.items():
    if _AUTHORS.value:
      runs = [seeds.OurSweep.read(w) for w in sorted(glob.glob(os.path.join(root, pattern)))]
      figures.pixels_beside_authors(
          seeds.pixel_grids(runs, os.path.join(_AUTHORS.value, authors)),
          os.path.join(root, figure), figures.lengths(runs[0].plan))
      analyses.append(figure)
    else:
      stamped.append(figure)
  for figure in stamped:
    path = os.path.join(root, figure)
    provenance.restamp(path, provenance.of_figure(path))
  print(f"redrew the figures of {len(workdirs)} sweeps, {len(reports)} report cards and "
        f"{len(analyses)} of analyses; stamped {len(stamped)} as they are "
        f"(version {provenance.FIGURE_VERSION})")


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
