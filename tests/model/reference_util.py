"""What the float64 whole-model reference generators share (make_reference.py for model/gpt,
make_bert_reference.py, make_t5_reference.py): the parameters drawn from a model's specs, and
the lines of the file that tests/model/reference_file.hpp reads (the header, the options, the
batch's integers, every parameter and its gradient). Imported from the generator's own folder.
"""
import contextlib
import os

import torch


def make_params(specs, gen):
    """Parameters for (name, shape, kind) specs drawn from gen in their order: float32 values
    (what the f32 model under test holds), as float64 leaves for autograd."""
    params = {}
    for name, shape, kind in specs:
        r = torch.randn(shape, generator=gen, dtype=torch.float32)
        v = {"matrix": 0.08 * r, "bias": 0.02 * r, "norm_w": 1.0 + 0.1 * r,
             "norm_b": 0.05 * r}[kind]
        params[name] = v.to(torch.float32).to(torch.float64).requires_grad_(True)
    return params


def ints(name, t):
    """The line `name v v v ...` of an integer tensor's values, row-major."""
    return name + " " + " ".join(map(str, t.reshape(-1).tolist())) + "\n"


def cases(configs, param_specs):
    """Each of configs' (name, cfg) in turn as (name, cfg, gen, specs, P): gen seeded with
    cfg["seed"], P the parameters of param_specs(cfg["options"], cfg["vocab"]) drawn from it
    first (the batch is drawn after them)."""
    for name, cfg in configs.items():
        gen = torch.Generator().manual_seed(cfg["seed"])
        specs = param_specs(cfg["options"], cfg["vocab"])
        yield name, cfg, gen, specs, make_params(specs, gen)


@contextlib.contextmanager
def reference_file(out_dir, model, script, name, cfg, lines):
    """out_dir/NAME.txt, open for writing after its comment lines (what wrote it, how, and its
    LINES), an `option` line for each of cfg's model options and the `create` line."""
    with open(os.path.join(out_dir, name + ".txt"), "w") as f:
        f.write(f"# {model} whole-model reference '{name}', written by tests/model/{script}\n")
        f.write(f"# run: /usr/bin/python3 tests/model/{script}  (torch {torch.__version__}, "
                f"float64 autograd, seed {cfg['seed']})\n")
        f.write(f"# lines: {lines}\n")
        for k, v in cfg["options"].items():
            f.write(f"option {k} {v}\n")
        f.write(f"create {cfg['vocab']} {cfg['batch']} {cfg['seq']}\n")
        yield f


def write_gradients(f, loss_scale, specs, P):
    """The `loss_scale` line (what the gradients are of: loss_scale x the objective), a `param`
    line for every parameter (its float32 values, 9 digits), then a `grad` line for each that
    autograd trains (float64, 13 digits), in the specs' order: a frozen one (LoRA's base) has
    none."""
    f.write(f"loss_scale {loss_scale:.17g}\n")
    for pname, _, _ in specs:
        f.write(f"param {pname} {P[pname].numel()} "
                + " ".join(f"{v:.9g}" for v in P[pname].detach().reshape(-1).tolist()) + "\n")
    for pname, _, _ in specs:
        g = P[pname].grad
        if g is None:
            continue
        f.write(f"grad {pname} {g.numel()} "
                + " ".join(f"{v:.12e}" for v in g.reshape(-1).tolist()) + "\n")
