"""Fig. 1c/1d of Brody et al.: how often n standard-normal keys in d dims include an unselectable
one, without and with LayerNorm. Writes unselectable.json and unselectable.png to --workdir.

  normattn-unselectable --workdir results/unselectable --runs 20
"""
import json
import os
import time

from absl import app, flags

from normattn_jax.cli.command import first_sentence, parse_flags
from normattn_jax.analysis.unselectable import fraction_grids
from normattn_jax.reporting import analysis_figures, provenance

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figure.")
_RUNS = flags.DEFINE_integer("runs", 100, "draws per cell (the paper: 100)", lower_bound=1)
_DIMS = flags.DEFINE_list("dims", [str(d) for d in range(3, 16)], "Key dimensions d (>= 2).")
_NS = flags.DEFINE_list("ns", [str(n) for n in range(3, 61)], "Numbers of keys n (>= 1).")
flags.mark_flags_as_required(["workdir"])


def integers(flag, low: int):
  """The integers of a list flag, each >= ``low``."""
  try:
    values = [int(x) for x in flag.value]
  except ValueError:
    raise app.UsageError(f"--{flag.name} takes comma-separated integers, "
                         f"got {','.join(flag.value)}") from None
  if not values:
    raise app.UsageError(f"--{flag.name} must not be empty")
  if min(values) < low:
    raise app.UsageError(f"--{flag.name}={','.join(flag.value)}: {min(values)} is below "
                         f"{low}, the smallest it takes")
  return values


def _main(argv):
  del argv
  # d >= 2: LayerNorm (Fig. 1d) maps a single coordinate to 0 / 0
  dims, ns = integers(_DIMS, 2), integers(_NS, 1)
  workdir, runs = _WORKDIR.value, _RUNS.value
  os.makedirs(workdir, exist_ok=True)
  provenance.write_note(workdir, experiment=first_sentence(__doc__))
  start = time.perf_counter()
  result = {"dims": dims, "ns": ns, "runs": runs, **fraction_grids(dims, ns, runs)}
  with open(os.path.join(workdir, "unselectable.json"), "w") as f:
    json.dump(result, f, indent=1)
  analysis_figures.unselectable(result, os.path.join(workdir, "unselectable.png"))
  print(f"{len(dims) * len(ns) * 2} cells x {runs} runs in "
        f"{time.perf_counter() - start:.0f} s; {workdir}/unselectable.png")


def main():
  """The console script ``normattn-unselectable``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
