"""How far POT's Adam gets from the best a layer can do with its mask: per layer, the relative error of the
exact least-squares solution (kept weights and bias free, mask fixed, dense inputs, the calibration images)
beside the errors after masking + weight correction and after bias correction.

POT's layer loss is a quadratic in (W, b), so its minimum over the kept weights is one linear solve per
output channel on the input Gram matrix. If Adam's reconstructed error (recorded per layer in POT's run
records) sits far above this floor, the iteration budget, not the objective, limits POT.

    python -m benchmarks.accuracy.pot_layer_optimum --model resnet32 --sparsity 0.8 --allocation l2norm --images 1024
"""

from __future__ import annotations

import argparse
import copy

import torch

from baselines.pot import collect_inputs, correct_weight, pot_masks
from baselines.pot_objective import _patches
from fcpts.core.bn import fold_batchnorm
from fcpts.core.masks import prunable_layers
from tasks.cifar.data import CifarCalibration
from tasks.grid.cifar_data import load_cifar
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.data import calibration_indices, resolve_data_root
from tasks.grid.weights import default_cifar_weights, load_checkpoint


@torch.no_grad()
def augmented_gram(layer, inputs: torch.Tensor, chunk: int = 128) -> tuple[torch.Tensor, int]:
    """sum over images and positions of [u; 1][u; 1]^T (float64), u the patch column; and the count."""
    total, count = None, 0
    for i in range(0, len(inputs), chunk):
        u = _patches(layer, inputs[i : i + chunk]).double()  # (n, 1, D, P); groups == 1 here
        u = u[:, 0]
        ones = torch.ones(u.shape[0], 1, u.shape[2], dtype=u.dtype)
        v = torch.cat([u, ones], dim=1)
        g = torch.einsum("ndp,nep->de", v, v)
        total = g if total is None else total + g
        count += u.shape[0] * u.shape[2]
    return total, count


def relative_error(gram: torch.Tensor, count: int, v: torch.Tensor, v_dense: torch.Tensor) -> float:
    d = v - v_dense
    return float(torch.einsum("od,de,oe->", d, gram, d) / torch.einsum("od,de,oe->", v_dense, gram, v_dense))


@torch.no_grad()
def layer_floor(gram: torch.Tensor, v_dense: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Per output channel, argmin (v - v_d)^T G (v - v_d) over v supported on keep (bias always kept)."""
    out = torch.zeros_like(v_dense)
    for o in range(v_dense.shape[0]):
        k = torch.nonzero(keep[o]).flatten()
        g_kk = gram[k][:, k] + 1e-10 * torch.eye(len(k), dtype=gram.dtype)
        out[o, k] = torch.linalg.solve(g_kk, gram[k] @ v_dense[o])
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet32")
    p.add_argument("--sparsity", type=float, default=0.8)
    p.add_argument("--allocation", default="l2norm", choices=["l2norm", "erk"])
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    root = resolve_data_root(None)
    x_train, _ = load_cifar(root, "cifar10", "train")
    idx = calibration_indices(len(x_train), args.images, args.seed)  # the images tasks.cifar gives POT
    calib = CifarCalibration(x_train[idx], augment=False)
    images = torch.stack([calib[i] for i in range(len(calib))])
    model = cifar_resnet(args.model)
    load_checkpoint(model, default_cifar_weights(root, "cifar10", args.model))
    model.eval()
    fold_batchnorm(model)
    dense = copy.deepcopy(model)
    layers = prunable_layers(dense)
    masks = pot_masks(layers, args.sparsity, args.allocation)
    print("layer | sparsity | masked+wc | +bias corr | least-squares floor")
    for name, layer in layers.items():
        x = collect_inputs(dense, [name], images)[name]
        gram, count = augmented_gram(layer, x)
        w_d = layer.weight.detach().flatten(1).double()
        b_d = layer.bias.detach().double()
        v_dense = torch.cat([w_d, b_d[:, None]], 1)
        keep = masks[name].flatten(1)
        w_c = correct_weight(layer.weight.detach(), masks[name]).flatten(1).double()
        v_masked = torch.cat([w_c, b_d[:, None]], 1)
        # bias correction: the bias that zeroes the mean output error (the last row/column of G holds the sums)
        mean_in = gram[-1, :-1] / count
        v_bias = v_masked.clone()
        v_bias[:, -1] = b_d + (w_d - w_c) @ mean_in
        keep_aug = torch.cat([keep, torch.ones(len(keep), 1, dtype=torch.bool)], 1)
        floor = layer_floor(gram, v_dense, keep_aug)
        print(
            f"{name} | {1 - keep.float().mean():.3f} | {relative_error(gram, count, v_masked, v_dense):.4f} | "
            f"{relative_error(gram, count, v_bias, v_dense):.4f} | {relative_error(gram, count, floor, v_dense):.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
