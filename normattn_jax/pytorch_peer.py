"""The PyTorch peer of the grid engine's MTE ``SequenceModel`` on the case task, for
``benchmarks/pytorch_peer.py``: the network as a PyTorch user would write it (``TorchMTE``), our
flax parameters copied into it (``load_flax_params``), the check that it is our network
(``check_same_network``), and M models trained one after another (``sequential_trainer``) or as
one ``torch.func`` ensemble (``ensemble_trainer``, Adam in ``torch._foreach`` ops over the stacked
parameters, as PyTorch's model-ensembling tutorial). Both use Adam with learning rate 1e-3 and
Keras' epsilon 1e-7, as the engine's optimiser, and draw a fresh case batch per step with torch
ops. Needs PyTorch (the ``peer`` extra, a CPU build).
"""
from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np

from normattn_jax._extras import require
from normattn_jax.tasks.synthetic import ARGMIN_TOKEN, FIRST_TOKEN, case_distinction

torch = require("torch", "peer")
F = torch.nn.functional
nn = torch.nn

LEARNING_RATE = 1e-3
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-7  # Keras' Adam, as the engine's optimiser
# float32 rounding stays below 5e-6 at d = 128; a query bias off by 0.01 moves the logits 2e-4
LOGIT_TOLERANCE = 2e-5


# ----- the PyTorch side: the MTE SequenceModel as a user would write it -----

def _gelu(x):
  return F.gelu(x, approximate="tanh")


class Attention(nn.Module):
  """Softmax attention (fused q/k/v projection), then GELU(LN(concat heads)) and the mix.

  ``sdpa`` takes PyTorch's fused kernel; without it the weights are formed in plain ops, which
  ``torch.func.vmap`` batches (it has no batching rule for the fused CPU kernel and would loop
  over the models)."""

  def __init__(self, d_model, num_heads, eps, sdpa=True):
    super().__init__()
    self.num_heads, self.sdpa = num_heads, sdpa
    self.qkv = nn.Linear(d_model, 3 * d_model)
    self.head_norm = nn.LayerNorm(d_model, eps=eps)
    self.out = nn.Linear(d_model, d_model)

  def forward(self, x):
    b, n, d = x.shape
    qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, d // self.num_heads)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each [b, heads, n, head_dim]
    if self.sdpa:
      h = F.scaled_dot_product_attention(q, k, v)     # scaled by 1/sqrt(head_dim)
    else:
      h = torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1) @ v
    h = h.transpose(1, 2).reshape(b, n, d)
    return self.out(_gelu(self.head_norm(h)))


class Block(nn.Module):
  """MTE: p = x + LN(attention(x)); x' = p + LN(W2 GELU(LN(W1 p + b1)) + b2)."""

  def __init__(self, d_model, num_heads, eps, sdpa=True):
    super().__init__()
    self.attention = Attention(d_model, num_heads, eps, sdpa)
    self.attention_norm = nn.LayerNorm(d_model, eps=eps)
    self.ffn_in = nn.Linear(d_model, 4 * d_model)
    self.ffn_hidden_norm = nn.LayerNorm(4 * d_model, eps=eps)
    self.ffn_out = nn.Linear(4 * d_model, d_model)
    self.ffn_norm = nn.LayerNorm(d_model, eps=eps)

  def forward(self, x):
    p = x + self.attention_norm(self.attention(x))
    f = self.ffn_out(_gelu(self.ffn_hidden_norm(self.ffn_in(p))))
    return p + self.ffn_norm(f)


class TorchMTE(nn.Module):
  """Tokens [batch, N] -> one logit per position [batch, N] (the "tokens" head)."""

  def __init__(self, vocab_size, max_len, d_model, num_layers=2, num_heads=4, eps=1e-3,
               init_std=0.02, sdpa=True):
    super().__init__()
    self.token_embedding = nn.Embedding(vocab_size, d_model)
    self.position_embedding = nn.Parameter(torch.empty(max_len, d_model))
    self.blocks = nn.ModuleList(Block(d_model, num_heads, eps, sdpa) for _ in range(num_layers))
    self.head = nn.Linear(d_model, 1)
    for name, p in self.named_parameters():  # ours: truncated normal(0.02), zero biases
      if "norm" in name:
        continue
      if name.endswith("bias"):
        nn.init.zeros_(p)
      else:
        nn.init.trunc_normal_(p, std=init_std, a=-2 * init_std, b=2 * init_std)

  def forward(self, tokens):
    x = self.token_embedding(tokens) + self.position_embedding[:tokens.shape[-1]]
    for block in self.blocks:
      x = block(x)
    return self.head(x).squeeze(-1)


def torch_model(setup, sdpa=True) -> TorchMTE:
  """The PyTorch twin of ``setup.model()``."""
  model, c = setup.model(), setup.config
  return TorchMTE(c.task.vocab_size, model.max_len, c.model.d_model, c.model.num_layers,
                  c.model.num_heads, model.layer_norm_epsilon, model.init_std, sdpa)


def case_batch(shape, vocab_size, generator):
  """Uniform tokens of the case task, drawn with torch ops, and their labels."""
  tokens = torch.randint(0, vocab_size, shape, generator=generator)
  return tokens, case_labels(tokens)


def case_labels(tokens):
  """argmin if 64 occurs, else position 0 if 50 does, else argmax; ties to the first."""
  labels = torch.where((tokens == FIRST_TOKEN).any(-1), 0, tokens.argmax(-1))
  return torch.where((tokens == ARGMIN_TOKEN).any(-1), tokens.argmin(-1), labels)


def load_flax_params(module: TorchMTE, params) -> None:
  """Copy a flax ``SequenceModel`` params tree into ``module`` (flax kernels are [in, out])."""
  t = lambda x: torch.from_numpy(np.array(x, np.float32))
  p = params["params"]
  d = p["position_embedding"].shape[-1]
  state = {"token_embedding.weight": t(p["token_embedding"]["embedding"]),
           "position_embedding": t(p["position_embedding"]),
           "head.weight": t(p["head"]["kernel"]).T, "head.bias": t(p["head"]["bias"])}
  for i in range(len(module.blocks)):
    ours, name = p[f"block_{i}"], f"blocks.{i}."
    a = ours["attention"]
    state[name + "attention.qkv.weight"] = torch.cat(
        [t(a[x]["kernel"]).reshape(d, d) for x in ("query", "key", "value")], 1).T
    state[name + "attention.qkv.bias"] = torch.cat(
        [t(a[x]["bias"]).reshape(d) for x in ("query", "key", "value")])
    state[name + "attention.out.weight"] = t(a["out"]["kernel"]).reshape(d, d).T
    state[name + "attention.out.bias"] = t(a["out"]["bias"])
    norms = [("attention.head_norm", a["head_norm"])] + [
        (x, ours[x]) for x in ("attention_norm", "ffn_hidden_norm", "ffn_norm")]
    for x, norm in norms:
      state[name + x + ".weight"], state[name + x + ".bias"] = t(norm["scale"]), t(norm["bias"])
    for x in ("ffn_in", "ffn_out"):
      state[name + x + ".weight"] = t(ours[x]["kernel"]).T
      state[name + x + ".bias"] = t(ours[x]["bias"])
  module.load_state_dict({k: v.contiguous() for k, v in state.items()})


def check_same_network(setup, batch_size: int = 4, seed: int = 0) -> dict:
  """Whether the PyTorch twin is our network: the parameter counts (ours from
  ``jax.eval_shape``), the largest logit difference (and the logits' scale) once our
  initialised parameters, perturbed, are copied in (with either attention path), and whether
  the torch labels rule labels our case batch as ours does.

  Args:
    setup: an MTE ``train.programs.Setup`` of the case task.
    batch_size: sequences of the compared batch.
    seed: the seed of the parameters, their noise and the batch.

  Returns:
    ``{"params_ours", "params_torch", "max_logit_diff", "logit_scale", "labels_equal"}``.
  """
  model = setup.model()
  seq_len = setup.config.task.seq_len
  key = jax.random.key(seed)
  example = jnp.zeros((1, seq_len), jnp.int32)
  shapes = jax.eval_shape(model.init, key, example)
  ours = int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes)))
  twin = torch_model(setup)
  theirs = sum(p.numel() for p in twin.parameters())

  params = jax.jit(model.init)(key, example)
  # noise on every leaf, so that the zero biases and unit gains of the initialisation count
  rng = np.random.default_rng(seed)
  params = jax.tree.map(lambda x: x + 0.1 * rng.standard_normal(x.shape, np.float32), params)
  batch = jax.jit(case_distinction, static_argnums=(1, 2))(
      jax.random.fold_in(key, 1), batch_size, seq_len)
  expected = jax.jit(model.apply)(params, batch.inputs)
  expected = np.asarray(expected)
  tokens = torch.from_numpy(np.asarray(batch.inputs, np.int64))
  diff = 0.0
  for sdpa in (True, False):
    twin = torch_model(setup, sdpa)
    load_flax_params(twin, params)
    with torch.no_grad():
      diff = max(diff, float(np.max(np.abs(twin(tokens).numpy() - expected))))
  labels = case_labels(tokens).numpy()
  return {"params_ours": ours, "params_torch": theirs, "max_logit_diff": diff,
          "logit_scale": float(np.std(expected)),
          "labels_equal": bool(np.array_equal(labels, np.asarray(batch.labels)))}


# ----- training: one after another, and as one torch.func ensemble -----

def sequential_trainer(setup, num_models, steps):
  """M models, each trained ``steps`` steps after the one before: a plain training loop."""
  c = setup.config
  shape = (c.train.batch_size, c.task.seq_len)
  runs = []
  for i in range(num_models):
    torch.manual_seed(i)
    model = torch_model(setup)
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, betas=(ADAM_B1, ADAM_B2),
                           eps=ADAM_EPS)
    runs.append((model, opt, torch.Generator().manual_seed(i)))

  def run():
    for model, opt, generator in runs:
      for _ in range(steps):
        tokens, labels = case_batch(shape, c.task.vocab_size, generator)
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
  run.models = [model for model, _, _ in runs]
  return run


def ensemble_trainer(setup, num_models, steps, sdpa=False):
  """M models as one ``torch.func`` ensemble, each with its own batch, Adam over the stacks."""
  c = setup.config
  models = []
  for i in range(num_models):
    torch.manual_seed(i)
    models.append(torch_model(setup, sdpa))
  params, buffers = torch.func.stack_module_state(models)
  names = list(params)
  params = [params[k].detach() for k in names]
  base = copy.deepcopy(models[0]).to("meta")
  generator = torch.Generator().manual_seed(0)

  def loss_fn(flat, tokens, labels):
    logits = torch.func.functional_call(base, (dict(zip(names, flat)), buffers), (tokens,))
    return F.cross_entropy(logits, labels)

  grad_fn = torch.func.vmap(torch.func.grad_and_value(loss_fn))
  mu = [torch.zeros_like(p) for p in params]
  nu = [torch.zeros_like(p) for p in params]
  count = [0]

  def adam(grads):
    count[0] += 1
    torch._foreach_lerp_(mu, grads, 1 - ADAM_B1)
    torch._foreach_mul_(nu, ADAM_B2)
    torch._foreach_addcmul_(nu, grads, grads, 1 - ADAM_B2)
    denom = torch._foreach_sqrt(nu)
    torch._foreach_div_(denom, (1 - ADAM_B2 ** count[0]) ** 0.5)
    torch._foreach_add_(denom, ADAM_EPS)
    torch._foreach_addcdiv_(params, mu, denom, -LEARNING_RATE / (1 - ADAM_B1 ** count[0]))

  def run():
    for _ in range(steps):
      tokens, labels = case_batch((num_models, c.train.batch_size, c.task.seq_len),
                                  c.task.vocab_size, generator)
      grads, _ = grad_fn(params, tokens, labels)
      adam(grads)
  run.params = dict(zip(names, params))  # the stacked parameters, updated in place
  return run
