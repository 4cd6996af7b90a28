"""What the run commands (``normattn-run`` and its aliases ``normattn-sweep``,
``normattn-pretrain``, ``normattn-finetune``, ...) share on the command line: the workdir, budget,
multi-host and plugin flags, and the preamble before a run, so that every command joins hosts,
loads plugins, refuses a workdir and stops on its budget alike (``run_kind``: any kind of run,
``train.kinds``), and draws what the kind's drawer draws (``reporting.drawers``).
"""
from __future__ import annotations

import ast
import dataclasses
import importlib
import math
import os
import re
import shlex
import sys
import warnings
from typing import Any, Callable, Optional, Sequence, TypeVar

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from normattn_jax._extras import cpu_cores
from normattn_jax.registry import load_plugins
from normattn_jax.train import kinds, multihost
from normattn_jax.train.checkpoint import WorkdirError
from normattn_jax.train.driver import Budget, Interrupted

T = TypeVar("T")
WORKDIR_ERROR_EXIT = 2
INTERRUPTED_EXIT = 3  # a run stopped by its time budget (--max_minutes): rerun to resume
CTRL_C_EXIT = 130  # a run stopped by Ctrl-C: 128 + SIGINT, as a shell reports it
CACHE_ENV = "NORMATTN_JAX_COMPILATION_CACHE"  # "0" turns the persistent cache off


# The packages that register the built-in kinds of run as they are imported.
BUILTIN_KINDS = ("normattn_jax.sweep", "normattn_jax.pretrain", "normattn_jax.finetune.train",
                 "normattn_jax.analysis.causal_lm_keys", "normattn_jax.analysis.majority",
                 "normattn_jax.card")


def load_builtin_kinds() -> tuple:
  """Register every built-in kind of run whose extra is installed (``BUILTIN_KINDS``).

  Returns:
    The registered kinds' names.
  """
  for module in BUILTIN_KINDS:
    try:
      importlib.import_module(module)
    except ImportError:  # its extra is missing (_extras.require): it cannot run here
      pass
  return kinds.names()


def compilation_cache_dir(environ=os.environ) -> str:
  """Where the run scripts keep compiled programs: ``$XDG_CACHE_HOME/normattn_jax/jax``
  (``~/.cache`` without it)."""
  root = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(root, "normattn_jax", "jax")


def enable_compilation_cache(enabled: bool = True, environ=os.environ) -> Optional[str]:
  """Turn on JAX's persistent compilation cache, so that a rerun (or a resumed run) compiles
  nothing it compiled before: off with ``enabled=False`` or ``NORMATTN_JAX_COMPILATION_CACHE=0``;
  a cache directory the user gave JAX already (``JAX_COMPILATION_CACHE_DIR``) is kept.

  Args:
    enabled: the scripts' ``--compilation_cache`` flag.
    environ: the environment.

  Returns:
    The cache directory in use, or None when the cache is off: asked off, or a directory that
    cannot be made (a file in its place, no permission), which is then said once, by a
    warning naming it, rather than by JAX on every program.
  """
  if not enabled or environ.get(CACHE_ENV, "1") == "0":
    return None
  if not jax.config.jax_compilation_cache_dir:
    jax.config.update("jax_compilation_cache_dir", compilation_cache_dir(environ))
  directory = jax.config.jax_compilation_cache_dir
  try:
    os.makedirs(directory, exist_ok=True)
  except OSError as err:
    jax.config.update("jax_compilation_cache_dir", None)
    warnings.warn(f"the compilation cache {directory} cannot be a folder ({err}): this run "
                  f"compiles without it; move what is in its way, or turn it off "
                  f"(--nocompilation_cache, {CACHE_ENV}=0)", stacklevel=2)
    return None
  return directory


# XLA's options for programs whose compiling outweighs their running (a smoke-scale report card,
# the test suite): no LLVM optimisation passes (they change how fast a program runs and, in the
# last bits, the order of some sums: a quarter less time), XLA's elemental emitter in place of
# its MLIR fusion emitters (which compile more slowly: a third less again) and each program's
# machine code generated in one piece rather than split over threads (which two busy cores
# cannot run in parallel anyway: a fifth less again).
QUICK_COMPILE_FLAGS = ("--xla_backend_optimization_level=0",
                       "--xla_cpu_use_fusion_emitters=false",
                       "--xla_cpu_parallel_codegen_split_count=1")
# The one of them that leaves XLA's cost analysis (FLOPs, bytes, kernels) as it is, because
# LLVM's passes run after the HLO that the analysis reads: for programs compiled only to be
# analysed (``sweep.estimate.step_cost``). The emitter flag changes the fusions, and the counts.
COST_ANALYSIS_FLAGS = QUICK_COMPILE_FLAGS[:1]


def backends_started() -> bool:
  """Whether JAX's backends have started, after which XLA has read its flags and the CPU's
  device count is fixed; asked through JAX's public config, whose ``jax_num_cpu_devices``
  refuses a change from then on."""
  current = jax.config.jax_num_cpu_devices
  try:
    jax.config.update("jax_num_cpu_devices", current + 1)
  except RuntimeError:
    return True
  jax.config.update("jax_num_cpu_devices", current)
  return False


def quick_compile(environ=os.environ, xla_flags: Sequence[str] = QUICK_COMPILE_FLAGS) -> None:
  """Compile this process's programs for a short compile rather than a fast run (``xla_flags``:
  ``QUICK_COMPILE_FLAGS``, or ``COST_ANALYSIS_FLAGS`` for programs compiled only to be
  analysed), where compiling is most of the time: call it before JAX's backends start.
  Processes started from this one inherit it.

  Raises:
    RuntimeError: if JAX's backends have started already (XLA reads its flags once).
  """
  if backends_started():
    raise RuntimeError("quick_compile() must come before JAX's first computation: XLA reads "
                       "its flags when its backends start")
  environ["XLA_FLAGS"] = " ".join([environ.get("XLA_FLAGS", ""), *xla_flags]).strip()


def default_cpu_devices(cores: int, divides: Sequence[int] = ()) -> int:
  """One JAX device per core, or the most below that which divides every number of
  ``divides`` (a data-parallel run's batch sizes, split evenly over the devices); values that
  are not positive integers are left to the run's validation to name."""
  sizes = [d for d in divides if isinstance(d, int) and d > 0]
  return next(n for n in range(max(cores, 1), 0, -1) if all(d % n == 0 for d in sizes))


def split_cpu(requested: Optional[int], divides: Sequence[int] = (),
              environ=os.environ) -> Optional[int]:
  """Split a CPU into JAX devices before JAX's backends start, so that the models axis (or a
  pre-training's batch) is sharded over every core: ``requested`` devices, or by default
  ``default_cpu_devices(cpu_cores(), divides)``. The default leaves alone a JAX that has
  started already (an in-process caller) or one told its count by
  ``--xla_force_host_platform_device_count``. No effect on accelerators.

  Args:
    requested: the scripts' ``--cpu_devices``; None for one per core.
    divides: numbers the device count must divide.
    environ: the environment (``XLA_FLAGS``).

  Returns:
    The count set, or None when it was left alone.
  """
  if requested is None:
    if (backends_started()
        or "xla_force_host_platform_device_count" in environ.get("XLA_FLAGS", "")):
      return None
    requested = default_cpu_devices(cpu_cores(), divides)
  jax.config.update("jax_num_cpu_devices", requested)
  return requested


@dataclasses.dataclass(frozen=True)
class RunFlags:
  """The shared flags (``define_run_flags``); each holds its parsed value in ``.value``."""
  workdir: flags.FlagHolder
  distributed: flags.FlagHolder
  coordinator_address: flags.FlagHolder
  num_processes: flags.FlagHolder
  process_id: flags.FlagHolder
  afresh: flags.FlagHolder
  plugins: flags.FlagHolder
  cpu_devices: flags.FlagHolder
  compilation_cache: flags.FlagHolder
  max_minutes: Optional[flags.FlagHolder]


# The configs that ship with the package (``normattn_jax.configs``).
CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")


def config_path(value: str) -> str:
  """``--config``'s value as a file: an existing path as it is, a shipped config's name (``demo``,
  or ``configs/demo.py`` as earlier commands wrote it) as its file in ``normattn_jax/configs``; a
  ``:argument`` after it (ml_collections' config argument) kept.

  Args:
    value: the flag's value.

  Returns:
    The path to give ml_collections (``value`` itself where it names no shipped config).
  """
  path, colon, argument = value.partition(":")
  if os.path.exists(path) or not re.fullmatch(r"(configs/)?\w+(\.py)?", path):
    return value
  shipped = os.path.join(CONFIGS, os.path.splitext(os.path.basename(path))[0] + ".py")
  return shipped + colon + argument if os.path.exists(shipped) else value


def with_config_paths(argv: list) -> list:
  """``argv`` with each ``--config`` value (``--config=X`` or ``--config X``) a file
  (``config_path``)."""
  out = list(argv)
  for i, arg in enumerate(out):
    if arg.startswith("--config="):
      out[i] = "--config=" + config_path(arg[len("--config="):])
    elif arg == "--config" and i + 1 < len(out):
      out[i + 1] = config_path(out[i + 1])
  return out


def config_description(flag_values: flags.FlagValues = flags.FLAGS) -> str:
  """The first sentence of ``--config``'s file's docstring (a shipped config's says which paper's
  figure or table it runs: "Fig. 3: learning rate x model dimension ..."), or "" without one."""
  if "config" not in flag_values:
    return ""
  path = config_flags.get_config_filename(flag_values["config"])
  try:
    with open(path) as f:
      return first_sentence(ast.get_docstring(ast.parse(f.read())))
  except (OSError, SyntaxError):
    return ""


# A sentence ends at a full stop before a capital letter, not one of an abbreviation.
_SENTENCE_END = re.compile(r"(?<!Fig)(?<!al)(?<!Eq)(?<!Sec)(?<!e\.g)(?<!i\.e)\. (?=[A-Z])")


def first_sentence(docstring: Optional[str]) -> str:
  """A docstring's first sentence on one line ("" for none): what a command or a config says it
  runs, as a run's figures name their experiment (``reporting.provenance.write_note``)."""
  paragraph = " ".join((docstring or "").strip().split("\n\n")[0].split())
  head, _, _ = _SENTENCE_END.sub(".\0", paragraph, count=1).partition("\0")
  return head


def shipped_configs() -> list:
  """The names of the configs that ship with the package, for ``--config <name>``."""
  return sorted(name[:-3] for name in os.listdir(CONFIGS)
                if name.endswith(".py") and not name.startswith("_"))


def define_config_flag(default: Optional[str], help_string: str,
                       flag_values: flags.FlagValues = flags.FLAGS):
  """``--config``: a config file, or the name of one that ships with the package (``demo``:
  ``normattn_jax/configs/demo.py``), whose every field the command line overrides; new keys are
  taken (an attention section's options: ``--config.attention.options.alpha=1.5``) and the
  run's validation refuses those outside an options section (``validation.check_known_fields``).

  Args:
    default: the config's name or file, or None to make the flag required.
    help_string: the flag's help.
    flag_values: where to define it (absl's global flags by default).

  Returns:
    The flag holder (``.value`` is the parsed ``ConfigDict``).
  """
  holder = config_flags.DEFINE_config_file(
      "config", None if default is None else config_path(default),
      f"{help_string} A file, or the name of a shipped config: {', '.join(shipped_configs())}.",
      flag_values, lock_config=False, accept_new_attributes=True)
  if default is None:
    flags.mark_flag_as_required("config", flag_values)
  return holder


# absl's words when a value is given to a config section (``--config.model.attention=dnas``).
_SECTION_GIVEN_A_VALUE = re.compile(
    r"flag --config\.(?P<path>[\w.]+)=(?P<value>.*?): Failed to parse .* as a ConfigDict")


def section_hint(message: str, config=None) -> str:
  """``message`` with, where it is absl's error for a value given to a config section, what to
  write instead: ``--config.model.attention.name=dnas`` (the section's fields from ``config``)."""
  match = _SECTION_GIVEN_A_VALUE.search(message)
  if match is None:
    return message
  path, value = match.group("path"), match.group("value")
  section = config
  for key in path.split("."):
    section = section.get(key) if hasattr(section, "get") else None
  fields = sorted(section.keys()) if hasattr(section, "keys") else []
  field = "name" if "name" in fields or not fields else fields[0]
  listed = f" (its fields: {', '.join(fields)})" if fields else ""
  return (f"--config.{path}={value}: config.{path} is a section, not a value{listed}: set one of "
          f"its fields, e.g. --config.{path}.{field}={value}")


# A config flag as written: --config, --config.<path>, --noconfig.<path> (a bool set False).
_CONFIG_FLAG = re.compile(r"^--?(?:no)?(config(?:\.[\w.]+)?)(?:=|$)")


def repeated_config_fields(argv: Sequence[str]) -> list:
  """The config flags (``--config`` and each ``--config.<field>``) that ``argv`` gives more than
  once: ml_collections appends a tuple field's values when its flag is repeated
  (``--config.archs=('nap',) --config.archs=('mte',)`` trains both) and keeps the last of a
  scalar, so a wrapper's default and a user's flag would train another grid than either asked.

  Args:
    argv: the command line, the program first; what follows ``--`` is not read.

  Returns:
    The repeated flags' names (``config.archs``), in order of first appearance.
  """
  counts = {}
  for arg in argv[1:]:
    if arg == "--":
      break
    match = _CONFIG_FLAG.match(arg)
    if match:
      counts[match.group(1)] = counts.get(match.group(1), 0) + 1
  return [name for name, count in counts.items() if count > 1]


def usage_problem(argv: Sequence[str], rest: Sequence[str]) -> Optional[str]:
  """Why a run script's command line is refused beyond absl's own checks, or None: a config
  field given twice (``repeated_config_fields``), or positional arguments, which the scripts
  take none of (an unquoted path with a space would otherwise lose its tail without a word).

  Args:
    argv: the command line, the program first.
    rest: what absl's parser left: the program and the arguments that are not flags.

  Returns:
    The message, or None.
  """
  repeated = repeated_config_fields(argv)
  if repeated:
    return (f"--{repeated[0]} is given more than once: a tuple field's values would be joined "
            f"(training the union) and a scalar's last one kept; give each config field once")
  if len(rest) > 1:
    return (f"unexpected positional arguments {list(rest[1:])}: this command takes flags only "
            f"(quote a value with a space, e.g. --workdir='my runs/a')")
  return None


def parse_flags(argv: list) -> list:
  """``app.run``'s flags parser for the run commands: absl's, ``--config`` taking a shipped
  config's name (``with_config_paths``), with ``section_hint`` added to a value given to a config
  section, and ``usage_problem``'s refusals (a config field given twice, positional arguments).

  Args:
    argv: the command line.

  Returns:
    The arguments that are not flags (the program alone).
  """
  try:
    rest = flags.FLAGS(with_config_paths(argv))
    problem = usage_problem(argv, rest)
  except flags.Error as err:
    config = flags.FLAGS["config"].value if "config" in flags.FLAGS else None
    problem = section_hint(str(err), config)
  if problem is None:
    return rest
  print(f"FATAL Flags parsing error: {problem}", file=sys.stderr)
  print("Pass --helpshort or --helpfull to see help on flags.", file=sys.stderr)
  sys.exit(1)


def define_cpu_devices_flag() -> flags.FlagHolder:
  """``--cpu_devices`` (``split_cpu``), for every script that trains."""
  return flags.DEFINE_integer(
      "cpu_devices", None, "Split a CPU into this many JAX devices, over which the models (or "
      "a pre-training's batch) are sharded; default one per core (for a pre-training, the "
      "most up to that which divide its batch sizes). Numbers of another device count agree "
      "to float rounding. No effect on accelerators.", lower_bound=1)


def define_plugins_flag() -> flags.FlagHolder:
  """``--plugins``: modules to import before the run (``load_plugins``), e.g. one that registers
  a normalisation or a task of the user's; every script that names one takes it so."""
  return flags.DEFINE_list("plugins", [], "Modules to import first (on PYTHONPATH), e.g. ones "
                           "that register a normalisation.")


def define_run_flags(budget: bool = True, workdir_unless: Optional[str] = None) -> RunFlags:
  """Define the shared flags (call once, at module level of a script); ``--workdir`` is
  required.

  Args:
    budget: define ``--max_minutes`` (a run that cannot stop on a budget goes without).
    workdir_unless: a boolean flag, defined before, that makes ``--workdir`` optional (a
      command that writes nothing: ``normattn-sweep --estimate``).

  Returns:
    Their holders, for ``run_command``.
  """
  holders = RunFlags(
      workdir=flags.DEFINE_string("workdir", None, "Directory for results and checkpoints."),
      distributed=flags.DEFINE_bool(
          "distributed", False, "Join the processes of a multi-host run "
          "(jax.distributed.initialize): every host runs the same command."),
      coordinator_address=flags.DEFINE_string(
          "coordinator_address", "", "With --distributed: host:port of process 0; empty: "
          "detected (TPU pod, SLURM, Open MPI)."),
      num_processes=flags.DEFINE_integer(
          "num_processes", 0, "With --distributed: how many processes; 0: detected."),
      process_id=flags.DEFINE_integer(
          "process_id", -1, "With --distributed: this process's index; -1: detected."),
      afresh=flags.DEFINE_bool(
          "afresh", False, "Move an existing workdir aside (to WORKDIR.replaced-<UTC time>) "
          "and start anew."),
      plugins=define_plugins_flag(),
      cpu_devices=define_cpu_devices_flag(),
      compilation_cache=flags.DEFINE_bool(
          "compilation_cache", True, "Keep compiled programs in $XDG_CACHE_HOME/normattn_jax "
          "(~/.cache without it), so that a rerun compiles nothing twice; also off with "
          f"{CACHE_ENV}=0."),
      max_minutes=flags.DEFINE_float(
          "max_minutes", 0.0, "Stop after the chunk (evaluation, step) that passes this wall "
          f"time, its checkpoint written (exit code {INTERRUPTED_EXIT}; 0: no limit); the same "
          "command resumes.", lower_bound=0.0) if budget else None)
  if workdir_unless is None:
    flags.mark_flag_as_required("workdir")
  else:
    flags.register_multi_flags_validator(
        ["workdir", workdir_unless], lambda given: given[workdir_unless] or given["workdir"],
        f"--workdir is required (unless --{workdir_unless})")
  if budget:  # nan passes absl's lower bound, inf means nothing 0 does not
    flags.register_validator("max_minutes", lambda minutes: math.isfinite(minutes),
                             "must be a finite number of minutes (0: no limit)")
  return holders


def run_command(run: Callable[..., T], config: Any, run_flags: RunFlags,
                divides: Sequence[int] = ()) -> T:
  """A run script's ``main``: check the multi-host flags, split a CPU into one device per core
  (``split_cpu``), quiet absl's logging (checkpoint chatter would break the progress bar),
  import the plugins, join the hosts with ``--distributed``, then
  ``run(config, workdir, afresh=afresh)``; a refused workdir prints ``error: ...`` and exits
  with code 2, a run stopped by its budget (``Interrupted``) says so and exits with code 3: the
  one place a command line handles either.

  Args:
    run: the run, e.g. ``sweep.run_sweep``.
    config: the script's parsed config.
    run_flags: the holders ``define_run_flags`` returned.
    divides: numbers the default device count must divide (a pre-training's batch sizes).

  Returns:
    What ``run`` returned.

  Raises:
    app.UsageError: if a multi-host flag is given without ``--distributed``, or one that
      ``multihost.check_arguments`` refuses.
  """
  f = run_flags
  if not f.distributed.value and (f.coordinator_address.value or f.num_processes.value
                                  or f.process_id.value >= 0):
    raise app.UsageError("--coordinator_address, --num_processes and --process_id need "
                         "--distributed")
  try:
    multihost.check_arguments(f.coordinator_address.value, f.num_processes.value,
                              f.process_id.value)
  except ValueError as err:
    raise app.UsageError(f"--{err}") from None
  split_cpu(f.cpu_devices.value, divides)
  logging.set_verbosity(logging.ERROR)
  enable_compilation_cache(f.compilation_cache.value)
  load_plugins(f.plugins.value)
  if f.distributed.value:
    multihost.initialize(f.coordinator_address.value, f.num_processes.value,
                         f.process_id.value)
  try:
    return run(config, f.workdir.value, afresh=f.afresh.value)
  except WorkdirError as err:
    print(f"error: {err}", file=sys.stderr)
    sys.exit(WORKDIR_ERROR_EXIT)
  except Interrupted as stop:
    print(f"{stop}; rerun the same command to resume", flush=True)
    sys.exit(INTERRUPTED_EXIT)
  except KeyboardInterrupt:
    print(f"\nstopped (Ctrl-C): {f.workdir.value} keeps its newest checkpoint; resume with\n"
          f"  {resume_command(sys.argv, main_module())}", file=sys.stderr, flush=True)
    sys.exit(CTRL_C_EXIT)


def main_module() -> Optional[str]:
  """The module that ``python -m`` ran as ``__main__``, else None (a script or a console
  script): ``sys.argv[0]`` then holds its file's path, not the module's name."""
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  return spec.name if spec is not None else None


def resume_command(argv: Sequence[str], module: Optional[str] = None) -> str:
  """The command line that resumes a run: the one given without ``--afresh`` (which would
  start it again from nothing), a Python script's with ``python`` before it.

  Args:
    argv: the command line, ``sys.argv``.
    module: the module run with ``python -m`` (``main_module()``), whose name replaces the
      file path in ``argv[0]``.

  Returns:
    The command, quoted for a POSIX shell.
  """
  program, *arguments = argv
  kept = [a for a in arguments if not re.fullmatch(r"--afresh(=.*)?", a)]
  if module:
    head = ["python", "-m", module]
  else:
    head = ["python", program] if program.endswith(".py") else [program]
  return " ".join(shlex.quote(word) for word in head + kept)


def run_kind(config: Any, run_flags: RunFlags, expected: Optional[str] = None) -> dict:
  """``normattn-run``'s ``main`` (and its aliases'): run the config's kind of run through
  the driver (``runs.run``) within ``--max_minutes``, then, on the chief, draw the kind's figures
  (of a run found finished, only those it lacks, ``drawers.draw_missing``, and nothing on a
  read-only workdir) and print what it says of the summary.

  Args:
    config: the script's parsed config; its ``kind`` field picks the kind of run.
    run_flags: the holders ``define_run_flags`` returned.
    expected: the kind an alias script runs (``normattn-sweep``: "sweep"); None: any.

  Returns:
    The summary.

  Raises:
    app.UsageError: naming the field and value, for a config of no registered kind or of another
      kind than ``expected``.
  """
  from normattn_jax.reporting import drawers  # matplotlib only once a run has finished
  from normattn_jax.train import runs
  load_builtin_kinds()
  if config.get("kind") not in kinds.KINDS:
    load_plugins(run_flags.plugins.value)  # a plugin's kind: loaded before the CPU is split
  try:
    kind = kinds.kind_of(config)
    if expected is not None:
      kinds.check_kind(config, expected)
  except ValueError as err:
    raise app.UsageError(str(err)) from None
  budget = Budget(minutes=0.0 if run_flags.max_minutes is None else run_flags.max_minutes.value)

  def run(config, workdir, afresh):
    return runs.run(config, workdir, afresh=afresh, budget=budget)

  workdir = run_flags.workdir.value
  finished = (not run_flags.afresh.value and kind.summary_file == "summary.json"
              and os.path.isfile(os.path.join(workdir, kind.summary_file)))
  summary = run_command(run, config, run_flags, divides=kind.divides(config))
  if multihost.is_chief():  # on several hosts, one notes and draws
    from normattn_jax.reporting import provenance
    if not finished:
      provenance.write_note(workdir, experiment=config_description())
      drawers.draw(kind.name, workdir, summary)
    elif not os.access(workdir, os.W_OK):  # its results stay as they are, and so do its files
      print(f"{workdir} is read-only: its finished run is left as it is, nothing noted or drawn")
    else:  # only what it lacks: a note's missing fields, missing figures
      provenance.write_note(workdir, experiment=config_description())
      drawers.draw_missing(kind.name, workdir, summary)
  print("\n".join(kind.describe(summary)))
  print(f"results in {workdir}")
  return summary
