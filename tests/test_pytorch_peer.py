"""normattn_jax.pytorch_peer (benchmarks/pytorch_peer.py's PyTorch side): the PyTorch peer
trains our network on our task, so the benchmark compares like with like."""
import pytest

from normattn_jax.sweep.config import base_config
from normattn_jax.sweep.programs import Setup

torch = pytest.importorskip("torch")
from normattn_jax import pytorch_peer as peer  # noqa: E402 (after the skip: needs torch)


def mte_setup(d_model):
  """The benchmark's MTE at the NAP paper's defaults, d = N = ``d_model``."""
  c = base_config()
  c.model.d_model, c.task.seq_len = d_model, d_model
  return Setup("mte", c)


@pytest.fixture(autouse=True)
def one_torch_thread():
  """PyTorch's threads busy-wait for each other: on cores shared with other tests, one thread is
  many times faster than two."""
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)


@pytest.mark.parametrize("d_model", [32, 128])
def test_same_network_and_task(d_model):
  check = peer.check_same_network(mte_setup(d_model))
  assert check["params_torch"] == check["params_ours"]
  assert check["max_logit_diff"] <= peer.LOGIT_TOLERANCE, check
  assert check["logit_scale"] > 1000 * peer.LOGIT_TOLERANCE  # the logits are not all ~0
  assert check["labels_equal"]


def test_check_catches_a_wrong_bias(monkeypatch):
  load = peer.load_flax_params

  def off_by_a_little(module, params):
    load(module, params)
    with torch.no_grad():
      bias = module.blocks[0].attention.qkv.bias
      bias[:bias.shape[0] // 3] += 0.01  # the query bias only
  monkeypatch.setattr(peer, "load_flax_params", off_by_a_little)
  assert peer.check_same_network(mte_setup(32))["max_logit_diff"] > 5 * peer.LOGIT_TOLERANCE


def test_ensemble_trains_as_torch_adam():
  """One model in the torch.func ensemble (Adam over the stacks) follows torch.optim.Adam on the
  same batches; Adam's first steps amplify the rounding of gradients near 0, hence the mean."""
  setup = mte_setup(32)
  sequential = peer.sequential_trainer(setup, 1, 3)
  ensemble = peer.ensemble_trainer(setup, 1, 3)
  sequential()
  ensemble()
  reference = dict(sequential.models[0].named_parameters())
  diff = torch.cat([(stacked[0] - reference[name].detach()).abs().flatten()
                    for name, stacked in ensemble.params.items()])
  assert diff.mean() < 1e-6 and (diff > 1e-5).float().mean() < 0.01
