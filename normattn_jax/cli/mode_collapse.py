"""Ding et al., Appendix E (Fig. 6-9): UNAS vs DNAS self-attention on two Gaussian clusters, and
the analytic centre distances of Eq. 13/14 against the simulated update (Fig. 7). Writes
mode_collapse.json and the figures to --workdir.

  normattn-mode-collapse --workdir results/mode_collapse
"""
import json
import os

from absl import app, flags

from normattn_jax.cli.command import first_sentence, parse_flags
from normattn_jax.analysis import mode_collapse as mc
from normattn_jax.reporting import analysis_figures, provenance

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figures.")
flags.mark_flags_as_required(["workdir"])


def _main(argv):
  del argv
  workdir = _WORKDIR.value
  os.makedirs(workdir, exist_ok=True)
  provenance.write_note(workdir, experiment=first_sentence(__doc__))
  result = {}
  for name, (n0, n1) in mc.CLOUDS.items():
    points, labels = mc.two_gaussians(n0=n0, n1=n1)
    clouds = mc.trajectories(points)
    result[name] = mc.cluster_counts(clouds)
    analysis_figures.clusters(clouds, result[name], labels, f"{n0} vs {n1} points",
                              os.path.join(workdir, f"{name}.png"))
  check = mc.center_distance_check()
  result["max_abs_error_eq13_eq14_vs_simulation"] = mc.largest_error(check)
  analysis_figures.center_distances(check, os.path.join(workdir, "center_distance.png"))
  with open(os.path.join(workdir, "mode_collapse.json"), "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(result))


def main():
  """The console script ``normattn-mode-collapse``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
