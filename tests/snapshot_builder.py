"""Synthetic CUDA allocator snapshots in torch's documented format
(torch.cuda.memory._snapshot: segments with blocks, device_traces of alloc /
free_requested / free_completed / segment_alloc / oom entries, frames innermost first), of a
training loop whose every byte is known: the tests hold the analysis to these answers, and
bench/snapshot_scale.py builds its million-entry snapshot with them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MIB = 2 ** 20


def _frames(*frames: tuple[str, int, str]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": n, "name": name} for f, n, name in frames]


USER_MAIN = ("train.py", 40, "main")
USER_BACKWARD = ("train.py", 42, "main")
USER_STEP = ("train.py", 43, "main")
FORWARD = [("torch/nn/functional.py", 2100, "linear"),
           ("torch/nn/modules/linear.py", 125, "forward"),
           ("model.py", 20, "forward"), USER_MAIN]
BACKWARD = [("torch/autograd/graph.py", 768, "_engine_run_backward"),
            ("torch/_tensor.py", 626, "backward"), USER_BACKWARD]
OPTIMIZER = [("torch/optim/adam.py", 160, "_init_group"),
             ("torch/optim/optimizer.py", 480, "step"), USER_STEP]


@dataclass
class Plan:
    """A loop of ``steps`` steps over ``layers`` layers: per layer an activation saved in
    forward and freed in backward, a temporary freed at once, a gradient made in the first
    backward and kept, optimizer state made in the first step and kept; parameters made
    before the history. ``oom_mib``: the last step's forward fails asking this much
    after activation ``oom_layer``. ``free_pieces``: inactive cached blocks of 1 MiB
    (fragmentation)."""

    steps: int = 3
    layers: int = 4
    param_mib: float = 2.0
    activation_mib: float = 8.0
    temporary_mib: float = 4.0
    grad_mib: float = 2.0
    state_mib: float = 4.0
    oom_mib: float = 0.0
    oom_layer: int = 0
    free_pieces: int = 0
    trace: list[dict[str, Any]] = field(default_factory=list)
    live: dict[int, tuple[int, list[dict[str, Any]]]] = field(default_factory=dict)
    next_addr: int = 0x7F0000000000

    def _alloc(self, mib: float, frames: list[tuple[str, int, str]]) -> int:
        addr, size = self.next_addr, int(mib * MIB)
        self.next_addr += size + 512
        stack = _frames(*frames)
        self.trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0,
                           "frames": stack})
        self.live[addr] = (size, stack)
        return addr

    def _free(self, addr: int, frames: list[tuple[str, int, str]]) -> None:
        size, _ = self.live.pop(addr)
        for action in ("free_requested", "free_completed"):
            self.trace.append({"action": action, "addr": addr, "size": size, "stream": 0,
                               "frames": _frames(*frames)})

    def build(self) -> dict[str, Any]:
        """The snapshot dict (what torch.cuda.memory._snapshot() returns)."""
        params = [(self.next_addr + i * (1 << 30), int(self.param_mib * MIB))
                  for i in range(self.layers)]          # made before the history
        self.next_addr += self.layers * (1 << 30)
        grads: list[int] = []
        for step in range(self.steps):
            acts = []
            for layer in range(self.layers):
                acts.append(self._alloc(self.activation_mib, FORWARD))
                if self.oom_mib and step == self.steps - 1 and layer == self.oom_layer:
                    self.trace.append({"action": "oom", "size": int(self.oom_mib * MIB),
                                       "stream": 0, "device_free": 3 * MIB,
                                       "frames": _frames(*FORWARD)})
                    return self._snapshot(params)
                tmp = self._alloc(self.temporary_mib, FORWARD)
                self._free(tmp, FORWARD)
            for layer in reversed(range(self.layers)):
                if step == 0:
                    grads.append(self._alloc(self.grad_mib, BACKWARD))
                self._free(acts[layer], BACKWARD)
            if step == 0:
                for _ in range(self.layers):
                    self._alloc(self.state_mib, OPTIMIZER)
        return self._snapshot(params)

    def _snapshot(self, params: list[tuple[int, int]]) -> dict[str, Any]:
        blocks = [(addr, size, "active_allocated", []) for addr, size in params]
        blocks += [(addr, size, "active_allocated", stack)
                   for addr, (size, stack) in self.live.items()]
        blocks += [(self.next_addr + i * 2 * MIB, MIB, "inactive", [])
                   for i in range(self.free_pieces)]
        segments = [{"device": 0, "address": addr, "total_size": size, "stream": 0,
                     "segment_type": "large",
                     "allocated_size": 0 if state == "inactive" else size,
                     "active_size": 0 if state == "inactive" else size,
                     "blocks": [{"address": addr, "size": size, "requested_size": size,
                                 "state": state, "frames": stack}]}
                    for addr, size, state, stack in blocks]
        return {"segments": segments, "device_traces": [self.trace]}
