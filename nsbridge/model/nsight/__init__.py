"""What Nsight Compute should profile and what its numbers say: the deep pass's plan
(``deep_plan``), metrics to per-launch quantities and kernels to ops (``ncu``), the roofline
from ncu's own peaks (``roofline``) and the findings with their fixes (``ncu_findings``)."""
