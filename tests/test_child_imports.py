"""The profiled process stays light: while the user's script runs under `nsbridge triage`,
nsbridge's own code in that process has imported torch (it profiles torch) and nothing of
the analysis side: no pandas, no click, no nsbridge.model/parse/report/api. What the child
does after the script ends (a rank's summary) may import more; this looks from inside the
script. The static side of the same rule is tests/test_layering.py (NOT_AT_IMPORT)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_nsbridge

SCRIPT = """\
import json, sys
import torch

model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(8, 16)).sum().backward()
    opt.step()

analysis_side = sorted(
    m for m in sys.modules
    if m.split('.')[0] in {'pandas', 'click'}
    or m.startswith(('nsbridge.model', 'nsbridge.parse', 'nsbridge.report', 'nsbridge.api')))
with open(sys.argv[1], 'w') as out:
    json.dump({'analysis_side': analysis_side,
               'nsbridge': sorted(m for m in sys.modules if m.startswith('nsbridge')),
               'profiler': 'torch.profiler' in sys.modules}, out)
"""


@pytest.mark.slow
def test_the_profiled_script_sees_no_analysis_modules(tmp_path: Path) -> None:
    script, seen = tmp_path / "linear.py", tmp_path / "seen.json"
    script.write_text(SCRIPT)
    proc = run_nsbridge("-q", "triage", "--out", str(tmp_path / "run"), str(script), str(seen),
                        cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(seen.read_text())
    # it really ran inside nsbridge's child, under torch.profiler
    assert "nsbridge._bootstrap.session" in found["nsbridge"], found["nsbridge"]
    assert "nsbridge._bootstrap.syncs" in found["nsbridge"] and found["profiler"]
    assert found["analysis_side"] == [], found["analysis_side"]
