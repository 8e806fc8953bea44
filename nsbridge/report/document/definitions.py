"""What each number means, in one sentence each: the block report.md ends with.

docs/explanation/numbers.md gives each definition with its source; the two are kept in
step by tests/test_report_render.py.
"""

from __future__ import annotations

DEFINITIONS: dict[str, str] = {
    "window": "what every figure covers: the measured steps (first step's start to last "
              "step's end), or with --window trace / no steps the whole trace, in totals and "
              "rates per second; GPU work launched in it counts to its end",
    "step": "one ProfilerStep range; a last step the recording ended inside (under half the "
            "others' median length and events) is left out, a lone step is clipped to its "
            "activity",
    "phases": "data > backward > forward > optimizer > other: each instant of a step goes to "
              "the first phase covering it, so they add up to the step; forward is the ops "
              "before the step's last backward (and an optimizer's closures)",
    "busy": "union of kernels, copies and memsets of the window over [window start, end of "
            "the last GPU work launched in it], averaged over devices",
    "op self / total": "totals over the window's ops (not per step): self = without nested "
                       "ops, total = with them; device self = GPU time of the work the op "
                       "launched itself (torch's Self CUDA)",
    "annotation time": "a record_function range gets the kernels launched inside it; torch's "
                       "key_averages shows the span of its GPU-side copy instead",
    "kernels": "every kernel, copy and memset of the window, with its op or why it has none "
               "(outside_ops, launched_before_window)",
    "collective time": "calls counted once on the host; time from the device (the range's "
                       "GPU copy, else its kernels), else the host range",
    "overlap": "the part of the NCCL kernels' time that other kernels also cover",
    "sync cost": "per measured step: calls, host time blocked, GPU idle after each until the "
                 "next GPU work; sites outside the training steps have no per-step rate",
    "memory": "gross = allocated inside the op itself; net = allocated minus freed during "
              "the op and its children, on the run's device",
}


def markdown_block(preface: str = "") -> list[str]:
    """The collapsed block report.md ends with (``preface``: a line before the terms)."""
    lines = ["<details><summary>What each number means (nsbridge docs: "
             "explanation/numbers.md)</summary>", ""] + ([preface, ""] if preface else [])
    lines += [f"- **{term}**: {text}" for term, text in DEFINITIONS.items()]
    return lines + ["", "</details>"]
