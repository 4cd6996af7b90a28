"""A report card's registered diagnostics: what a normalisation's own paper claims, measured on
each arm's evaluation seeds, each one section of the card, its quantities compared with softmax
and NAP like every other number of the card (``card_stats``).

A diagnostic names its quantities and gives ``measure(context) -> {arm: {quantity: [per seed]}}``
for the arms "card", "softmax" and "nap". The built-in ones read the small causal LMs that the
card trains per arm (``card.lm``, in ``context.lm``):

- length generalisation (Scalable-Softmax, Nakanishi 2025; stick-breaking attention, Tan et al.
  2024): the loss of a window of mL tokens on its newest positions (mL/2 to mL; 0 to L for m = 1),
  trained at L, and its growth from 1L, which the claim is about;
- attention sinks (softpick; gated attention; Xiao et al.'s sinks): the share of attention on
  the first token;
- massive activations (Sun et al. 2024; softpick, gated attention): the largest residual-stream
  activation over the median, per layer;
- sparsity (sparsemax, 1.5-entmax): the share of exact zeros among the causally valid weights.

Each carries controls (``Diagnostic.controls``): a positive one that has the phenomenon (the
shipped pretrained MiniLM's attention on its first token, [CLS], and its residual stream; a
model that knows nothing past L; sparsemax's weights) and negative ones that have not (uniform
causal attention, the LM at its initial parameters, Gaussian values of the probe's size,
softmax's weights, a trigram model), so that a column ranks only where the probe tells them
apart (``card_verdicts``). Quantities that read how the LM uses its context are read only from
an LM that beats a trigram model.

A user registers their own from a plugin (``--plugins``) with ``register(Diagnostic(...))``, as
they register a normalisation; a diagnostic that raises is reported on the card by name with its
traceback, and the rest of the card completes.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional

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
    margin: the equivalence margin in its units (a shift within +-margin is "equivalent");
      None: no equivalence is ever declared.
    context_dependent: it reads how the LM uses its context, so it is read only from an LM
      that beats a trigram model on held-out text (``card_lm.ngram_losses``).
    phenomenon: what it detects (e.g. "an attention sink"), where the diagnostic carries
      controls for it (``Diagnostic.controls``); "" for a quantity without controls.
    in_verdict: said in the diagnostic's verdict line (else in its tables alone: e.g. the
      loss levels past L, which the claim reads through their growth).
    in_softmax: the phenomenon is softmax's own, which the card's normalisation claims to
      remove (a sink, massive activations, a growing loss): the claim can be checked only where
      softmax shows it. False where the claim is of the card's own (exact zeros).
  """
  key: str
  label: str
  percent: bool = False
  on_board: bool = False
  margin: Optional[float] = None
  context_dependent: bool = False
  phenomenon: str = ""
  in_verdict: bool = True
  in_softmax: bool = True


class NotApplicable(Exception):
  """Raised by a diagnostic that does not apply to the card's normalisation; the message says
  why, and the card shows it in place of the section's numbers."""


@dataclasses.dataclass(frozen=True)
class CardContext:
  """What a diagnostic may measure: the card's normalisation, its scale's name and sizes
  (``card.train.Scale``), per arm the result of its LM (``card_lm.run_lm``; the card's is None
  for a normalisation that cannot be causal: ``lms`` says why), and the LM's references
  (``card_lm.references``: n-gram models, the pretrained MiniLM, random initialisation, Gaussian
  values; None where they were not measured) that the controls read."""
  spec: Any
  scale: str
  sizes: Any
  lm: Mapping[str, dict]
  references: Optional[Mapping[str, Any]] = None


@dataclasses.dataclass(frozen=True)
class Diagnostic:
  """A section of every card.

  Attributes:
    name: its registered name (a report's key).
    title: the section's heading.
    claim: the claim it checks and whose, one sentence, in the words of its papers.
    quantities: what it measures per seed.
    measure: ``CardContext -> {arm: {quantity key: [per evaluation seed]}}`` for every arm of
      ``ARMS``; NaN (or None) for a seed that has no value (a diverged model).
    controls: ``CardContext -> {quantity key: {"positive": control, "negatives": [control,
      ...]}}``, a control ``{"label", "values": [samples]}``: a model or array that has the
      quantity's phenomenon and ones that have not; the quantity's column ranks only where the
      positive one lies above every negative one (``card_verdicts.control_checks``). None: the
      diagnostic has no controls.
  """
  name: str
  title: str
  claim: str
  quantities: tuple
  measure: Callable[[CardContext], dict]
  controls: Optional[Callable[[CardContext], dict]] = None


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
  # a window of mL tokens' newest positions: its last band (0..L, L..2L, 2L..4L, ...); the
  # growth from 1L, the quantity the claim is about (each model against its own level)
  out = {}
  for arm, lm in lms(context).items():
    loss = {m: _per_seed(lm, lambda s, m=m: float(s["loss_by_band"][str(m)][-1]))
            for m in LENGTH_MULTIPLES}
    out[arm] = {f"loss_{m}x": loss[m] for m in LENGTH_MULTIPLES}
    out[arm].update({f"growth_{m}x": [None if x is None or one is None else x - one
                                      for x, one in zip(loss[m], loss[1])]
                     for m in LENGTH_MULTIPLES[1:]})
  return out


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


# ----- their controls, on the references that ``card_lm.references`` measures once -----

def measured_references(context: CardContext) -> Mapping:
  """The LM's references, or ``NotApplicable`` where the card measured none."""
  if not context.references:
    raise NotApplicable("the LM's references (n-gram models, MiniLM, random initialisation) "
                        "were not measured")
  return context.references


def _control(label: str, values) -> dict:
  return {"label": label, "values": [float(v) for v in np.ravel(values)]}


def _minilm(refs: Mapping, key: str) -> dict:
  """The pretrained MiniLM's values of ``key`` per text window, or why there are none."""
  minilm = refs.get("minilm", {})
  if "error" in minilm:
    return {"label": "pretrained all-MiniLM-L6-v2", "values": [], "error": minilm["error"]}
  return _control(f"pretrained all-MiniLM-L6-v2 on {len(minilm[key])} held-out text windows "
                  f"({minilm['what']})", minilm[key])


def _random_init(refs: Mapping, read: Callable[[dict], float]) -> dict:
  seeds = refs["random_init"]["seeds"]
  return _control(f"softmax LM at its initial parameters ({len(seeds)} seeds)",
                  [read(s) for s in seeds])


def _length_controls(context: CardContext) -> dict:
  refs = measured_references(context)
  trigram, windows = refs["ngram"]["3"], refs["ngram"]["windows"]
  one = float(np.mean(trigram["loss_by_band"]["1"]))
  out = {}
  for m in LENGTH_MULTIPLES[1:]:
    last = [bands[-1] for bands in trigram["window_band_losses"][str(m)]]
    past = refs["uniform_past_L"]["loss_by_band"][str(m)][-1]
    out[f"growth_{m}x"] = {
        "positive": _control(f"a model that knows nothing past L (the trigram within L, the "
                             f"uniform distribution past it), on {windows} windows",
                             [past - one] * len(last)),
        "negatives": [_control(f"the trigram model (no context past 2 tokens: the text's own "
                               f"drift), on {windows} windows", np.asarray(last) - one),
                      _random_init(refs, lambda s, m=m: s["loss_by_band"][str(m)][-1]
                                   - s["loss_by_band"]["1"][-1])]}
  return out


def _sink_controls(context: CardContext) -> dict:
  refs = measured_references(context)
  uniform = refs["uniform"]["first_token_share"]
  count = max(1, len(refs["random_init"]["seeds"]))
  negatives = lambda read: [_control("uniform causal attention at L", [uniform] * count),
                            _random_init(refs, read)]
  return {"first_token_share": {"positive": _minilm(refs, "first_token_share"),
                                "negatives": negatives(lambda s: np.mean(s["first_token_share"]))},
          "first_token_share_max": {
              "positive": _minilm(refs, "first_token_share_max"),
              "negatives": negatives(lambda s: np.max(s["first_token_share"]))}}


def _massive_controls(context: CardContext) -> dict:
  refs = measured_references(context)
  gaussian = refs["gaussian"]
  return {"massive_ratio": {
      "positive": _minilm(refs, "massive_ratio"),
      "negatives": [_control(f"Gaussian values of the probe's size ({gaussian['shape']})",
                             gaussian["massive_ratio"]),
                    _random_init(refs, lambda s: np.max(s["massive_ratio"]))]}}


def _sparsity_controls(context: CardContext) -> dict:
  refs = measured_references(context)
  logits = refs["random_logits"]
  return {"zero_share": {
      "positive": _control(f"sparsemax of Gaussian logits of the probe's size "
                           f"({logits['shape']})", logits["sparsemax_zero_share"]),
      "negatives": [_control("softmax of the same logits", logits["softmax_zero_share"]),
                    _random_init(refs, lambda s: s["zero_share"])]}}


def length_quantities(multiples: tuple) -> tuple:
  """One loss per evaluated multiple (the board shows the first) and the growth from 1L to each
  larger one (the board shows the last): the claim is about the growth."""
  losses = tuple(Quantity(f"loss_{m}x", f"loss at {m}L (nats)", on_board=m == multiples[0],
                          margin=0.01, context_dependent=m != multiples[0],
                          in_verdict=m == multiples[0])
                 for m in multiples)
  return losses + tuple(Quantity(f"growth_{m}x", f"loss growth from 1L to {m}L (nats)",
                                 on_board=m == multiples[-1], margin=0.01,
                                 context_dependent=True, phenomenon="a loss that grows past L")
                        for m in multiples[1:])


LENGTH_MULTIPLES = (1, 2, 4, 8)
BUILT_IN = (
    Diagnostic("length_generalisation", "Length generalisation (Scalable-Softmax; stick-breaking "
               "attention)",
               "Nakanishi (2025) and Tan et al. (2024) report that a model trained at context "
               "length L keeps its loss on longer windows with their normalisation, where "
               "softmax's grows",
               length_quantities(LENGTH_MULTIPLES), _length, _length_controls),
    Diagnostic("attention_sinks", "Attention sinks (softpick; gated attention)",
               "Zuhri et al. (2025) and Qiu et al. (2025) report that softpick and gated "
               "attention remove the attention sink, the first token drawing the attention that "
               "has nowhere else to go in softmax models",
               (Quantity("first_token_share",
                         "share of attention on the first token (mean over heads)",
                         percent=True, on_board=True, margin=0.005, context_dependent=True,
                         phenomenon="an attention sink"),
                Quantity("first_token_share_max",
                         "share of attention on the first token (worst head)", percent=True,
                         margin=0.01, context_dependent=True,
                         phenomenon="an attention sink")),
               _sinks, _sink_controls),
    Diagnostic("massive_activations", "Massive activations (softpick; gated attention)",
               "Sun et al. (2024) report residual-stream activations thousands of times the "
               "median in softmax LLMs, and Zuhri et al. (2025) that they shrink without a sink",
               (Quantity("massive_ratio", "largest / median |activation| (worst layer)",
                         on_board=True, margin=1.0, context_dependent=True,
                         phenomenon="massive activations"),), _massive, _massive_controls),
    Diagnostic("sparsity", "Sparse weights (sparsemax; 1.5-entmax)",
               "Martins & Astudillo (2016) and Peters et al. (2019) give exact zeros by "
               "construction, and so weights a reader can inspect",
               (Quantity("zero_share", "share of exact zeros among the weights", percent=True,
                         on_board=True, margin=0.005, phenomenon="exact zeros",
                         in_softmax=False),),
               _sparsity, _sparsity_controls),
)
for _diagnostic in BUILT_IN:
  register(_diagnostic)
