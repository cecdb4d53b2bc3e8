"""What an op table spelling needs from the installed PyTorch: the torch.X and F.X functions it
calls that this PyTorch lacks (F.scaled_dot_product_attention came in 2.0, Debian's is 1.13), so
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
