"""The passes: each runs one tool (or reads its files), parses, models, and returns a
``nsbridge.run.PassOutput`` (its manifest entry, report section and per-op columns).

- ``torch_pass``: torch.profiler (triage) or torch traces captured elsewhere
- ``nsys_pass``: Nsight Systems timeline, or nsys exports captured elsewhere
- ``ncu_pass``: Nsight Compute on chosen ops' kernels, or ncu reports captured elsewhere
"""
