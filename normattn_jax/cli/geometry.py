"""Sinkhorn residuals per iteration (Ding et al., Section 3.2) and the sequence-length dependence of
pooled outputs at initialisation (Richter & Wattenhofer, Fig. 1 middle/right, Appendix B).
Writes geometry.json, sinkhorn.png and pooling_scale.png to --workdir.

  normattn-geometry --workdir results/geometry
"""
import json
import os

from absl import app, flags

from normattn_jax.cli.command import first_sentence, parse_flags
from normattn_jax.analysis import geometry
from normattn_jax.reporting import analysis_figures, provenance

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figures.")
flags.mark_flags_as_required(["workdir"])


def _main(argv):
  del argv
  workdir = _WORKDIR.value
  os.makedirs(workdir, exist_ok=True)
  provenance.write_note(workdir, experiment=first_sentence(__doc__))
  sinkhorn = geometry.sinkhorn_by_logit_scale()
  analysis_figures.sinkhorn(sinkhorn, os.path.join(workdir, "sinkhorn.png"))
  scales = geometry.pooled_output_scales()
  exponents = geometry.pooling_exponents(scales)
  analysis_figures.pooling_scale(scales, os.path.join(workdir, "pooling_scale.png"))
  result = {"sinkhorn": sinkhorn, "pooling": {str(n): s for n, s in scales.items()},
            "log_log_slope_from_N_4": exponents}
  with open(os.path.join(workdir, "geometry.json"), "w") as f:
    json.dump(result, f, indent=1)
  print(json.dumps(exponents, indent=1))


def main():
  """The console script ``normattn-geometry``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
