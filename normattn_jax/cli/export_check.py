"""Every compiled program of the library exported for TPU and CUDA, from any machine:
normattn-export-check [--platforms tpu,cuda] [--normalization NAME]
  [--kinds grid,pretrain,...] [--plugins module]

Lists the programs (``cli.exports.programs``: the sweep grids, pre-training, fine-tuning,
the Linen and NNX modules, a decode step, the report card's measurements), exports each with
``jax.export`` for each platform and checks it: no host callback in a training step, cuDNN's
fused attention in the CUDA export of every bf16 "fused" program, the Pallas kernels where
claimed (the TPU flash attention, the feed-forward kernels), the configured dtypes. Prints a
line per export and the counts per kind; exits 1 naming the program, the op and the platform of
every failure. A plugin's normalisation: ``--plugins my_module --normalization my_name``.
"""
import sys
import time

from absl import app, flags

from normattn_jax.registry import load_plugins
from normattn_jax.cli import exports

_PLATFORMS = flags.DEFINE_list("platforms", list(exports.PLATFORMS),
                               "Platforms to export for (tpu, cuda).")
_NORMALIZATIONS = flags.DEFINE_list("normalization", [],
                                    "Registered normalisations to check (default: all).")
_KINDS = flags.DEFINE_list("kinds", list(exports.KINDS), "Kinds of program to check.")
_PLUGINS = flags.DEFINE_list("plugins", [], "Modules to import first, e.g. one that registers "
                                            "a normalisation.")
_QUIET = flags.DEFINE_bool("quiet", False, "Print failures and counts only.")


def show(result: exports.Result) -> None:
  status = "ok" if not result.problems else "FAILED: " + "; ".join(result.problems)
  print(f"{result.seconds:6.1f}s  {result.platform:4s}  {result.program}  {status}", flush=True)


def _main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments {argv[1:]}")
  load_plugins(_PLUGINS.value)
  try:
    programs = exports.programs(_NORMALIZATIONS.value or None, _KINDS.value)
    platforms = exports.check_platforms(_PLATFORMS.value)
  except ValueError as err:
    raise app.UsageError(str(err)) from None
  asked = ", ".join(_NORMALIZATIONS.value) or "every normalisation"
  if not programs:  # a check of nothing would pass
    raise app.UsageError(f"no program of the kinds {_KINDS.value} for {asked} (the card's and "
                         f"decode's are only of normalisations that may run causal or decode)")
  print(f"{len(programs)} programs x {len(platforms)} platforms ({', '.join(platforms)})")
  for kind in _KINDS.value:
    if not any(program.kind == kind for program in programs):
      print(f"{kind:9s}    0 programs: none for {asked}")
  began = time.perf_counter()
  on_result = None if _QUIET.value else show
  results = exports.check_exports(programs, platforms, on_result=on_result)
  for kind, entry in exports.counts(results).items():
    print(f"{kind:9s} {entry['programs']:4d} programs {entry['exports']:4d} exports "
          f"{entry['failed']:3d} failed")
  print(f"{len(results)} exports in {time.perf_counter() - began:.0f} s")
  failed = exports.failures(results)
  for line in failed:
    print("FAILED", line, file=sys.stderr)
  return 1 if failed else 0


def main():
  """The console script ``normattn-export-check``."""
  app.run(_main)


if __name__ == "__main__":
  main()
