"""Train one arch of finished sweeps again: normattn-retrain --arch=bert
results/<run> ...

The arch trains at every static point with the run's own config in <run>/retrain_<arch> (a
killed run resumes when restarted with the same command), its curves replace the arch's in
<run>/metrics.npz, the run is scored again and its figures redrawn; <run>/retrained.json records
it. It trains on the devices each run was made on: a CPU is split into the device count its
versions.json records (runs of different counts: one command per count), and a run of other
devices than this process has is refused (exit code 2), as is one whose normalisation or task is
not registered: --plugins=my_norms imports the modules that register them first. The library:
normattn_jax/sweep/retrain.py.
"""
import sys

from absl import app, flags, logging

from normattn_jax.registry import load_plugins
from normattn_jax.reporting import figures
from normattn_jax.cli import command as cli
from normattn_jax.sweep import retrain
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.sweep.scoring import best_lines

_ARCH = flags.DEFINE_string("arch", None, "The arch to train again, one of each run's archs.")
_PLUGINS = cli.define_plugins_flag()
flags.mark_flag_as_required("arch")


def refuse(err: WorkdirError):
  print(f"error: {err}", file=sys.stderr)
  sys.exit(cli.WORKDIR_ERROR_EXIT)


def _main(argv):
  workdirs = argv[1:]
  if not workdirs:
    raise app.UsageError("give the workdir of at least one finished sweep")
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the progress bar
  load_plugins(_PLUGINS.value)
  try:  # everything checked before any run trains
    cli.split_cpu(retrain.cpu_devices_for(workdirs))  # before JAX starts its backends
    for workdir in workdirs:
      retrain.check_retrainable(workdir, _ARCH.value)
  except WorkdirError as err:
    refuse(err)
  except (FileNotFoundError, ValueError) as err:
    raise app.UsageError(str(err)) from None
  for workdir in workdirs:
    try:
      summary = retrain.retrain_arch(workdir, _ARCH.value)
    except WorkdirError as err:  # e.g. its sub-workdir in use by another run
      refuse(err)
    figures.draw_finished_sweep(workdir)
    print(workdir)
    print("\n".join(best_lines(summary)))


def main():
  """The console script ``normattn-retrain``."""
  app.run(_main)


if __name__ == "__main__":
  main()
