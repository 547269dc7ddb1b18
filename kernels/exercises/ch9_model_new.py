"""Exercise 9.1: your ModelNew for KernelBench's problem 100 (HingeLoss), in KernelBench's form: one
file that defines ``ModelNew``. Chapter 9 evaluates it in a process of its own:

    kernelbench.evaluate_isolated(100, "kernels/exercises/ch9_model_new.py")

As it stands it is the reference's own expression: right, and rejected, because PyTorch does the
work. Replace ``forward``'s body with a call of your kernel (CUDA source in this file, compiled with
``torch.utils.cpp_extension.load_inline`` when the file is imported); keep the signature.
"""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, predictions, targets):
        # TODO(exercise 9.1): your kernel instead of PyTorch's expression.
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))
