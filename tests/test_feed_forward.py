"""modules/layers.py's PositionwiseFeedForward: Eq. 2 of §3.3, FFN(x) = max(0, x W1 + b1) W2 + b2,
checked against the formula written out in float64 (values and every gradient), and its in-place
ReLU checked to stay off a view (autograd would then zero-fill, copy and scatter a whole [N, d_ff]
gradient in the backward: CopySlices)."""
import pytest
import torch

from vaswani_plugin.modules.layers import PositionwiseFeedForward


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


@pytest.mark.parametrize("shape", [(4, 7, 16), (3, 16), (2, 1, 16)])
def test_values_and_gradients_equal_eq_2_in_float64(shape):
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(16, 48).train()
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


def test_the_in_place_relu_of_a_batch_of_sentences_is_not_on_a_view():
    ffn = PositionwiseFeedForward(16, 48).train()
    y = ffn(torch.randn(4, 7, 16, requires_grad=True))  # [B, T, d]: nn.Linear's product would be a view
    nodes = _graph_nodes(y)
    assert "ReluBackward0" in nodes
    assert "CopySlices" not in nodes
