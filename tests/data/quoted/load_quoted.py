import sys
import torch
from torch.profiler import ProfilerActivity, profile, record_function


def step(x):
    with record_function('load "batch"'):
        y = x @ x
    with record_function('"'):
        return y.relu().sum()


x = torch.randn(8, 8)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True) as prof:
    for _ in range(2):
        step(x)
prof.export_chrome_trace(sys.argv[1])
