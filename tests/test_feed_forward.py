"""modules/layers.py's PositionwiseFeedForward: Eq. 2 of §3.3, FFN(x) = max(0, x W1 + b1) W2 + b2,
checked against the formula written out in float64 (values and every gradient), and its in-place
ReLU checked to stay off a view (autograd would then zero-fill, copy and scatter a whole [N, d_ff]
gradient in the backward: CopySlices). modules/relu.py's ReLU against `F.relu`, and its one
departure pinned: its backward writes into the gradient that reaches it. The model's layers are the
plugin's linear layers (modules.onednn_linear), training on oneDNN off Intel and on MKL on Intel:
the feed-forward tests run with every one of those backends on any CPU."""
import pytest
import torch
import torch.nn.functional as F

from vaswani_plugin.modules import onednn_linear
from vaswani_plugin.modules.layers import PositionwiseFeedForward
from vaswani_plugin.modules.relu import relu_feeding_a_linear_

BACKENDS = ["nn.Linear", "oneDNN", "MKL"]  # the layers as built; the model's, training as off Intel / on Intel


def _feed_forward(backend, monkeypatch, d_model=16, d_ff=48):
    ffn = PositionwiseFeedForward(d_model, d_ff).train()
    if backend != "nn.Linear":
        if not onednn_linear.onednn_available():
            pytest.skip("torch without oneDNN")
        monkeypatch.setattr(onednn_linear, "MKL_AT_FULL_SPEED", backend == "MKL")
        onednn_linear.use_onednn_linears_(ffn)
        assert type(ffn.fc1) is onednn_linear.OneDNNLinear
    return ffn


def _graph_nodes(tensor):
    """The names of every node in tensor's backward graph."""
    seen, todo, names = set(), [tensor.grad_fn], []
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.append(type(node).__name__)
        todo.extend(next_node for next_node, _ in node.next_functions)
    return names


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(4, 7, 16), (3, 16), (2, 1, 16)])
def test_values_and_gradients_equal_eq_2_in_float64(shape, backend, monkeypatch):
    torch.manual_seed(0)
    ffn = _feed_forward(backend, monkeypatch)
    x = torch.randn(*shape, requires_grad=True)
    g = torch.randn(*shape)
    y = ffn(x)
    y.backward(g)

    w1, b1, w2, b2 = (p.detach().double().requires_grad_() for p in
                      (ffn.fc1.weight, ffn.fc1.bias, ffn.fc2.weight, ffn.fc2.bias))
    x64 = x.detach().double().requires_grad_()
    y64 = torch.clamp(x64 @ w1.T + b1, min=0) @ w2.T + b2  # Eq. 2
    y64.backward(g.double())

    assert y.shape == x.shape
    torch.testing.assert_close(y.double(), y64.detach(), rtol=1e-5, atol=1e-5)
    for ours, reference in [(x.grad, x64.grad), (ffn.fc1.weight.grad, w1.grad), (ffn.fc1.bias.grad, b1.grad),
                            (ffn.fc2.weight.grad, w2.grad), (ffn.fc2.bias.grad, b2.grad)]:
        torch.testing.assert_close(ours.double(), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_in_place_relu_of_a_batch_of_sentences_is_not_on_a_view(backend, monkeypatch):
    ffn = _feed_forward(backend, monkeypatch)
    y = ffn(torch.randn(4, 7, 16, requires_grad=True))  # [B, T, d]: nn.Linear's product would be a view
    nodes = _graph_nodes(y)
    assert any("Relu" in node for node in nodes)
    assert "CopySlices" not in nodes


class _GradientPointer(torch.autograd.Function):
    """Identity (a copy) whose backward records where the gradient reaching it lies."""

    seen = []

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        _GradientPointer.seen.append(grad.data_ptr())
        return grad


@pytest.mark.parametrize("consumer", ["a linear layer", "a sum (an expanded gradient)", "a transposed product"])
def test_the_relu_gives_f_relu_s_values_and_gradients(consumer):
    torch.manual_seed(0)
    x = torch.randn(6, 5, dtype=torch.float64)
    x[0, 0] = 0.0  # the kink: both give the gradient 0 there
    w, v = torch.randn(3, 5, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    use = {"a linear layer": lambda y: F.linear(y, w).sin().sum(),
           "a sum (an expanded gradient)": lambda y: y.sum(),
           "a transposed product": lambda y: (y.t() @ v).sin().sum()}[consumer]
    grads = []
    for relu in (relu_feeding_a_linear_, lambda t: F.relu(t)):
        leaf = x.clone().requires_grad_()
        y = relu(leaf * 1.0)  # a non-leaf, as fc1's product is
        use(y).backward()
        grads.append((y.detach(), leaf.grad))
    torch.testing.assert_close(grads[0][0], grads[1][0], rtol=0, atol=0)
    torch.testing.assert_close(grads[0][1], grads[1][1], rtol=0, atol=0)


def test_the_relu_backward_writes_into_the_gradient_that_reaches_it():
    """The departure: no new [N, d_ff] block in the backward. The gradient that fc2 hands back and the
    one the ReLU passes on lie at the same address."""
    _GradientPointer.seen.clear()
    x = torch.randn(8, 16, requires_grad=True)
    w = torch.randn(4, 16, requires_grad=True)
    y = relu_feeding_a_linear_(_GradientPointer.apply(x))
    reaching = []
    y.register_hook(lambda grad: reaching.append(grad.data_ptr()))
    F.linear(y, w).sum().backward()
    assert reaching and _GradientPointer.seen == reaching


def test_without_autograd_the_relu_is_relu_in_place():
    x = torch.randn(4, 4)
    expected = F.relu(x)
    with torch.no_grad():
        y = relu_feeding_a_linear_(x)
    assert y.data_ptr() == x.data_ptr()
    torch.testing.assert_close(y, expected, rtol=0, atol=0)
