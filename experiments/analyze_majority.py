"""Brody et al., Fig. 2/3: the majority task as the paper ran it, LayerNorm before attention with
projection, without it (the paper's scaling to norm sqrt(d)), and without it as the authors' code
computes it (norm 1/sqrt(d)); 10 seeds each, all models one grid of the engine.

  python experiments/analyze_majority.py --workdir results/majority --steps 14000 \
      --max_minutes 70

Writes to --workdir: config.json, history.jsonl (test accuracy, losses and query angle of every
model at every evaluation), checkpoints/, majority.json (the summary) and majority.png. A run
stopped by --max_minutes (or killed) resumes when started again with the same flags; --steps may
grow between parts. A workdir of other settings is refused (exit code 2) unless --afresh moves
it aside. --resummarise rewrites majority.json and majority.png of a workdir from its
history.jsonl without training (the data are rebuilt from the seeds for their statistics).
"""
import dataclasses
import json
import math
import os
import sys
import time

from absl import app, flags, logging
import jax
import matplotlib
import numpy as np

from normattn_jax.analysis import majority
from normattn_jax.train.checkpoint import (GridCheckpoints, config_differences, move_aside,
                                           write_json)
from normattn_jax.train.grid import run_grid, to_host
from normattn_jax.train.run_log import RunLog, read_history

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", "results/majority", "Directory for the results.")
_STEPS = flags.DEFINE_integer("steps", 14_000, "Training steps (rounded up to whole evaluation "
                              "intervals); the authors' 1000 epochs are 14,000.")
_MAX_MINUTES = flags.DEFINE_float("max_minutes", 0.0, "Stop after the evaluation interval that "
                                  "passes this wall time (0: no limit); rerun to resume.")
_NUM_SEEDS = flags.DEFINE_integer("num_seeds", 10, "Seeds per variant.")
_VARIANTS = flags.DEFINE_list("variants", list(majority.VARIANTS), "LayerNorm variants.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 6000, "Sequences per step.")
_EVAL_EVERY = flags.DEFINE_integer("eval_every_epochs", 2, "Epochs between evaluations.")
_MODELS_PER_VMAP = flags.DEFINE_integer("models_per_vmap", 0, "Models per vmap (0: all).")
_SEED = flags.DEFINE_integer("seed", 0, "Seeds the data sets and initialisations.")
_AFRESH = flags.DEFINE_bool("afresh", False, "Move an existing workdir aside and start anew.")
_RESUMMARISE = flags.DEFINE_bool("resummarise", False, "Rewrite majority.json and majority.png "
                                 "from the workdir's history.jsonl; no training.")

THRESHOLDS = (0.5, 0.7, 0.8, 0.9)
PAPER_STEPS = 17_000
COLOURS = {"with_projection": "tab:blue", "without_projection": "tab:orange",
           "without_projection_code": "tab:green"}
METRICS = ("train_loss", "test_loss", "test_accuracy", "query_angle")


def open_run(workdir: str, config: majority.MajorityConfig, afresh: bool) -> None:
  """Make ``workdir`` this config's: refuse one of another config, or move it aside."""
  path = os.path.join(workdir, "config.json")
  settings = json.loads(json.dumps(dataclasses.asdict(config)))
  if afresh:
    moved = move_aside(workdir)
    if moved:
      print(f"moved the old workdir aside to {moved}")
  elif os.path.exists(path):
    with open(path) as f:
      differences = config_differences(json.load(f), settings)
    if differences:
      named = "; ".join(f"{k} was {old!r}, now {new!r}" for k, old, new in differences)
      print(f"error: workdir {workdir} holds a run of other settings: {named}. Use another "
            "workdir or --afresh.", file=sys.stderr)
      sys.exit(2)
  os.makedirs(workdir, exist_ok=True)
  if not os.path.exists(path):
    write_json(path, settings, indent=2, sort_keys=True)


def _stored(workdir: str, field: str):
  """A field of the workdir's previous summary (None without one)."""
  try:
    with open(os.path.join(workdir, "majority.json")) as f:
      return json.load(f).get(field)
  except (OSError, ValueError):
    return None


def checked(metrics: dict) -> dict:
  """The metrics as numpy, without ``overflow``, which must be 0 (else the losses are wrong)."""
  metrics = {k: np.asarray(v) for k, v in metrics.items()}
  if metrics.pop("overflow").max() > 0:
    raise RuntimeError("a batch held more (sequence, type) pairs than its capacity; raise the "
                       "margin of majority.train_pair_capacity")
  return metrics


def rounded(metrics: dict) -> dict:
  """Per-model lists, 6 significant digits (the history's size)."""
  return {k: [float(f"{x:.6g}") for x in np.asarray(v, np.float64)] for k, v in metrics.items()}


def curves(history: list[dict], config: majority.MajorityConfig) -> dict:
  """``{variant: {metric: [evals, seeds]}}`` and the evaluation steps, from the history."""
  rows = sorted(history, key=lambda r: r["step"])
  steps = np.array([r["step"] for r in rows])
  out = {}
  for v, name in enumerate(config.variants):
    columns = slice(v * config.num_seeds, (v + 1) * config.num_seeds)
    out[name] = {m: np.array([r[m][columns] if m in r else [np.nan] * config.num_seeds
                              for r in rows], np.float64) for m in METRICS}
  return {"steps": steps, "variants": out}


def first_step(steps: np.ndarray, values: np.ndarray, threshold: float):
  """Per seed, the first evaluation step at which ``values`` [evals, seeds] >= threshold."""
  reached = values >= threshold
  return [int(steps[np.argmax(col)]) if col.any() else None for col in reached.T]


def summarise(history: list[dict], config: majority.MajorityConfig, extra: dict) -> dict:
  """Per variant: the steps to each accuracy of ``THRESHOLDS`` and the last evaluation."""
  c = curves(history, config)
  steps = c["steps"]
  summary = {"steps_run": int(steps[-1]), "paper_steps": PAPER_STEPS} | extra
  variants = {}
  for name, m in c["variants"].items():
    accuracy = m["test_accuracy"]
    to = {}
    for threshold in THRESHOLDS:
      per_seed = first_step(steps, accuracy, threshold)
      hit = [s for s in per_seed if s is not None]
      to[str(threshold)] = {"per_seed": per_seed, "reached": len(hit), "of": len(per_seed),
                            "mean_over_reached": float(np.mean(hit)) if hit else None,
                            "seed_mean_curve": first_step(steps, accuracy.mean(1, keepdims=True),
                                                          threshold)[0]}
    final = {k: {"mean": float(v[-1].mean()), "min": float(v[-1].min()),
                 "max": float(v[-1].max())} for k, v in m.items()}
    variants[name] = {"steps_to_test_accuracy": to, "final": final}
  summary["variants"] = variants
  if {"with_projection", "without_projection"} <= variants.keys():
    summary["without_over_with_steps"] = _ratios(variants, "without_projection")
  if {"with_projection", "without_projection_code"} <= variants.keys():
    summary["without_code_over_with_steps"] = _ratios(variants, "without_projection_code")
  return summary


def _ratios(variants: dict, other: str) -> dict:
  """Steps to each accuracy of ``other`` over those of with_projection (seeds' mean curves)."""
  out = {}
  for threshold in map(str, THRESHOLDS):
    a = variants["with_projection"]["steps_to_test_accuracy"][threshold]["seed_mean_curve"]
    b = variants[other]["steps_to_test_accuracy"][threshold]["seed_mean_curve"]
    out[threshold] = b / a if a and b else None
  return out


def plot(history: list[dict], config: majority.MajorityConfig, path: str) -> None:
  """Training loss, test accuracy and query angle against the step: each variant's mean over
  seeds with its min-max band."""
  c = curves(history, config)
  steps = c["steps"]
  fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
  panels = (("train_loss", "training loss"), ("test_accuracy", "test accuracy"),
            ("query_angle", "query angle to 1 (degrees)"))
  for name, m in c["variants"].items():
    for ax, (key, label) in zip(axes, panels):
      values, shown = m[key], np.isfinite(m[key]).all(1)
      colour = COLOURS.get(name)
      ax.plot(steps[shown], values[shown].mean(1), color=colour, label=name.replace("_", " "))
      ax.fill_between(steps[shown], values[shown].min(1), values[shown].max(1), color=colour,
                      alpha=0.25, linewidth=0)
      ax.set_xlabel("step")
      ax.set_ylabel(label)
      ax.grid(alpha=0.3)
  axes[0].legend()
  fig.suptitle(f"majority, {config.num_seeds} seeds per variant (mean, min-max band)")
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def write_summary(workdir: str, config: majority.MajorityConfig, history: list[dict],
                  data: majority.MajorityData, speed: list[float]) -> dict:
  """Write majority.json (``summarise`` with the data's statistics and the run's pace) and
  majority.png from ``history``; ``speed``: model-steps/s of this call's chunks (none: the
  stored value is kept)."""
  train_size = int(data.train_counts.shape[1])
  extra = {"data": majority.data_statistics(data.train_counts)
                   | {"train_size": train_size, "test_size": int(data.test_counts.shape[1])},
           "eval_every_steps": config.eval_every_epochs * majority.steps_per_epoch(config,
                                                                                   train_size),
           "diverged_models": int(sum(np.asarray(history[-1].get("diverged", [0])))),
           "model_steps_per_second_last_part": (float(np.median(speed)) if speed
                                                else _stored(workdir, "model_steps_per_second_"
                                                                      "last_part"))}
  summary = summarise(history, config, extra)
  write_json(os.path.join(workdir, "majority.json"), summary, indent=1)
  plot(history, config, os.path.join(workdir, "majority.png"))
  return summary


class OutOfTime(Exception):
  """--max_minutes passed: the run resumes from its checkpoints when started again."""


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)  # keep checkpoint chatter out of the log
  try:
    config = majority.MajorityConfig(
        variants=tuple(_VARIANTS.value), num_seeds=_NUM_SEEDS.value,
        batch_size=_BATCH_SIZE.value, eval_every_epochs=_EVAL_EVERY.value,
        models_per_vmap=_MODELS_PER_VMAP.value, seed=_SEED.value)
  except ValueError as err:
    raise app.UsageError(str(err)) from None
  if _STEPS.value < 1:
    raise app.UsageError(f"--steps must be >= 1, got {_STEPS.value}")
  workdir = _WORKDIR.value
  history_path = os.path.join(workdir, "history.jsonl")
  if _RESUMMARISE.value and (_AFRESH.value or not read_history(history_path)):
    raise app.UsageError(f"--resummarise needs a run's history, {history_path}, and no --afresh")
  open_run(workdir, config, _AFRESH.value)
  started = time.time()
  data = majority.build_data(config)
  if _RESUMMARISE.value:
    summary = write_summary(workdir, config, read_history(history_path), data, [])
    print(json.dumps({k: summary[k] for k in summary if k != "variants"}, indent=1))
    return
  grid, programs = majority.build_grid(config, data)
  chunk_steps = config.eval_every_epochs * programs.steps_per_epoch
  target = math.ceil(_STEPS.value / chunk_steps)
  checkpoints = GridCheckpoints(os.path.join(workdir, "checkpoints"))
  log = None
  statistics = majority.data_statistics(data.train_counts)
  described = (f"{statistics['types_per_sequence']:.2f} types and a majority of "
               f"{statistics['majority_count']:.1f} tokens per sequence")
  speed, tick = [], 0.0  # model-steps/s of each chunk, and when the last one ended

  def resume(grid, states, settings):
    nonlocal log, tick
    done = 0
    if checkpoints.latest() is not None:
      done, restored = checkpoints.restore_newest({"state": states})
      states = jax.device_put(restored["state"], jax.tree.map(lambda a: a.sharding, states))
    log = RunLog(workdir, resume_from=done * chunk_steps, tensorboard=False, progress=False)
    if not log.rows():
      before = grid.program(programs.evaluate)(states, settings)
      log.record(0, rounded(checked({k: to_host(v)[:config.num_models]
                                     for k, v in before.items()})))
    print(f"data: {data.train_counts.shape[1]} train / {data.test_counts.shape[1]} test "
          f"sequences per seed, {described}; {config.num_models} models; from step "
          f"{done * chunk_steps} to {target * chunk_steps}", flush=True)
    tick = time.time()
    return done, states, {}

  def on_chunk(done, states, history):
    nonlocal tick
    metrics = checked({k: v[done - 1] for k, v in history.items()})
    step = done * chunk_steps
    log.record(step, rounded(metrics))
    checkpoints.save(done, {"state": states})
    now = time.time()
    speed.append(config.num_models * chunk_steps / (now - tick))
    tick = now
    accuracy = metrics["test_accuracy"].reshape(len(config.variants), -1).mean(1)
    print(f"step {step}: test accuracy " + ", ".join(
        f"{n} {a:.3f}" for n, a in zip(config.variants, accuracy))
        + f"; {speed[-1]:.1f} model-steps/s", flush=True)
    if _MAX_MINUTES.value and now - started > 60 * _MAX_MINUTES.value and done < target:
      raise OutOfTime(f"stopping after {_MAX_MINUTES.value} minutes; rerun to resume")

  try:
    run_grid(grid, majority.model_keys(config), majority.per_model_settings(config), target,
             resume=resume, on_chunk=on_chunk)
  except OutOfTime as stop:
    print(stop, flush=True)
  finally:
    checkpoints.close()
    if log is not None:
      log.close()
  summary = write_summary(workdir, config, log.history, data, speed)
  print(json.dumps({k: summary[k] for k in summary if k != "variants"}, indent=1))


if __name__ == "__main__":
  app.run(main)
