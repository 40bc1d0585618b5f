"""nn.Module bookkeeping, Parameter, containers, state_dict, hooks, modes, devices/dtypes, repr."""
import copy
from collections import OrderedDict

import numpy as np
import pytest

import eagerc
import eagerc.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.block = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.BatchNorm1d(3))
        self.scale = nn.Parameter(eagerc.ones(1))
        self.register_buffer("steps", eagerc.zeros(1))
        self.register_buffer("cache", eagerc.zeros(2), persistent=False)
        self.plain = 5

    def forward(self, x):
        return self.block(self.fc1(x)) * self.scale


# ---------------------------------------------------------------- Parameter

def test_parameter_is_a_leaf_tensor_sharing_memory():
    t = eagerc.zeros(2, 3)
    p = nn.Parameter(t)
    assert isinstance(p, eagerc.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad_fn is None
    p._array[0, 0] = 7  # shares t's memory, like PyTorch
    assert t.numpy()[0, 0] == 7
    assert not nn.Parameter(t, requires_grad=False).requires_grad
    assert type(p * 2) is eagerc.Tensor
    assert repr(p).startswith("Parameter containing:\ntensor(")
    assert str(p) == repr(p)
    with pytest.raises(RuntimeError, match="floating point"):
        nn.Parameter(eagerc.tensor([1, 2]))


def test_parameter_deepcopy_keeps_class():
    p = nn.Parameter(eagerc.randn(3))
    q = copy.deepcopy(p)
    assert type(q) is nn.Parameter and q.requires_grad
    np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
    assert q._array is not p._array


# ---------------------------------------------------------------- registration and traversal

def test_named_parameters_buffers_children_modules():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == [
        "scale", "fc1.weight", "fc1.bias", "block.0.weight", "block.0.bias", "block.2.weight", "block.2.bias"]
    assert len(list(net.parameters())) == 7
    assert len(list(net.parameters(recurse=False))) == 1
    assert [n for n, _ in net.named_buffers()] == [
        "steps", "cache", "block.2.running_mean", "block.2.running_var", "block.2.num_batches_tracked"]
    assert [n for n, _ in net.named_children()] == ["fc1", "block"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "block", "block.0", "block.1", "block.2"]
    assert list(net.children())[0] is net.fc1
    assert len(list(net.modules())) == 6
    assert net.get_submodule("block.0") is net.block[0]
    assert net.get_parameter("block.0.bias") is net.block[0].bias
    assert net.get_buffer("block.2.running_var") is net.block[2].running_var


def test_shared_parameters_are_listed_once():
    a = nn.Linear(2, 2)
    seq = nn.Sequential(a, nn.ReLU(), a)
    assert len(list(seq.parameters())) == 2
    assert len(list(seq.named_parameters(remove_duplicate=False))) == 4
    assert len(list(seq.modules())) == 3


def test_setattr_getattr_delattr_bookkeeping():
    m = nn.Module()
    m.w = nn.Parameter(eagerc.ones(2))
    m.sub = nn.Linear(2, 2)
    m.register_buffer("b", eagerc.zeros(1))
    assert "w" in m._parameters and "sub" in m._modules and "b" in m._buffers
    assert "w" not in m.__dict__ and "sub" not in m.__dict__
    m.b = eagerc.ones(1)  # assigning a tensor to a buffer name replaces the buffer
    assert m._buffers["b"].item() == 1
    with pytest.raises(TypeError, match="cannot assign"):
        m.w = eagerc.ones(2)  # a plain tensor is not a Parameter
    m.w = None
    assert m.w is None and "w" in m._parameters
    with pytest.raises(TypeError):
        m.sub = 3
    m.x = 1
    del m.sub, m.b, m.x
    assert "sub" not in m._modules and "b" not in m._buffers and not hasattr(m, "x")
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        m.nothing
    m.buf = nn.Buffer(eagerc.ones(3), persistent=False)
    assert "buf" in m._buffers and "buf" in m._non_persistent_buffers_set
    assert type(m.buf) is eagerc.Tensor


def test_register_errors():
    m = nn.Module()
    m.attr = 1
    with pytest.raises(KeyError, match="already exists"):
        m.register_buffer("attr", eagerc.zeros(1))
    with pytest.raises(KeyError, match="contain"):
        m.register_parameter("a.b", None)
    with pytest.raises(TypeError, match="Parameter or None"):
        m.register_parameter("p", eagerc.zeros(1))
    with pytest.raises(TypeError, match="not a Module subclass"):
        m.add_module("x", 3)

    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(eagerc.ones(1))
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bad()


def test_missing_forward():
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


# ---------------------------------------------------------------- state_dict

def test_state_dict_round_trip():
    eagerc.manual_seed(0)
    a, b = Net(), Net()
    a.block[2].running_mean.fill_(0.5)
    sd = a.state_dict()
    assert list(sd) == ["scale", "steps", "fc1.weight", "fc1.bias", "block.0.weight", "block.0.bias",
                        "block.2.weight", "block.2.bias", "block.2.running_mean", "block.2.running_var",
                        "block.2.num_batches_tracked"]
    assert "cache" not in sd  # non-persistent
    assert isinstance(sd, OrderedDict)
    assert not sd["fc1.weight"].requires_grad and type(sd["fc1.weight"]) is eagerc.Tensor
    assert sd["fc1.weight"]._array is a.fc1.weight._array  # detached, sharing memory
    w_before = b.fc1.weight
    result = b.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    assert b.fc1.weight is w_before  # copied in place
    x = eagerc.randn(5, 4)
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    assert sd["block.2.num_batches_tracked"].dtype == eagerc.int64


def test_state_dict_keep_vars_and_prefix():
    lin = nn.Linear(2, 2)
    assert lin.state_dict(keep_vars=True)["weight"] is lin.weight
    assert list(lin.state_dict(prefix="m.")) == ["m.weight", "m.bias"]


def test_load_state_dict_reports_missing_and_unexpected_keys():
    net = Net()
    sd = net.state_dict()
    del sd["fc1.bias"]
    sd["fc1.extra"] = eagerc.zeros(1)
    sd["nothere.weight"] = eagerc.zeros(1)
    with pytest.raises(RuntimeError) as e:
        net.load_state_dict(sd)
    msg = str(e.value)
    assert msg.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "fc1.bias"' in msg
    assert '"fc1.extra"' in msg and '"nothere.weight"' in msg and "Unexpected key(s)" in msg
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc1.bias"]
    assert sorted(result.unexpected_keys) == ["fc1.extra", "nothere.weight"]


def test_load_state_dict_shape_mismatch_names_key_and_shapes():
    net = nn.Sequential(nn.Linear(4, 3))
    sd = {"0.weight": eagerc.zeros(2, 4), "0.bias": eagerc.zeros(3)}
    for strict in (True, False):
        with pytest.raises(RuntimeError) as e:
            net.load_state_dict(sd, strict=strict)
        assert ("size mismatch for 0.weight: copying a param with shape eagerc.Size([2, 4]) from checkpoint, "
                "the shape in current model is eagerc.Size([3, 4]).") in str(e.value)


def test_load_state_dict_converts_dtype_and_accepts_numpy():
    lin = nn.Linear(2, 2)
    lin.load_state_dict({"weight": np.eye(2), "bias": eagerc.ones(2, dtype=eagerc.float64)})
    assert lin.weight.dtype == eagerc.float32
    np.testing.assert_array_equal(lin.weight.detach().numpy(), np.eye(2))


# ---------------------------------------------------------------- modes, grads, apply

def test_train_eval_propagates():
    net = Net()
    assert net.training and net.block[2].training
    assert net.eval() is net
    assert not net.training and not net.block[2].training
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(ValueError):
        net.train("yes")


def test_zero_grad_and_requires_grad_():
    lin = nn.Linear(3, 2)
    lin(eagerc.randn(4, 3)).sum().backward()
    assert lin.weight.grad is not None
    lin.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(lin.weight.grad.numpy(), np.zeros((2, 3)))
    lin.zero_grad()
    assert lin.weight.grad is None and lin.bias.grad is None
    lin.requires_grad_(False)
    assert not any(p.requires_grad for p in lin.parameters())


def test_apply_visits_children_first():
    seen = []
    net = Net()
    assert net.apply(lambda m: seen.append(type(m).__name__)) is net
    assert seen == ["Linear", "Linear", "ReLU", "BatchNorm1d", "Sequential", "Net"]


# ---------------------------------------------------------------- devices and dtypes

def test_double_float_half_keep_parameter_identity():
    net = Net()
    params = list(net.parameters())
    net(eagerc.randn(4, 4)).sum().backward()
    assert net.double() is net
    assert [p is q for p, q in zip(params, net.parameters())] == [True] * len(params)
    assert all(p.dtype == eagerc.float64 and isinstance(p, nn.Parameter) for p in net.parameters())
    assert all(p.grad.dtype == eagerc.float64 for p in net.parameters())
    assert net.block[2].running_mean.dtype == eagerc.float64
    assert net.block[2].num_batches_tracked.dtype == eagerc.int64  # integers are not converted
    net.half()
    assert net.fc1.weight.dtype == eagerc.float16
    net.to(eagerc.float32)
    assert net.fc1.weight.dtype == eagerc.float32
    out = net(eagerc.randn(4, 4))
    assert out.dtype == eagerc.float32
    assert net.to("cpu") is net and net.cpu() is net
    with pytest.raises(TypeError, match="floating point"):
        net.to(eagerc.int64)


def test_to_keeps_values_and_optimizer_references():
    lin = nn.Linear(2, 2)
    w = lin.weight
    before = w.detach().numpy().copy()
    lin.to(dtype=eagerc.float64)
    assert lin.weight is w
    np.testing.assert_allclose(w.detach().numpy(), before)


# ---------------------------------------------------------------- hooks

def test_forward_pre_and_post_hooks():
    lin = nn.Linear(2, 2)
    calls = []

    def pre(module, args):
        calls.append(("pre", module is lin))
        return (args[0] * 0,)

    def post(module, args, output):
        calls.append(("post", tuple(output.shape)))
        return output + 1

    h1 = lin.register_forward_pre_hook(pre)
    h2 = lin.register_forward_hook(post)
    out = lin(eagerc.randn(3, 2))
    assert calls == [("pre", True), ("post", (3, 2))]
    np.testing.assert_allclose(out.detach().numpy(), lin.bias.detach().numpy() + 1 + np.zeros((3, 2)), rtol=1e-6)
    h1.remove()
    h2.remove()
    calls.clear()
    lin(eagerc.randn(3, 2))
    assert calls == [] and not lin._forward_hooks and not lin._forward_pre_hooks


def test_hook_options_prepend_kwargs_context_manager():
    lin = nn.Linear(2, 2)
    order = []
    lin.register_forward_hook(lambda m, a, o: order.append("a"))
    lin.register_forward_hook(lambda m, a, o: order.append("b"), prepend=True)

    def pre_kw(module, args, kwargs):
        order.append("kw")
        return args, kwargs
    lin.register_forward_pre_hook(pre_kw, with_kwargs=True)
    lin.register_forward_hook(lambda m, a, kw, o: order.append(("post_kw", kw)), with_kwargs=True)
    lin(eagerc.randn(1, 2))
    assert order == ["kw", "b", "a", ("post_kw", {})]
    seq = nn.Sequential(nn.ReLU())
    with seq.register_forward_hook(lambda m, a, o: o * 2):
        assert seq(eagerc.ones(1)).item() == 2
    assert seq(eagerc.ones(1)).item() == 1


def test_global_module_hooks():
    seen = []
    handle = nn.modules.register_module_forward_hook(lambda m, a, o: seen.append(type(m).__name__))
    try:
        nn.Sequential(nn.ReLU(), nn.Tanh())(eagerc.ones(1))
    finally:
        handle.remove()
    assert seen == ["ReLU", "Tanh", "Sequential"]


# ---------------------------------------------------------------- containers

def test_sequential_indexing_slicing_append():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert seq[0] is a and seq[-1] is c and len(seq) == 3
    head = seq[:2]
    assert isinstance(head, nn.Sequential) and list(head) == [a, b]
    assert list(head._modules) == ["0", "1"]
    with pytest.raises(IndexError):
        seq[3]
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and isinstance(seq[3], nn.Sigmoid)
    x = eagerc.randn(5, 2)
    np.testing.assert_allclose(seq(x).detach().numpy(), seq[3](c(b(a(x)))).detach().numpy())
    del seq[1]
    assert list(seq._modules) == ["0", "1", "2"] and seq[1] is c
    seq[0] = nn.Identity()
    assert isinstance(seq[0], nn.Identity)
    named = nn.Sequential(OrderedDict([("enc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert isinstance(named.act, nn.ReLU) and named[1] is named.act
    seq.insert(0, nn.Tanh())
    assert isinstance(seq[0], nn.Tanh) and len(seq) == 4


def test_module_list_and_dict():
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(ml) == 3 and len(list(ml.parameters())) == 6
    ml.append(nn.ReLU())
    ml.extend([nn.Tanh()])
    assert isinstance(ml[-1], nn.Tanh) and isinstance(ml[1:3], nn.ModuleList) and len(ml[1:3]) == 2
    del ml[0]
    assert list(ml._modules) == ["0", "1", "2", "3"]
    ml.insert(1, nn.Sigmoid())
    assert isinstance(ml[1], nn.Sigmoid)
    md = nn.ModuleDict({"a": nn.Linear(1, 1), "b": nn.ReLU()})
    md["c"] = nn.Tanh()
    assert list(md) == ["a", "b", "c"] and "a" in md and len(md) == 3
    assert list(md.keys()) == ["a", "b", "c"] and md["b"] is md.b
    assert isinstance(md.pop("c"), nn.Tanh) and len(md) == 2
    assert [n for n, _ in md.named_parameters()] == ["a.weight", "a.bias"]


def test_parameter_list_and_dict():
    pl = nn.ParameterList([eagerc.ones(2), nn.Parameter(eagerc.zeros(3))])
    assert all(isinstance(p, nn.Parameter) for p in pl) and len(pl) == 2
    pl.append(eagerc.ones(1))
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert pl[-1].shape == (1,)
    pd = nn.ParameterDict({"w": eagerc.ones(2)})
    pd["b"] = eagerc.zeros(1)
    assert isinstance(pd["w"], nn.Parameter) and list(pd.keys()) == ["w", "b"] and "b" in pd
    assert [n for n, _ in pd.named_parameters()] == ["w", "b"]
    assert sorted(pd.state_dict()) == ["b", "w"]


# ---------------------------------------------------------------- repr

def test_nested_repr_like_pytorch():
    net = Net()
    assert repr(net) == """Net(
  (fc1): Linear(in_features=4, out_features=3, bias=True)
  (block): Sequential(
    (0): Linear(in_features=3, out_features=3, bias=True)
    (1): ReLU()
    (2): BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)
  )
)"""
    ml = nn.ModuleList([nn.Linear(2, 2), nn.Linear(2, 2), nn.ReLU()])
    assert repr(ml) == """ModuleList(
  (0-1): 2 x Linear(in_features=2, out_features=2, bias=True)
  (2): ReLU()
)"""
    assert repr(nn.ParameterList([eagerc.ones(2, 3)])) == \
        "ParameterList(  (0): Parameter containing: [eagerc.float32 of size 2x3])"
    reprs = {
        nn.Linear(2, 3, bias=False): "Linear(in_features=2, out_features=3, bias=False)",
        nn.Embedding(10, 3, padding_idx=0): "Embedding(10, 3, padding_idx=0)",
        nn.LayerNorm(4): "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)",
        nn.GroupNorm(2, 4): "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)",
        nn.RMSNorm(3): "RMSNorm((3,), eps=None, elementwise_affine=True)",
        nn.BatchNorm2d(8): "BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)",
        nn.Dropout(0.2): "Dropout(p=0.2, inplace=False)",
        nn.GELU("tanh"): "GELU(approximate='tanh')",
        nn.LeakyReLU(0.1): "LeakyReLU(negative_slope=0.1)",
        nn.ELU(): "ELU(alpha=1.0)",
        nn.Softplus(): "Softplus(beta=1.0, threshold=20.0)",
        nn.Softmax(dim=1): "Softmax(dim=1)",
        nn.LogSoftmax(dim=-1): "LogSoftmax(dim=-1)",
        nn.Flatten(): "Flatten(start_dim=1, end_dim=-1)",
        nn.Unflatten(1, (2, 3)): "Unflatten(dim=1, unflattened_size=(2, 3))",
        nn.Identity(): "Identity()",
        nn.ReLU(inplace=True): "ReLU(inplace=True)",
        nn.CrossEntropyLoss(): "CrossEntropyLoss()",
        nn.MultiheadAttention(8, 2): "MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear("
                                     "in_features=8, out_features=8, bias=True)\n)",
    }
    for module, text in reprs.items():
        assert repr(module) == text


def test_dir_lists_members():
    net = Net()
    names = dir(net)
    assert "fc1" in names and "scale" in names and "steps" in names and "forward" in names


def test_deepcopy_module():
    net = Net()
    net2 = copy.deepcopy(net)
    assert net2.fc1.weight is not net.fc1.weight and isinstance(net2.fc1.weight, nn.Parameter)
    np.testing.assert_array_equal(net2.fc1.weight.detach().numpy(), net.fc1.weight.detach().numpy())


# ---------------------------------------------------------------- module backward hooks (PyTorch's)

class _Bilinear(nn.Module):
    def forward(self, a, b, scale):
        return a * b * scale, a + b


def test_full_backward_hook_sees_all_gradients_once_and_may_replace_grad_input():
    m = _Bilinear()
    calls = []

    def hook(mod, grad_input, grad_output):
        calls.append((mod, grad_input, grad_output))
        return (grad_input[0] * 10, grad_input[1], None)
    handle = m.register_full_backward_hook(hook)
    av, bv = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    a = eagerc.tensor(av, requires_grad=True)
    b = eagerc.tensor(bv, requires_grad=True)
    p, q = m(a, b, 2.0)
    (p * eagerc.tensor([1.0, 1.0]) + 5 * q).sum().backward()
    (mod, gi, go), = calls
    assert mod is m and len(gi) == 3 and gi[2] is None
    np.testing.assert_allclose(go[0].numpy(), [1.0, 1.0])
    np.testing.assert_allclose(go[1].numpy(), [5.0, 5.0])
    np.testing.assert_allclose(gi[0].numpy(), bv * 2 + 5)      # what autograd computed
    np.testing.assert_allclose(gi[1].numpy(), av * 2 + 5)
    np.testing.assert_allclose(a.grad.numpy(), (bv * 2 + 5) * 10)  # replaced by the hook
    np.testing.assert_allclose(b.grad.numpy(), av * 2 + 5)
    handle.remove()
    a.grad = None
    m(a, b, 2.0)[0].sum().backward()
    assert len(calls) == 1 and a.grad is not None


def test_backward_pre_hook_replaces_grad_output_and_hooks_run_without_input_grads():
    lin = nn.Linear(2, 2).double()
    seen = []
    lin.register_full_backward_pre_hook(lambda mod, go: (go[0] * 0,))
    lin.register_full_backward_hook(lambda mod, gi, go: seen.append((gi, go)))
    x = eagerc.ones(3, 2, dtype=eagerc.float64)   # the input needs no gradient
    lin(x).sum().backward()
    (gi, go), = seen
    assert gi == (None,)
    np.testing.assert_array_equal(go[0].numpy(), np.zeros((3, 2)))
    np.testing.assert_array_equal(lin.weight.grad.numpy(), np.zeros((2, 2)))  # grad_output was zeroed
