"""What an op computes, apart from how long it took: its work signature.

An op call's signature is its input shapes, the dtypes of its tensor inputs and their
memory layouts (from the trace's "Input Dims", "Input type" and "Input Strides", recorded
with ``record_shapes``). Noise moves times; it never moves signatures or call counts. So a
comparison of two runs can tell *different work* (more calls, other shapes, another dtype,
another layout) from *the same work, slower*, whatever the timing noise.

Texts, as ``ops[].shape_work`` entries carry them:
- dtypes: the tensor inputs' dtypes in torch's names (``float32``; ``float32, int64`` when
  they differ), non-tensor inputs left out;
- layout: ``contiguous`` when every tensor input is, else each tensor input's layout in
  order (``contiguous, transposed``); ``transposed`` is a matrix read column-major (its
  last two strides swapped, as ``weight.t()``), ``channels_last`` a 4-d NHWC tensor, and
  ``strided`` anything else (a slice, an expanded or broadcast view).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any, Optional
from ...contract.comparison import MoreWork
from ...contract.report import Report, WorkSignature

# torch's "Input type" spellings -> dtype
DTYPES = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
          "double": "float64", "c10::Float8_e4m3fn": "float8", "c10::Float8_e5m2": "float8",
          "signed char": "int8", "unsigned char": "uint8", "short int": "int16", "int": "int32",
          "long int": "int64", "bool": "bool", "c10::complex<float>": "complex64",
          "c10::complex<double>": "complex128"}


@lru_cache(maxsize=4096)
def dtype_text(input_types: Optional[str]) -> Optional[str]:
    """The tensor inputs' dtypes of a recorded "Input type" list (JSON text), or None when
    the trace has none."""
    names = _loads(input_types)
    if not isinstance(names, list):
        return None
    found = [DTYPES[n] for n in names if isinstance(n, str) and n in DTYPES]
    if not found:
        return None
    return found[0] if len(set(found)) == 1 else ", ".join(found)


@lru_cache(maxsize=4096)
def layout_text(input_dims: Optional[str], input_strides: Optional[str]) -> Optional[str]:
    """The tensor inputs' memory layouts (module docstring) from "Input Dims" and "Input
    Strides" (JSON texts), or None when the trace has no strides."""
    dims, strides = _loads(input_dims), _loads(input_strides)
    if not isinstance(dims, list) or not isinstance(strides, list):
        return None
    layouts = [_layout(d, s) for d, s in zip(dims, strides)
               if isinstance(d, list) and isinstance(s, list) and d and len(d) == len(s)]
    if not layouts:
        return None
    return "contiguous" if set(layouts) == {"contiguous"} else ", ".join(layouts)


def _layout(dims: list[Any], strides: list[Any]) -> str:
    if _is_row_major(dims, strides):
        return "contiguous"
    if len(dims) >= 2:
        swapped = list(range(len(dims)))
        swapped[-2], swapped[-1] = swapped[-1], swapped[-2]
        if _is_row_major([dims[i] for i in swapped], [strides[i] for i in swapped]):
            return "transposed"
    if len(dims) == 4 and _is_row_major([dims[i] for i in (0, 2, 3, 1)],
                                        [strides[i] for i in (0, 2, 3, 1)]):
        return "channels_last"
    return "strided"


def _is_row_major(dims: list[Any], strides: list[Any]) -> bool:
    """Dense row-major: each stride the product of the later sizes (size-1 dims, whose
    stride never matters, skipped)."""
    expected = 1
    for size, stride in zip(reversed(dims), reversed(strides)):
        if not isinstance(size, int) or not isinstance(stride, int):
            return False
        if size != 1 and stride != expected:
            return False
        expected *= max(size, 1)
    return True


def _loads(text: Optional[str]) -> Any:
    if not isinstance(text, str) or not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


Signature = tuple[str, str, str]   # (input shapes, dtypes, layout); "" where not recorded


class OpWork:
    """One op's work in one run: calls and its recorded µs (``us``, its self time as the
    trace has it) per step and, per signature, (calls, µs) per step; ``complete`` when
    its signatures cover every call (``shape_work`` keeps the most called few)."""

    def __init__(self, calls: float, us: float, shape_work: list[WorkSignature],
                 steps: int) -> None:
        self.calls = float(calls) / steps
        self.us = float(us) / steps
        self.by_signature: dict[Signature, tuple[float, float]] = {}
        for entry in shape_work:
            key = signature(entry)
            calls, us = self.by_signature.get(key, (0.0, 0.0))
            self.by_signature[key] = (calls + entry["calls"] / steps, us + entry["us"] / steps)
        covered = sum(calls for calls, _ in self.by_signature.values())
        self.complete = bool(self.by_signature) and abs(covered - self.calls) < 0.5 / steps


def signature(entry: WorkSignature) -> Signature:
    """A ``shape_work`` entry's signature."""
    return (str(entry.get("shape") or ""), str(entry.get("dtypes") or ""),
            str(entry.get("layout") or ""))


def signature_changes(a: OpWork, b: OpWork) -> dict[str, tuple[str, str]]:
    """How one op's signatures differ between two runs, by kind, each with its (before,
    after) texts: ``dtype`` or ``layout`` (the same input shapes now in another dtype or
    layout; the pair with the most time in B), ``shapes`` (calls moved to other input
    shapes: each run has shapes the other lacks; judged only when both runs' signatures
    cover every call). Calls only added or only removed are more or less of the same work
    (``more_work``), not a change of signature. Empty: the same work."""
    only_a = [s for s in a.by_signature if s not in b.by_signature]
    only_b = [s for s in b.by_signature if s not in a.by_signature]
    kinds: dict[str, tuple[str, str]] = {}
    for index, kind in ((1, "dtype"), (2, "layout")):
        others = [i for i in range(3) if i != index]
        pairs = [(sa, sb) for sa in only_a for sb in only_b if sa[index] != sb[index]
                 and all(sa[i] == sb[i] for i in others)]
        if pairs:
            sa, sb = max(pairs, key=lambda pair: b.by_signature[pair[1]][1])
            kinds[kind] = (sa[index], sb[index])
    if not kinds and only_a and only_b and a.complete and b.complete:
        kinds["shapes"] = (_costliest(only_a, a), _costliest(only_b, b))
    return kinds


def _costliest(signatures: list[Signature], work: OpWork) -> str:
    return max(signatures, key=lambda s: work.by_signature[s][1])[0]


def pooled_work(reports: list[Report]) -> dict[str, OpWork]:
    """Each op's work over several processes of one side (their calls, self times and
    signatures summed, per step of all their measured steps)."""
    steps = sum(int(steps.get("count") or 0) for r in reports if (steps := r.get("steps"))) or 1
    calls: dict[str, float] = {}
    us: dict[str, float] = {}
    signatures: dict[str, list[WorkSignature]] = {}
    for report in reports:
        key = report.get("ranked_by") or "cpu_self_us"
        for op in report.get("ops") or []:
            name = op.get("name")
            if not name:
                continue
            calls[name] = calls.get(name, 0.0) + (op.get("calls") or 0)
            us[name] = us.get(name, 0.0) + (op.get(key) or 0.0)
            signatures.setdefault(name, []).extend(op.get("shape_work") or [])
    return {name: OpWork(calls[name], us[name], signatures[name], steps) for name in calls}


def more_work(a: Optional[OpWork], b: Optional[OpWork], a_us: Optional[float],
              b_us: Optional[float]) -> Optional[MoreWork]:
    """{calls_a, calls_b, pct, added_us, priced}: the op's calls per step rose, and what
    the change in calls costs: per signature, each one's extra (or fewer) calls priced at
    the cheaper of the two runs' time per call of that signature (one only a run has, at
    that run's); without signatures, when the shapes are the same, at the cheaper of the
    runs' mean time per call (``a_us``, ``b_us``: the op's time per step as the comparison
    measured it). A signature's times are taken at that measure (each run's recorded µs
    scaled to ``a_us``/``b_us``: waited steps left out), so the price is in the same µs
    as the op's row. None when the calls did not rise or cannot be priced."""
    if a is None or b is None or a.calls <= 0 or b.calls <= a.calls:
        return None
    if a.by_signature and b.by_signature:
        to_a = a_us / a.us if a_us and a.us else 1.0
        to_b = b_us / b.us if b_us and b.us else 1.0
        added = 0.0
        for key in set(a.by_signature) | set(b.by_signature):
            (ca, ua), (cb, ub) = a.by_signature.get(key, (0.0, 0.0)), b.by_signature.get(
                key, (0.0, 0.0))
            if cb != ca:
                added += (cb - ca) * min(u * to / c for c, u, to in ((ca, ua, to_a),
                                                                    (cb, ub, to_b)) if c > 0)
        priced = "per input signature"
    elif a_us and b_us:
        per_call = min(a_us / a.calls, b_us / b.calls)
        added = per_call * (b.calls - a.calls)
        priced = f"about {per_call / 1e3:.3f} ms each"
    else:
        return None
    return {"calls_a": round(a.calls, 3), "calls_b": round(b.calls, 3),
            "pct": round(100.0 * (b.calls / a.calls - 1.0), 2), "added_us": round(added, 3),
            "priced": priced}


def calls_changed(a: Optional[OpWork], b: Optional[OpWork]) -> bool:
    """Whether the op's calls per step differ by more than 1% between the runs."""
    if a is None or b is None:
        return True
    return abs(a.calls - b.calls) > 0.01 * max(a.calls, b.calls, 1e-9)


def describe_change(kind: str, before: str, after: str) -> str:
    """One signature change in words."""
    return {"dtype": f"now runs in {after} (was {before})",
            "layout": f"now reads its inputs {after} (was {before})",
            "shapes": f"now runs on input shapes {after} (was {before})"}[kind]
