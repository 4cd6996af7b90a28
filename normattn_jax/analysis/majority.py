"""The majority experiment of Brody et al. (Fig. 2, 3): one pre-LN encoder layer (d = 8, one head,
FFN width 8, no attention projection biases, output tied to the embedding) predicts at every
position the majority token type; LayerNorm before attention with its projection (``standard``)
against without it (``no_projection``). Seeds are one vmapped program.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from normattn_jax.attention import MultiHeadAttention
from normattn_jax.norms import LayerNorm, normalize
from normattn_jax.tasks import majority


class MajorityLayer(nn.Module):
  """Tokens [batch, N] -> class logits [batch, N, num_classes] (classes are the token types)."""
  num_classes: int = 20
  d_model: int = 8
  ffn_features: int = 8
  attention_norm: str = "standard"   # the LayerNorm before attention: "standard" | "no_projection"

  @nn.compact
  def __call__(self, tokens):
    embed = nn.Embed(self.num_classes, self.d_model, name="embedding")
    x = embed(tokens)
    h = LayerNorm(kind=self.attention_norm, epsilon=1e-5, name="attention_norm")(x)
    x = x + MultiHeadAttention(num_heads=1, use_bias=False, implementation="quadratic",
                               name="attention")(h)
    h = LayerNorm(epsilon=1e-5, name="ffn_norm")(x)
    x = x + nn.Dense(self.d_model, name="ffn_out")(jax.nn.gelu(nn.Dense(self.ffn_features,
                                                                       name="ffn_in")(h)))
    return embed.attend(x)


def query_angle(params, tokens, attention_norm: str, d_model: int = 8) -> float:
  """Mean angle (degrees) between the effective queries norm(x) W_Q W_K^T / sqrt(d) and the
  all-ones line: 0 means the queries only read the component along the ones vector."""
  return float(_query_angle(params, tokens, attention_norm, d_model))


def _query_angle(params, tokens, attention_norm: str, d_model: int = 8) -> jax.Array:
  p = params["params"]
  x = jnp.take(p["embedding"]["embedding"], tokens, axis=0)
  ln = p["attention_norm"]
  h = normalize(x, attention_norm, 1e-5) * ln["scale"] + ln["bias"]
  w_q = p["attention"]["query"]["kernel"].reshape(d_model, -1)
  w_k = p["attention"]["key"]["kernel"].reshape(d_model, -1)
  q = h @ w_q @ w_k.T / np.sqrt(d_model)
  cos = jnp.abs(q.sum(-1)) / (jnp.linalg.norm(q, axis=-1) * np.sqrt(d_model) + 1e-12)
  return jnp.degrees(jnp.arccos(jnp.clip(cos, 0.0, 1.0))).mean()


def train_majority(attention_norm: str, num_seeds: int = 10, train_size: int = 80_000,
                   test_size: int = 20_000, batch_size: int = 6000, steps: int = 1000,
                   eval_every: int = 50, learning_rate: float = 1e-3, seq_len: int = 50,
                   num_classes: int = 20, min_margin: int = 6, seed: int = 0,
                   verbose: bool = False) -> dict:
  """Train ``num_seeds`` models on one fixed data set (the paper's 80K / 20K split); returns
  curves [evals, seeds] of training loss, test accuracy and query angle."""
  model = MajorityLayer(num_classes=num_classes, attention_norm=attention_norm)
  k_train, k_test = jax.random.split(jax.random.key(seed))
  x_train, y_train = majority(k_train, train_size, seq_len, num_classes, min_margin)
  x_test, y_test = majority(k_test, test_size, seq_len, num_classes, min_margin)
  optimizer = optax.adam(learning_rate)

  def init(key):
    params = model.init(key, x_train[:1])
    return params, optimizer.init(params)

  def loss_fn(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(model.apply(params, x), y).mean()

  def step(carry, key):
    params, opt_state = carry
    idx = jax.random.randint(key, (batch_size,), 0, train_size)
    loss, grads = jax.value_and_grad(loss_fn)(params, x_train[idx], y_train[idx])
    updates, opt_state = optimizer.update(grads, opt_state)
    return (optax.apply_updates(params, updates), opt_state), loss

  def chunk(carry, key):
    carry, losses = jax.lax.scan(step, carry, jax.random.split(key, eval_every))
    logits = model.apply(carry[0], x_test)
    return carry, (losses.mean(), jnp.mean(jnp.argmax(logits, -1) == y_test))

  seeds = jax.random.split(jax.random.key(seed + 1), num_seeds)
  carry = jax.jit(jax.vmap(init))(seeds)
  run_chunk = jax.jit(jax.vmap(chunk))
  angles = jax.jit(jax.vmap(lambda p: _query_angle(p, x_test[:500], attention_norm)))
  curves = {"train_loss": [], "test_acc": [], "query_angle": []}
  for i in range(steps // eval_every):
    keys = jax.vmap(lambda k: jax.random.fold_in(k, i))(seeds)
    carry, (loss, acc) = run_chunk(carry, keys)
    curves["train_loss"].append(np.asarray(loss))
    curves["test_acc"].append(np.asarray(acc))
    curves["query_angle"].append(np.asarray(angles(carry[0])))
    if verbose:
      print(f"{attention_norm}: step {(i + 1) * eval_every}, loss {float(loss.mean()):.3f}, "
            f"test accuracy {float(acc.mean()):.3f}", flush=True)
  return {k: np.asarray(v) for k, v in curves.items()} | {
      "steps": np.arange(1, steps // eval_every + 1) * eval_every}
