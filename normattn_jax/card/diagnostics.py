"""A report card's registered diagnostics: what a normalisation's own paper claims, measured on
each arm's evaluation seeds, each one section of the card, its quantities compared with softmax
and NAP like every other number of the card (``card_stats``).

A diagnostic names its quantities and gives ``measure(context) -> {arm: {quantity: [per seed]}}``
for the arms "card", "softmax" and "nap". The built-in ones read the small causal LMs that the
card trains per arm (``card.lm``, in ``context.lm``):

- length generalisation (Scalable-Softmax, Nakanishi 2025; stick-breaking attention, Tan et al.
  2024): the loss of a window of mL tokens on its newest positions (mL/2 to mL; 0 to L for m = 1),
  trained at L;
- attention sinks (softpick; gated attention; Xiao et al.'s sinks): the share of attention on
  the first token;
- massive activations (Sun et al. 2024; softpick, gated attention): the largest residual-stream
  activation over the median, per layer;
- sparsity (sparsemax, 1.5-entmax): the share of exact zeros among the causally valid weights.

A user registers their own from a plugin (``--plugins``) with ``register(Diagnostic(...))``, as
they register a normalisation; a diagnostic that raises is reported on the card by name with its
traceback, and the rest of the card completes.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from normattn_jax.registry import Registry
from normattn_jax.card import stats as card_stats

ARMS = ("card", "softmax", "nap")


@dataclasses.dataclass(frozen=True)
class Quantity:
  """One per-seed number of a diagnostic.

  Attributes:
    key: its name in the diagnostic's values.
    label: how tables name it.
    percent: a share, shown in percent.
    on_board: a column of the leaderboard (REPORT_CARDS.md).
  """
  key: str
  label: str
  percent: bool = False
  on_board: bool = False


class NotApplicable(Exception):
  """Raised by a diagnostic that does not apply to the card's normalisation; the message says
  why, and the card shows it in place of the section's numbers."""


@dataclasses.dataclass(frozen=True)
class CardContext:
  """What a diagnostic may measure: the card's normalisation, its scale's name and sizes
  (``report_card.Scale``), and per arm the result of its LM (``card_lm.run_lm``); the card's is
  None for a normalisation that cannot be causal (``lms`` says why)."""
  spec: Any
  scale: str
  sizes: Any
  lm: Mapping[str, dict]


@dataclasses.dataclass(frozen=True)
class Diagnostic:
  """A section of every card.

  Attributes:
    name: its registered name (a report's key).
    title: the section's heading.
    claim: the claim it checks and whose, one sentence.
    quantities: what it measures per seed.
    measure: ``CardContext -> {arm: {quantity key: [per evaluation seed]}}`` for every arm of
      ``ARMS``; NaN (or None) for a seed that has no value (a diverged model).
  """
  name: str
  title: str
  claim: str
  quantities: tuple
  measure: Callable[[CardContext], dict]


def _check(diagnostic: Diagnostic) -> None:
  if not diagnostic.quantities or not all(isinstance(q, Quantity) for q in diagnostic.quantities):
    raise ValueError(f"diagnostic {diagnostic.name!r} needs at least one Quantity")
  if not callable(diagnostic.measure):
    raise ValueError(f"diagnostic {diagnostic.name!r}: measure must be callable")


DIAGNOSTICS: Registry[Diagnostic] = Registry("diagnostic", Diagnostic, _check)
register, get = DIAGNOSTICS.register, DIAGNOSTICS.get


names = DIAGNOSTICS.names


def checked_values(diagnostic: Diagnostic, values: Mapping) -> dict:
  """``measure``'s output as the report stores it (floats, None for a missing seed), after
  checking that every arm has every quantity.

  Raises:
    ValueError: naming the diagnostic, the arm and the quantity that is missing.
  """
  out = {}
  for arm in ARMS:
    if arm not in values:
      raise ValueError(f"diagnostic {diagnostic.name!r} gave no values for the arm {arm!r}")
    out[arm] = {}
    for q in diagnostic.quantities:
      if q.key not in values[arm]:
        raise ValueError(f"diagnostic {diagnostic.name!r} gave no {q.key!r} for {arm!r}")
      seeds = card_stats.per_seed(values[arm][q.key])
      out[arm][q.key] = [float(x) if np.isfinite(x) else None for x in seeds]
  return out


# ----- the built-in diagnostics, on the card's LMs -----

def lms(context: CardContext) -> dict:
  """The arms' LM results, or ``NotApplicable`` for a normalisation that is not causal-safe, as
  those that normalise each key's weights over the queries (DNAS, HNAS, Sinkhorn): in a causal
  LM their weights at a position depend on later tokens, so their losses would see the future."""
  if context.lm.get("card") is None:
    if not context.spec.normalization.normalizes_over_queries:
      raise NotApplicable(f"{context.spec} is not declared causal-safe "
                          f"(Normalization.causal_safe), so it has no causal LM to measure")
    raise NotApplicable(f"{context.spec} normalises each key's weights over the queries, later "
                        f"ones included: in a causal LM a position's output would depend on "
                        f"later tokens, so it has no causal LM to measure")
  return context.lm


def _per_seed(lm: dict, read: Callable[[dict], float]) -> list:
  """``read(seed)`` of every seed of an LM run, None for a diverged one."""
  return [None if s.get("diverged") else read(s) for s in lm["seeds"]]


def _length(context: CardContext) -> dict:
  # a window of mL tokens' newest positions: its last band (0..L, L..2L, 2L..4L, ...)
  return {arm: {f"loss_{m}x": _per_seed(lm, lambda s, m=m: float(
      s["loss_by_band"][str(m)][-1])) for m in LENGTH_MULTIPLES}
          for arm, lm in lms(context).items()}


def _sinks(context: CardContext) -> dict:
  return {arm: {"first_token_share": _per_seed(lm, lambda s: float(np.mean(
                    s["first_token_share"]))),
                "first_token_share_max": _per_seed(lm, lambda s: float(np.max(
                    s["first_token_share"])))}
          for arm, lm in lms(context).items()}


def _massive(context: CardContext) -> dict:
  return {arm: {"massive_ratio": _per_seed(lm, lambda s: float(np.max(s["massive_ratio"])))}
          for arm, lm in lms(context).items()}


def _sparsity(context: CardContext) -> dict:
  return {arm: {"zero_share": _per_seed(lm, lambda s: float(s["zero_share"]))}
          for arm, lm in lms(context).items()}


def length_quantities(multiples: tuple) -> tuple:
  """One quantity per evaluated multiple; the board shows the first and the last."""
  return tuple(Quantity(f"loss_{m}x", f"loss at {m}L (nats)",
                        on_board=m in (multiples[0], multiples[-1])) for m in multiples)


LENGTH_MULTIPLES = (1, 2, 4, 8)
BUILT_IN = (
    Diagnostic("length_generalisation", "Length generalisation (Scalable-Softmax; stick-breaking "
               "attention)",
               "a model trained at context length L keeps its loss on windows of 2L, 4L and 8L "
               "tokens (Nakanishi 2025; Tan et al. 2024)",
               length_quantities(LENGTH_MULTIPLES), _length),
    Diagnostic("attention_sinks", "Attention sinks (softpick; gated attention)",
               "softpick and gated attention remove the sink: the first token no longer draws "
               "the attention that has nowhere else to go (Zuhri et al. 2025; Qiu et al. 2025)",
               (Quantity("first_token_share",
                         "share of attention on the first token (mean over heads)",
                         percent=True, on_board=True),
                Quantity("first_token_share_max",
                         "share of attention on the first token (worst head)", percent=True)),
               _sinks),
    Diagnostic("massive_activations", "Massive activations (softpick; gated attention)",
               "the residual stream's largest activations, thousands of times its median in "
               "softmax models, shrink without a sink (Sun et al. 2024; Zuhri et al. 2025)",
               (Quantity("massive_ratio", "largest / median |activation| (worst layer)",
                         on_board=True),), _massive),
    Diagnostic("sparsity", "Sparse weights (sparsemax; 1.5-entmax)",
               "sparsemax and 1.5-entmax give exact zeros, and so weights a reader can inspect "
               "(Martins & Astudillo 2016; Peters et al. 2019)",
               (Quantity("zero_share", "share of exact zeros among the weights", percent=True,
                         on_board=True),), _sparsity),
)
for _diagnostic in BUILT_IN:
  register(_diagnostic)
