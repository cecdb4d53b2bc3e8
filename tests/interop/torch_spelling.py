"""What an op table spelling needs from the installed PyTorch: the torch.X and F.X functions it
calls that this PyTorch lacks (F.scaled_dot_product_attention came in 2.0, Debian's is 1.13), and
the gradients whose definition this PyTorch gives otherwise than the current one ember follows, so
that a comparison can name the cases it leaves out rather than fail on them."""
import re

import torch

F = torch.nn.functional
CALLED = re.compile(r"\b(torch|F)\.([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def missing_functions(spelling):
    """The functions the spelling calls that this PyTorch does not have, e.g. ['F.scaled_dot_product_attention']."""
    modules = {"torch": torch, "F": F}
    return sorted({f"{module}.{name}" for module, name in CALLED.findall(spelling)
                   if not hasattr(modules[module], name)})


def _clamp_passes_gradient_at_bounds():
    x = torch.zeros(1, requires_grad=True)
    torch.clamp(x, 0.0, 1.0).sum().backward()
    return x.grad.item() == 1.0


def older_gradient(spelling, label):
    """Why this PyTorch's gradient for the case is defined otherwise than ember's (PyTorch 2.15's),
    or None. clamp at its bounds: 1.13 passes the gradient there, 2.15 gives 0, as hardtanh does;
    asked of the installed PyTorch itself rather than of its version number."""
    if "torch.clamp(" in spelling and label == "at the bounds" and _clamp_passes_gradient_at_bounds():
        return "clamp's gradient at its bounds (1 in this PyTorch, 0 in PyTorch 2.15 and ember)"
    return None
