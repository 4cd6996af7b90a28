"""One normalisation through the four papers' diagnostics: its report card.

  python experiments/report_card.py --normalization=dnas --workdir=cards/dnas --scale=cpu
  python experiments/report_card.py --plugins=my_norms --normalization=tempered_sigmoid \
      --options='{"temperature": 2.0}' --workdir=cards/tempered --scale=smoke

Trains the normalisation in the MTE layout on the NAP paper's case, first-token and mode tasks
(a learning-rate grid x seeds), beside softmax (MTE) and NAP trained once per scale in
--baselines_dir (default: <parent of workdir>/baselines/<scale>, shared by every card there);
then explaining away and the mode-collapse toy (DNAS paper), unselectable keys (LayerNorm
paper) and the cost against softmax. Writes WORKDIR/report.md, report.json and accuracy.png.
--scale: smoke (minutes, numbers that mean little), cpu (at most 20 minutes on 2 cores, the
baselines aside), paper (the NAP paper's sizes, for a GPU). A killed card resumes when run again;
a workdir of another normalisation, options or scale is refused (exit code 2). The library:
normattn_jax/reporting/report_card.py.
"""
import json
import sys

from absl import app, flags, logging

from normattn_jax.registry import load_plugins
from normattn_jax.reporting import report_card
from normattn_jax.train import cli
from normattn_jax.train.checkpoint import WorkdirError

_NORMALIZATION = flags.DEFINE_string("normalization", None, "A registered normalisation.")
_OPTIONS = flags.DEFINE_string("options", "{}", "Its options as JSON, e.g. '{\"temperature\": 2}'.")
_PLUGINS = cli.define_plugins_flag()
_WORKDIR = flags.DEFINE_string("workdir", None, "The card's folder.")
_SCALE = flags.DEFINE_enum("scale", "smoke", tuple(report_card.SCALES), "The card's sizes.")
_BASELINES = flags.DEFINE_string("baselines_dir", None, "The shared softmax and NAP runs; "
                                 "default <parent of workdir>/baselines/<scale>.")
_PROGRESS = flags.DEFINE_bool("progress", True, "Show the sweeps' progress bars.")
_CPU_DEVICES = cli.define_cpu_devices_flag()
flags.mark_flags_as_required(["normalization", "workdir"])


def parse_options(text: str) -> dict:
  """The --options JSON object."""
  try:
    options = json.loads(text)
  except ValueError as err:
    raise app.UsageError(f"--options={text}: not JSON ({err})") from None
  if not isinstance(options, dict):
    raise app.UsageError(f"--options={text}: must be a JSON object of option names to values")
  return options


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  cli.split_cpu(_CPU_DEVICES.value)
  cli.enable_compilation_cache()
  load_plugins(_PLUGINS.value)
  options = parse_options(_OPTIONS.value)
  try:
    report = report_card.run_card(_NORMALIZATION.value, options, _SCALE.value, _WORKDIR.value,
                                  baselines_dir=_BASELINES.value,
                                  show_progress=_PROGRESS.value)
  except ValueError as err:  # WorkdirError is one
    print(f"error: {err}", file=sys.stderr)
    sys.exit(2 if isinstance(err, WorkdirError) else 1)
  print("\n".join(report["verdicts"].values()))
  print(f"report: {_WORKDIR.value}/report.md")


if __name__ == "__main__":
  app.run(main)
