"""Train a sweep: normattn-sweep --config <name> --workdir runs/<name>

Every config field can be overridden, e.g. --config.model.d_model=64
--config.archs="('nap','max')". A killed run resumes from its checkpoints when restarted with
the same command; a workdir of another config is refused (exit code 2) unless --afresh moves it
aside. --distributed joins the processes of a multi-host run (every host runs the same command;
on a TPU pod or under SLURM they are detected, elsewhere give --coordinator_address,
--num_processes and --process_id): the models are sharded over every device of every host.
--plugins=my_norms imports modules first, e.g. one that registers a normalisation of your own
for --config.attention.name=<its name> (its options: --config.attention.options.<option>=...).
--max_minutes stops after the evaluation that passes that wall time, its checkpoint written
(exit code 3); the same command resumes (benchmarks/gpu_checks.sh ends a loan's sweeps so).
--estimate trains nothing and writes nothing (no --workdir): it prints, per grid and in all, the
model-steps, FLOPs, bytes and programs, and the wall time projected from a few timed chunks on
this machine (``normattn_jax.sweep.estimate``); --estimate_rates=<GFLOP>:<model-steps/s>,...
projects the training time from rates measured elsewhere instead, and with
--estimate_costs=<an earlier --estimate's output> does so without compiling anything
(--estimate_compile_s=<one grid's compile seconds> adds the compiles the devices wait for,
--estimate_compile_threads=<k> of them at once).
"""

from absl import app, flags, logging

from normattn_jax.cli import command as cli

_CONFIG = cli.define_config_flag(None, "A sweep config.")
_ESTIMATE = flags.DEFINE_bool(
    "estimate", False, "Print the sweep's model-steps, FLOPs, bytes, programs and projected "
    "wall time on this machine, from a few timed chunks; train and write nothing.")
_ESTIMATE_STEPS = flags.DEFINE_integer(
    "estimate_steps", 2, "With --estimate: training steps per timed chunk.", lower_bound=1)
_ESTIMATE_RATES = flags.DEFINE_list(
    "estimate_rates", [], "With --estimate: <GFLOP per model-step>:<model-steps/s> pairs "
    "measured elsewhere; the training time is projected from them (estimate.rate_at), nothing "
    "is timed.")
_ESTIMATE_COSTS = flags.DEFINE_string(
    "estimate_costs", None, "With --estimate and --estimate_rates: a file holding an earlier "
    "--estimate's output, whose grids are projected again from the rates, nothing compiled.")
_ESTIMATE_COMPILE_S = flags.DEFINE_float(
    "estimate_compile_s", None, "With --estimate_costs: the seconds one grid compiles in, "
    "measured elsewhere; the total adds the compiles the devices wait for, the longest grids "
    "training first while the others compile.", lower_bound=0)
_ESTIMATE_COMPILE_THREADS = flags.DEFINE_integer(
    "estimate_compile_threads", None, "With --estimate_compile_s: the grids compiled at once; "
    "default the engine's beside an accelerator (sweep.programs.ACCELERATOR_COMPILE_THREADS).",
    lower_bound=1)
_RUN = cli.define_run_flags(workdir_unless="estimate")


def _rates(values) -> list:
  try:
    return [tuple(float(part) for part in value.split(":", 1)) for value in values]
  except ValueError:
    raise app.UsageError(f"--estimate_rates takes <GFLOP>:<model-steps/s> pairs, got "
                         f"{','.join(values)}") from None


def _estimate(config) -> None:
  """Print the estimate of a sweep config; nothing is trained or written."""
  from normattn_jax.sweep import config as config_lib
  from normattn_jax.sweep import estimate, programs
  rates = _rates(_ESTIMATE_RATES.value) or None
  if _ESTIMATE_COMPILE_S.value is not None and not _ESTIMATE_COSTS.value:
    raise app.UsageError("--estimate_compile_s needs --estimate_costs")
  if _ESTIMATE_COMPILE_THREADS.value is not None and _ESTIMATE_COMPILE_S.value is None:
    raise app.UsageError("--estimate_compile_threads needs --estimate_compile_s")
  if _ESTIMATE_COSTS.value:
    if rates is None:
      raise app.UsageError("--estimate_costs needs --estimate_rates")
    with open(_ESTIMATE_COSTS.value) as f:
      try:
        lines = estimate.reproject(
            f.read().splitlines(), rates, _ESTIMATE_COMPILE_S.value,
            _ESTIMATE_COMPILE_THREADS.value or programs.ACCELERATOR_COMPILE_THREADS)
      except ValueError as err:
        raise app.UsageError(f"--estimate_costs={_ESTIMATE_COSTS.value}: {err}") from None
    print("\n".join(lines), flush=True)
    return
  if rates is not None and not cli.backends_started():  # steps compiled to be analysed, not run
    cli.quick_compile(xla_flags=cli.COST_ANALYSIS_FLAGS)
  cli.split_cpu(_RUN.cpu_devices.value)
  logging.set_verbosity(logging.ERROR)
  cli.load_plugins(_RUN.plugins.value)
  try:
    config_lib.validate(config)
    result = estimate.estimate(config, steps=_ESTIMATE_STEPS.value, rates=rates)
  except ValueError as err:
    raise app.UsageError(str(err)) from None
  for line in estimate.report(result, config_lib.compute_dtype(config)):
    print(line, flush=True)


def _main(argv):
  del argv
  if _ESTIMATE.value:
    _estimate(_CONFIG.value)
    return
  cli.run_kind(_CONFIG.value, _RUN, expected="sweep")


def main():
  """The console script ``normattn-sweep``."""
  app.run(_main, flags_parser=cli.parse_flags)


if __name__ == "__main__":
  main()
