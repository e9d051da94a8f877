"""What torch.nn.SyncBatchNorm computes, for sync_batch_norm_test.cc.

SyncBatchNorm normalises every rank's rows with the statistics of all ranks' rows together:
its outputs and input gradients are those of a batch norm over the ranks' batches joined,
and each rank's weight and bias gradients add up to that batch's. Torch 1.13's SyncBatchNorm
runs on GPUs only, so this computes the joined batch's batch norm with torch in float64
(torch.nn.functional.batch_norm and autograd), the exact values both approximate.

Usage: sync_batch_norm_reference.py CASES.json OUT.json. Each case: "input" and "upstream"
(the joined batch's values, rank after rank, as doubles), "shape" (the joined batch's),
"weight", "bias", "eps", "momentum". Writes per case "output", "input_grad", "weight_grad",
"bias_grad", "running_mean", "running_var". Exits 77 when torch cannot be imported.
"""
import json
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(77)


def reference(case):
    shape = case["shape"]
    x = torch.tensor(case["input"], dtype=torch.float64).reshape(shape).requires_grad_()
    upstream = torch.tensor(case["upstream"], dtype=torch.float64).reshape(shape)
    weight = torch.tensor(case["weight"], dtype=torch.float64, requires_grad=True)
    bias = torch.tensor(case["bias"], dtype=torch.float64, requires_grad=True)
    channels = shape[1]
    running_mean = torch.zeros(channels, dtype=torch.float64)
    running_var = torch.ones(channels, dtype=torch.float64)
    y = F.batch_norm(x, running_mean, running_var, weight, bias, training=True,
                     momentum=case["momentum"], eps=case["eps"])
    (y * upstream).sum().backward()
    flat = lambda t: t.detach().reshape(-1).tolist()
    return {"output": flat(y), "input_grad": flat(x.grad), "weight_grad": flat(weight.grad),
            "bias_grad": flat(bias.grad), "running_mean": flat(running_mean),
            "running_var": flat(running_var)}


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    with open(sys.argv[2], "w") as f:
        json.dump([reference(c) for c in cases], f)


if __name__ == "__main__":
    main()
