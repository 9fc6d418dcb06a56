"""The runner's gradient buckets (placement_core/torch/collectives.py): DDP's layout and overlap, checked with
an all-reduce that records its calls (a two-rank run of the whole path is tests/test_torch_sharding.py)."""

import pytest

torch = pytest.importorskip("torch")

from placement_core.torch.collectives import GradientBuckets  # noqa: E402


class _Comm:
    stage = False
    bytes_sent = 0.0
    messages = 0


class _Work:
    def __init__(self, log, i):
        self.log, self.i = log, i

    def wait(self):
        self.log.append(("wait", self.i))


@pytest.fixture
def model_and_calls(monkeypatch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 10))
    calls = []

    def all_reduce(flat, group=None, async_op=False):
        # as if the other rank held the same gradients: the sum is twice them; and what the backward had done
        calls.append({"size": flat.numel(), "group": group, "first_weight_done": model[0].weight.grad is not None})
        flat.mul_(2)
        return _Work(calls, len(calls) - 1)

    monkeypatch.setattr(torch.distributed, "all_reduce", all_reduce)
    return model, calls


def _step(model, buckets, x):
    model.zero_grad(set_to_none=True)
    buckets.arm()
    model(x).square().sum().backward()
    buckets.finish()


def test_buckets_follow_ddps_layout_and_start_during_the_backward(model_and_calls):
    model, calls = model_and_calls
    comm = _Comm()
    params = list(model.parameters())
    buckets = GradientBuckets([(params, "g", 2)], comm)
    # reverse order b3 w3 b2 | w2 b1 w1: the first bucket stops before w2 would pass 1 MiB (262,144 floats):
    # 10 + 5,120 + 512 = 5,642 elements; the next holds 262,144 + 512 + 262,144 = 524,800 (under 25 MiB)
    assert [b.size for b in buckets.buckets] == [5642, 524800]
    x = torch.randn(4, 512)
    reference = torch.nn.Sequential(*[torch.nn.Linear(512, 512), torch.nn.Linear(512, 512), torch.nn.Linear(512, 10)])
    reference.load_state_dict(model.state_dict())
    reference(x).square().sum().backward()
    _step(model, buckets, x)
    sizes = [c["size"] for c in calls if isinstance(c, dict)]
    assert sizes == [5642, 524800]
    # the last layer's bucket went out while the first layer's backward had not run yet
    assert [c["first_weight_done"] for c in calls if isinstance(c, dict)] == [False, True]
    for p, r in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p.grad, 2 * r.grad)
    # gradients are views into the kept buckets, and the buffers survive to the next step
    flats = [b.flat for b in buckets.buckets]
    # w1 sits after w2 and b1 in the second bucket: 262,144 + 512 floats in
    assert model[0].weight.grad.data_ptr() == flats[1].data_ptr() + (262144 + 512) * 4
    _step(model, buckets, x)
    assert [b.flat for b in buckets.buckets] == flats
    # two steps of two buckets; a ring of k = 2 moves 2 (k - 1) / k = 1 of each bucket's bytes
    assert comm.messages == 4 and comm.bytes_sent == pytest.approx(2 * (5642 + 524800) * 4)


def test_a_held_back_parameter_starts_its_bucket_after_the_backward(model_and_calls):
    model, calls = model_and_calls
    params = list(model.parameters())
    buckets = GradientBuckets([(params, "g", 2)], _Comm(), late={id(model[2].weight)})
    x = torch.randn(4, 512)
    _step(model, buckets, x)
    # the first bucket (b3 w3 b2) waits for the held-back w3, and the second for the first: both after backward
    assert [c["first_weight_done"] for c in calls if isinstance(c, dict)] == [True, True]
    expected = torch.func.grad(lambda w: torch.nn.functional.linear(
        model[1](model[0](x)).detach(), w, model[2].bias).square().sum())(model[2].weight.detach())
    assert torch.allclose(model[2].weight.grad, 2 * expected, rtol=1e-4, atol=1e-5)


def test_an_unused_parameter_is_summed_as_zeros(model_and_calls):
    model, calls = model_and_calls
    extra = torch.nn.Parameter(torch.ones(3))
    buckets = GradientBuckets([(list(model.parameters()) + [extra], "g", 2)], _Comm())
    _step(model, buckets, torch.randn(2, 512))
    assert torch.equal(extra.grad, torch.zeros(3))
    assert len([c for c in calls if isinstance(c, dict)]) == 2


def test_gradient_after_its_bucket_started_is_an_error(model_and_calls):
    model, _ = model_and_calls
    buckets = GradientBuckets([(list(model.parameters()), "g", 2)], _Comm())
    model.zero_grad(set_to_none=True)
    buckets.arm()
    x = torch.randn(2, 512)
    model(x).sum().backward()
    with pytest.raises(RuntimeError, match="after its bucket"):
        model(x).sum().backward()  # a second backward call into the same parameters
