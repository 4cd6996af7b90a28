"""Sinkhorn residuals per iteration (Ding et al., Section 3.2) and the sequence-length dependence of
pooled outputs at initialisation (Richter & Wattenhofer, Fig. 1 middle/right, Appendix B).
Writes geometry.json, sinkhorn.png and pooling_scale.png to --workdir.

  python experiments/analyze_geometry.py --workdir results/geometry
"""
import json
import os

from absl import app, flags

from normattn_jax.analysis import geometry
from normattn_jax.reporting import analysis_figures
from normattn_jax.train import cli

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figures.")
flags.mark_flags_as_required(["workdir"])


def main(argv):
  del argv
  workdir = _WORKDIR.value
  os.makedirs(workdir, exist_ok=True)
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


if __name__ == "__main__":
  app.run(main, flags_parser=cli.parse_flags)
