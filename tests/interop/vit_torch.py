"""ember's VisionTransformer and MultiheadAttention against PyTorch's:

- a ViT saved by ember loads strictly into the torchvision-named reference model
  (scripts/compare/vit_reference.py), and its initialization has torchvision's statistics;
- a ViT initialized by PyTorch (with a random head, torchvision's being zero) gives ember the same
  logits, loss and gradient of every parameter;
- nn.MultiheadAttention with ember's parameters gives ember's outputs and weights with a key
  padding mask and a boolean attention mask (averaged and per head), and with a float mask;
- ember's nn::TransformerEncoderLayer (post-norm with ReLU, pre-norm with GELU) loads strictly into
  torch.nn.TransformerEncoderLayer, with the same outputs (with and without key padding) and
  parameter gradients;
- the recipe's parts are PyTorch's: cross_entropy's label_smoothing (loss and gradient),
  clip_grad_norm_ (the norm and the clipped gradients) and SequentialLR of LinearLR and
  CosineAnnealingLR stepped per step.

Exits 77 (skipped) where PyTorch is missing."""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as error:
    print(f"vit_torch: skipped: PyTorch or numpy is not importable here ({error})")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "compare"))
import safetensors_lite  # noqa: E402
from vit_reference import VisionTransformer  # noqa: E402

# f32 on both sides, with different orders of summation (fused attention, blocked GEMMs): the
# values agree to a few ulps of the largest terms summed, well inside this.
RTOL, ATOL = 1e-4, 1e-5


def small_vit():
    return VisionTransformer(image_size=28, patch_size=7, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64)


def load(path):
    tensors, _ = safetensors_lite.load(path)
    return {k: torch.from_numpy(np.array(v)) for k, v in tensors.items()}


def save(path, tensors):
    safetensors_lite.save(path, {k: v.detach().contiguous().numpy() for k, v in tensors.items()})


def close(name, mine, theirs):
    ok = mine.shape == theirs.shape and torch.allclose(mine, theirs, rtol=RTOL, atol=ATOL)
    worst = (mine - theirs).abs().max().item() if mine.shape == theirs.shape else float("nan")
    if not ok:
        print(f"  {name}: ember {tuple(mine.shape)} and PyTorch {tuple(theirs.shape)} differ, max |diff| {worst:.3g}")
    return ok


def ember_vit_in_torch(tool, work):
    path = os.path.join(work, "ember_vit.safetensors")
    subprocess.run([tool, "save", path, "7"], check=True)
    state = load(path)
    model = small_vit()
    model.load_state_dict(state, strict=True)  # raises on a missing, unexpected or misshapen tensor
    checks = {
        "class_token is zero": state["class_token"].abs().max().item() == 0,
        "the head is zero": state["heads.head.weight"].abs().max().item() == 0,
        "in_proj_bias is zero": state["encoder.layers.encoder_layer_0.self_attention.in_proj_bias"].abs().max() == 0,
        "pos_embedding's std is 0.02": abs(state["encoder.pos_embedding"].std().item() - 0.02) < 0.003,
        "conv_proj's std is 1/7": abs(state["conv_proj.weight"].std().item() - 1 / 7) < 0.02,
        "the MLP biases are N(0, 1e-12)": state["encoder.layers.encoder_layer_1.mlp.0.bias"].abs().max() < 1e-5,
    }
    for what, ok in checks.items():
        print(f"  ember's initialization: {what}: {bool(ok)}")
    print(f"ember's ViT ({len(state)} tensors) loads strictly into the torchvision-named model")
    return sum(not ok for ok in checks.values())


def torch_vit_in_ember(tool, work):
    torch.manual_seed(3)
    model = small_vit()
    torch.nn.init.normal_(model.heads.head.weight, std=0.5)
    torch.nn.init.normal_(model.class_token, std=0.5)
    path, inputs, out = (os.path.join(work, n) for n in ("torch_vit.safetensors", "in.safetensors", "out.safetensors"))
    save(path, model.state_dict())
    x = torch.rand(6, 1, 28, 28)
    y = torch.randint(0, 10, (6,))
    save(inputs, {"x": x, "y": y})
    subprocess.run([tool, "run", path, inputs, out], check=True)
    got = load(out)
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    failures = not close("logits", got["logits"], logits.detach())
    failures += not close("loss", got["loss"].reshape(()), loss.detach())
    for name, p in model.named_parameters():
        failures += not close(f"grad.{name}", got[f"grad.{name}"], p.grad)
    print(f"PyTorch's ViT in ember: logits, loss and {len(list(model.parameters()))} gradients "
          f"{'agree' if failures == 0 else 'DIFFER'} (rtol {RTOL}, atol {ATOL}); loss {loss.item():.6f}")
    return failures


def multihead_attention(tool, work):
    g = torch.Generator().manual_seed(11)
    L, S, N, E = 5, 7, 3, 16
    q, k, v = torch.randn(L, N, E, generator=g), torch.randn(S, N, E, generator=g), torch.randn(S, N, E, generator=g)
    kpm = torch.zeros(N, S, dtype=torch.bool)
    kpm[0, -2:] = True
    kpm[2, 0] = True
    mask = torch.rand(L, S, generator=g) < 0.3
    mask[:, 0] = False  # every query keeps a key the padding leaves (PyTorch gives NaN for none)
    mask[:, 3] = False
    fmask = torch.randn(L, S, generator=g)
    inputs, out = os.path.join(work, "mha_in.safetensors"), os.path.join(work, "mha_out.safetensors")
    save(inputs, {"q": q, "k": k, "v": v, "kpm": kpm.to(torch.uint8), "mask": mask.to(torch.uint8), "fmask": fmask})
    subprocess.run([tool, "mha", "5", inputs, out], check=True)
    got = load(out)
    mha = torch.nn.MultiheadAttention(E, 4)
    mha.load_state_dict({k[2:]: v for k, v in got.items() if k.startswith("p.")}, strict=True)
    with torch.no_grad():
        self_out, _ = mha(q, q, q, need_weights=False)
        cross, weights = mha(q, k, v, key_padding_mask=kpm, attn_mask=mask)
        _, head_weights = mha(q, k, v, key_padding_mask=kpm, attn_mask=mask, average_attn_weights=False)
        float_out, _ = mha(q, k, v, attn_mask=fmask, need_weights=False)
    failures = not close("self_out", got["self_out"], self_out)
    failures += not close("cross_out", got["cross_out"], cross)
    failures += not close("fused_out", got["fused_out"], cross)
    failures += not close("cross_w", got["cross_w"], weights)
    failures += not close("cross_w_heads", got["cross_w_heads"], head_weights)
    failures += not close("float_out", got["float_out"], float_out)
    print(f"MultiheadAttention: self-attention, both masks (weights averaged and per head, fused and not) and a "
          f"float mask {'agree' if failures == 0 else 'DIFFER'} with PyTorch's")
    return failures


def encoder_layers(tool, work):
    g = torch.Generator().manual_seed(13)
    L, N, E = 6, 3, 16
    x, up = torch.randn(L, N, E, generator=g), torch.randn(L, N, E, generator=g)
    kpm = torch.zeros(N, L, dtype=torch.bool)
    kpm[1, -2:] = True
    failures = 0
    for order in ("post", "pre"):
        inputs, out = os.path.join(work, "layer_in.safetensors"), os.path.join(work, f"layer_{order}.safetensors")
        save(inputs, {"x": x, "up": up, "kpm": kpm.to(torch.uint8)})
        subprocess.run([tool, "encoder_layer", order, "7", inputs, out], check=True)
        got = load(out)
        layer = torch.nn.TransformerEncoderLayer(E, 4, dim_feedforward=32, dropout=0.0,
                                                 activation="gelu" if order == "pre" else "relu",
                                                 norm_first=order == "pre")
        layer.load_state_dict({k[2:]: v for k, v in got.items() if k.startswith("p.")}, strict=True)
        y = layer(x)  # training mode: PyTorch's fast path (eval only) stays out of it
        (y * up).sum().backward()
        with torch.no_grad():
            masked = layer(x, src_key_padding_mask=kpm)
        failures += not close(f"{order}: out", got["out"], y.detach())
        failures += not close(f"{order}: masked_out", got["masked_out"], masked)
        for name, p in layer.named_parameters():
            failures += not close(f"{order}: grad.{name}", got[f"grad.{name}"], p.grad)
    print(f"TransformerEncoderLayer: post-norm with ReLU and pre-norm with GELU load strictly, and their outputs "
          f"(with and without key padding) and parameter gradients {'agree' if failures == 0 else 'DIFFER'} "
          f"with PyTorch's")
    return failures


def recipe_parts(tool, work):
    g = torch.Generator().manual_seed(13)
    logits, target = torch.randn(6, 5, generator=g) * 3, torch.randint(0, 5, (6,), generator=g)
    a, b = torch.randn(4, 3, generator=g), torch.randn(7, generator=g)
    inputs, out = os.path.join(work, "recipe_in.safetensors"), os.path.join(work, "recipe_out.safetensors")
    save(inputs, {"logits": logits, "target": target, "a": a, "b": b})
    subprocess.run([tool, "recipe", inputs, out], check=True)
    got = load(out)
    leaf = logits.clone().requires_grad_()
    smoothed = F.cross_entropy(leaf, target, label_smoothing=0.1)
    smoothed.backward()
    pa, pb = torch.zeros(4, 3, requires_grad=True), torch.zeros(7, requires_grad=True)
    ((pa * a).sum() + (pb * b).sum()).backward()
    norm = torch.nn.utils.clip_grad_norm_([pa, pb], 0.5)
    opt = torch.optim.SGD([pa], lr=0.1)
    schedule = torch.optim.lr_scheduler.SequentialLR(
        opt, [torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=4),
              torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)], milestones=[4])
    lrs = []
    for _ in range(12):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    failures = not close("label smoothing", got["smoothed"].reshape(()), smoothed.detach())
    failures += not close("label smoothing's gradient", got["smoothed_grad"], leaf.grad)
    failures += not close("clip_grad_norm's norm", got["norm"].reshape(()).float(), norm.float())
    failures += not close("clipped a", got["clipped_a"], pa.grad)
    failures += not close("clipped b", got["clipped_b"], pb.grad)
    failures += not close("SequentialLR", got["lrs"], torch.tensor(lrs, dtype=torch.float64))
    print(f"label smoothing, clip_grad_norm_ and SequentialLR(LinearLR, CosineAnnealingLR) "
          f"{'agree' if failures == 0 else 'DIFFER'} with PyTorch's; rates {[round(x, 5) for x in lrs]}")
    return failures


def attention_grid(tool, work):
    """F.scaled_dot_product_attention (PyTorch 2's; skipped on older ones) against ember's fused CPU
    op on the issue's grid: L in 1, 17, 50 (with 70 keys), 197; head dims 16, 32, 64; no mask,
    causal, a boolean mask and an additive one. Both in f32, each also against PyTorch's f64."""
    if not hasattr(F, "scaled_dot_product_attention"):
        print(f"attention grid: skipped: PyTorch {torch.__version__} has no F.scaled_dot_product_attention")
        return 0
    g = torch.Generator().manual_seed(21)
    inputs, out = os.path.join(work, "attn_in.safetensors"), os.path.join(work, "attn_out.safetensors")
    failures, cases, worst = 0, 0, {"ember": 0.0, "PyTorch": 0.0, "between": 0.0}
    for L in (1, 17, 50, 197):
        S = 70 if L == 50 else L
        for E in (16, 32, 64):
            for kind in ("none", "causal", "boolean", "additive"):
                q, k, v, up = (torch.rand(2, 2, n, E, generator=g) * 2 - 1 for n in (L, S, S, L))
                tensors = {"q": q, "k": k, "v": v, "up": up}
                mask, causal = None, kind == "causal"
                if kind == "boolean":
                    mask = torch.rand(2, 2, L, S, generator=g) < 0.7
                    mask[..., 0] = True  # every query keeps a key
                    tensors["mask"] = mask.to(torch.uint8)
                elif kind == "additive":
                    mask = torch.randn(2, 1, L, S, generator=g)
                    tensors["mask"] = mask
                if causal:
                    tensors["causal"] = torch.ones(())
                save(inputs, tensors)
                subprocess.run([tool, "attention", inputs, out], check=True)
                got = load(out)
                results = {}
                for dtype in (torch.float32, torch.float64):
                    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
                    m = mask.to(dtype) if kind == "additive" else mask
                    o = F.scaled_dot_product_attention(*leaves, attn_mask=m, is_causal=causal)
                    (o * up.to(dtype)).sum().backward()
                    results[dtype] = [o.detach()] + [t.grad for t in leaves]
                mine = [got[n] for n in ("out", "dq", "dk", "dv")]

                def excess(a, b):  # the largest |a − b| / (atol + rtol·|b|): at most 1 passes
                    return max(((x.double() - y.double()).abs() / (1e-6 + 1e-5 * y.double().abs())).max().item()
                               for x, y in zip(a, b))
                e_ember = excess(mine, results[torch.float64])
                e_torch = excess(results[torch.float32], results[torch.float64])
                e_between = excess(mine, results[torch.float32])
                worst = {"ember": max(worst["ember"], e_ember), "PyTorch": max(worst["PyTorch"], e_torch),
                         "between": max(worst["between"], e_between)}
                cases += 1
                if e_ember > 1 or e_between > 1:
                    failures += 1
                    print(f"  attention L {L}, S {S}, E {E}, {kind}: ember/f64 {e_ember:.2f}, "
                          f"ember/PyTorch f32 {e_between:.2f} of the tolerance")
    print(f"attention grid: {cases} cases, results and three gradients, rtol 1e-5 + atol 1e-6: worst share of the "
          f"tolerance ember/f64 {worst['ember']:.2f}, PyTorch f32/f64 {worst['PyTorch']:.2f}, ember/PyTorch f32 "
          f"{worst['between']:.2f}: {'ok' if failures == 0 else 'FAILED'}")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True)
    args = parser.parse_args()
    print(f"PyTorch {torch.__version__}")
    with tempfile.TemporaryDirectory() as work:
        failures = ember_vit_in_torch(args.tool, work)
        failures += torch_vit_in_ember(args.tool, work)
        failures += multihead_attention(args.tool, work)
        failures += encoder_layers(args.tool, work)
        failures += recipe_parts(args.tool, work)
        failures += attention_grid(args.tool, work)
    print("vit_torch:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
