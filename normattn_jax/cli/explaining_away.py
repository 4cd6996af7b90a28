"""Ding et al., Fig. 1: the distribution of each key's total attention weight, log sum_i pi_ij, in
trained MTE-layout models with UNAS (softmax) and DNAS weights, on the case-distinction task.
Trains both with the grid engine (one program each), then writes explaining_away.json and
explaining_away.png to --workdir.

  normattn-explaining-away --workdir results/explaining_away
"""
import json
import os

from absl import app, flags

from normattn_jax.cli.command import first_sentence, parse_flags
from normattn_jax.analysis import explaining_away as ea
from normattn_jax.reporting import analysis_figures, provenance

_WORKDIR = flags.DEFINE_string("workdir", None, "Directory for the json and the figure.")
_STEPS = flags.DEFINE_integer("steps", 800, "Training steps of each model.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 32, "Sequence length S of the case task.")
_D_MODEL = flags.DEFINE_integer("d_model", 32, "Model dimension.")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 0.0081, "Adam's peak learning rate.")
flags.mark_flags_as_required(["workdir"])


def _main(argv):
  del argv
  args = {flag.name: flag.value
          for flag in (_WORKDIR, _STEPS, _SEQ_LEN, _D_MODEL, _LEARNING_RATE)}
  workdir, seq_len = args["workdir"], args["seq_len"]
  os.makedirs(workdir, exist_ok=True)
  provenance.write_note(workdir, experiment=first_sentence(__doc__))
  result, sums = {}, {}
  for name, normalization in ea.SCHEMES.items():
    sums[name], result[name] = ea.trained_key_sums(
        normalization, steps=args["steps"], seq_len=seq_len, d_model=args["d_model"],
        learning_rate=args["learning_rate"])
  analysis_figures.explaining_away(sums, seq_len, os.path.join(workdir, "explaining_away.png"))
  with open(os.path.join(workdir, "explaining_away.json"), "w") as f:
    json.dump({"args": args, **result}, f, indent=1)
  print(json.dumps(result, indent=1))


def main():
  """The console script ``normattn-explaining-away``."""
  app.run(_main, flags_parser=parse_flags)


if __name__ == "__main__":
  main()
