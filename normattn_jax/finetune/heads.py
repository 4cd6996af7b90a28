"""Task heads on any encoder of the project (``AlbertModel``, ``BertModel``; any attention
normalisation), as BERT's and ALBERT's fine-tuning code puts them:

- sequence classification and regression: dropout, then a dense layer on the pooled output
  (the encoder's own pooler: tanh(dense([CLS]))); one output for regression;
- span extraction: start and end logits per token from a dense layer on the last hidden states,
  padding excluded; the null answer is the span [CLS]..[CLS] (position 0), and answer texts are
  decoded on the host (``finetune.metrics.decode_spans``);
- multiple choice: every option runs through the encoder as its own sequence, one score per
  option from the pooled output, a softmax over the options.

The encoder is the head module's child ``encoder``, so its parameters sit under
``params["encoder"]`` and the head's own (new) ones beside them. Each kind of head is one
registered ``Head`` (``REGISTRY``): its module, loss and prediction; training code looks them
up by name.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from normattn_jax.registry import Registry

Array = jax.Array
INIT = nn.initializers.truncated_normal(0.02)  # BERT's and ALBERT's initializer_range
EXCLUDED = -1e9  # logit of a position a span cannot use (finite: no NaN in a softmax)


def _encode(encoder: nn.Module, features: dict, deterministic: bool) -> dict:
  return encoder(features["input_ids"], features["attention_mask"], features["token_type_ids"],
                 deterministic=deterministic)


class SequenceClassifier(nn.Module):
  """``features`` ``[B, L]`` -> float32 logits ``[B, num_outputs]`` from the pooled output."""
  encoder: nn.Module
  num_outputs: int
  dropout_rate: float = 0.1

  @nn.compact
  def __call__(self, features: dict, *, deterministic: bool = True) -> Array:
    pooled = _encode(self.encoder, features, deterministic)["pooler_output"]
    pooled = nn.Dropout(self.dropout_rate)(pooled, deterministic=deterministic)
    return nn.Dense(self.num_outputs, kernel_init=INIT, name="classifier")(
        pooled.astype(jnp.float32))


class SpanExtractor(nn.Module):
  """``features`` ``[B, L]`` -> float32 ``[B, L, 2]``: start and end logits per token, padding
  at ``EXCLUDED``."""
  encoder: nn.Module

  @nn.compact
  def __call__(self, features: dict, *, deterministic: bool = True) -> Array:
    hidden = _encode(self.encoder, features, deterministic)["last_hidden_state"]
    logits = nn.Dense(2, kernel_init=INIT, name="span")(hidden.astype(jnp.float32))
    valid = features["attention_mask"].astype(bool)[..., None]
    return jnp.where(valid, logits, EXCLUDED)


class MultipleChoice(nn.Module):
  """``features`` ``[B, C, L]`` -> float32 scores ``[B, C]``, one per option."""
  encoder: nn.Module
  dropout_rate: float = 0.1

  @nn.compact
  def __call__(self, features: dict, *, deterministic: bool = True) -> Array:
    batch, options, length = features["input_ids"].shape
    flat = {k: features[k].reshape(batch * options, length)
            for k in ("input_ids", "token_type_ids", "attention_mask")}
    pooled = _encode(self.encoder, flat, deterministic)["pooler_output"]
    pooled = nn.Dropout(self.dropout_rate)(pooled, deterministic=deterministic)
    scores = nn.Dense(1, kernel_init=INIT, name="classifier")(pooled.astype(jnp.float32))
    return scores.reshape(batch, options)


def _classification_loss(logits: Array, batch: dict) -> Array:
  return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label"]).mean()


def _regression_loss(logits: Array, batch: dict) -> Array:
  return jnp.mean(jnp.square(logits[:, 0] - batch["label"]))


def _span_loss(logits: Array, batch: dict) -> Array:
  """BERT's: the mean of the start and the end cross-entropies."""
  ce = optax.softmax_cross_entropy_with_integer_labels
  return 0.5 * (ce(logits[..., 0], batch["start_positions"])
                + ce(logits[..., 1], batch["end_positions"])).mean()


def _argmax(logits: Array, batch: dict) -> Array:
  del batch
  return jnp.argmax(logits, axis=-1).astype(jnp.int32)


def _value(logits: Array, batch: dict) -> Array:
  del batch
  return logits[:, 0]


def _logits(logits: Array, batch: dict) -> Array:
  """Span logits as they are: decoding into answer texts needs the context's characters and
  every window of a question (``metrics.decode_spans``), so it is done on the host."""
  del batch
  return logits


@dataclasses.dataclass(frozen=True)
class Head:
  """One kind of head: how to build it, its loss and its predictions.

  Attributes:
    name: the registry key.
    build: ``(encoder, num_labels, dropout_rate) -> module``.
    loss: ``(outputs, batch) -> scalar``.
    predict: ``(outputs, batch) -> predictions`` (class ids, values or span logits).
    label_fields: the batch fields the loss reads.
    option_axis: whether features are ``[C, L]`` per example (multiple choice).
    labels: what the label fields hold, checked before anything compiles
      (``task.FinetuneTask``): "classes" (integers in [0, num_labels)), "values" (finite
      numbers) or "positions" (integers in [0, L)); None checks only one value per example.
  """
  name: str
  build: Callable[[nn.Module, int, float], nn.Module]
  loss: Callable[[Array, dict], Array]
  predict: Callable[[Array, dict], Array]
  label_fields: tuple
  option_axis: bool = False
  labels: Optional[str] = None


LABEL_KINDS = ("classes", "values", "positions", None)


def _check(head: Head) -> None:
  """Refuse a head whose labels no check knows (its labels would go unchecked) or whose loss
  reads no label field."""
  if head.labels not in LABEL_KINDS:
    raise ValueError(f"head {head.name!r}: labels must be one of {LABEL_KINDS}, got "
                     f"{head.labels!r}")
  if (not isinstance(head.label_fields, tuple) or not head.label_fields
      or not all(isinstance(f, str) and f for f in head.label_fields)):
    raise ValueError(f"head {head.name!r}: label_fields must be a non-empty tuple of field "
                     f"names, got {head.label_fields!r}")


# register(head, *, replace=False) refuses a name already taken; get(name) names the registered
# heads when ``name`` is none of them. A user registers their own head the same way.
REGISTRY: Registry[Head] = Registry("head", Head, _check)
register = REGISTRY.register
unregister = REGISTRY.unregister
get = REGISTRY.get
names = REGISTRY.names
HEADS = REGISTRY.view  # the live, tuple-like view of the names


register(Head("classification",
              lambda encoder, n, rate: SequenceClassifier(encoder, n, rate),
              _classification_loss, _argmax, ("label",), labels="classes"))
register(Head("regression",
              lambda encoder, n, rate: SequenceClassifier(encoder, 1, rate),
              _regression_loss, _value, ("label",), labels="values"))
register(Head("span",
              lambda encoder, n, rate: SpanExtractor(encoder),
              _span_loss, _logits, ("start_positions", "end_positions"), labels="positions"))
register(Head("multiple_choice",
              lambda encoder, n, rate: MultipleChoice(encoder, rate),
              _classification_loss, _argmax, ("label",), option_axis=True, labels="classes"))
