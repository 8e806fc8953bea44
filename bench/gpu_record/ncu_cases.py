"""One conv or one attention call inside an NVTX range, for `ncu --set full` on its kernels.

Warm-up calls run first, outside any range (cuDNN picks its algorithm, caches fill); then
ONE call runs inside the push/pop range ``gpu_record_target`` (default NVTX domain), so

    ncu --nvtx --nvtx-include "gpu_record_target/" --set full --launch-count 4 -o conv \\
        python3 bench/gpu_record/ncu_cases.py --case conv

profiles exactly the kernels of that call. Cases, both bf16 on a GPU:
- conv: Conv2d 64 -> 128 channels, 3x3, on a 32x64x56x56 channels-last batch (cuDNN implicit GEMM)
- attention: scaled_dot_product_attention on 8 x 16 heads x 1024 tokens x 64 (flash attention)
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

RANGE = "gpu_record_target"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=["conv", "attention"], required=True)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    if args.case == "conv":
        conv = torch.nn.Conv2d(64, 128, 3, padding=1).to(device=device, dtype=dtype)
        x = torch.randn(32, 64, 56, 56, device=device, dtype=dtype)
        if cuda:
            conv = conv.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)

        def call() -> torch.Tensor:
            with torch.no_grad():
                return conv(x)
    else:
        q, k, v = (torch.randn(8, 16, 1024, 64, device=device, dtype=dtype) for _ in range(3))

        def call() -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    for _ in range(args.warmup):
        call()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
    out = call()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    print(f"{args.case}: output {tuple(out.shape)} {out.dtype} on {device}")


if __name__ == "__main__":
    main()
