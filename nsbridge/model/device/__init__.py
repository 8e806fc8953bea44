"""What the device did and what held its memory: which host op launched each kernel, copy
and memset (``attribution``; CUDA-graph replays and Triton kernels in ``kernel_origins``),
GPU busy share and idle gaps (``activity``), the allocator's curve (``memory``), Tensor Core
eligibility before ncu runs (``tensor_cores``), and nsys's timeline joined to ops
(``timeline``)."""
