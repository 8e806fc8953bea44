"""Faults around the tools nsbridge runs: warnings printed around the data it parses, and the
file modes of what a tool writes."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nsbridge.collect._process import honour_umask
from nsbridge.collect.ncu import export_raw_csv, gpu_names, ncu_version
from nsbridge.collect.nsys import nsys_version

CSV = '"ID","Kernel Name"\n"",""\n"0","k"\n'
# each fake tool prints chatter that looks like its data, before and after, on both streams
TOOLS = {
    "nsys": ('print("Notice: settings of 2001.2 ignored")\n'
             'print("NVIDIA Nsight Systems version 2022.4.2.1-df9881f")\n'
             'print("Warning: 1999.9 style", file=sys.stderr)\n'),
    "ncu": ('if sys.argv[1] == "--import":\n'
            '    print("==WARNING== Version 1999.1 of the driver", file=sys.stderr)\n'
            f'    sys.stdout.write({CSV!r})\n'
            '    sys.exit(0)\n'
            'print("==WARNING== Version 1999.1 of the driver is old")\n'
            'print("NVIDIA (R) Nsight Compute Command Line Profiler")\n'
            'print("Version 2022.3.0.0 (build 31729285) (public-release)")\n'
            'print("Version 1998.1 warning", file=sys.stderr)\n'),
    "nvidia-smi": ('print("Warning: GPU 7: chatter")\n'
                   'print("GPU 0: NVIDIA H200 (UUID: GPU-00000000)")\n'
                   'print("GPU 9: on stderr (UUID: x)", file=sys.stderr)\n'),
}
SITECUSTOMIZE = """\
import atexit, sys, warnings
print("CHATTER before on stdout {")
print("CHATTER before on stderr", file=sys.stderr)
warnings.warn("CUDA initialization: The NVIDIA driver on your system is too old")
atexit.register(lambda: print("CHATTER after on stdout {", flush=True))
"""


@pytest.fixture
def chatty_tools(tmp_path: Path) -> dict[str, str]:
    """PATH-less fake nsys, ncu and nvidia-smi that print warnings around their data."""
    paths = {}
    for name, body in TOOLS.items():
        exe = tmp_path / name
        exe.write_text(f"#!{sys.executable}\nimport sys\n{body}")
        exe.chmod(0o755)
        paths[name] = str(exe)
    return paths


@pytest.mark.slow      # runs the fake tools
def test_versions_are_read_from_the_tools_own_lines(chatty_tools: dict[str, str]) -> None:
    assert nsys_version(chatty_tools["nsys"]) == "2022.4.2.1"
    assert ncu_version(chatty_tools["ncu"]) == "2022.3.0.0"


@pytest.mark.slow      # runs the fake tools
def test_gpu_listing_ignores_chatter(chatty_tools: dict[str, str]) -> None:
    folder = str(Path(chatty_tools["nvidia-smi"]).parent)
    assert gpu_names({"PATH": folder}) == ["NVIDIA H200"]


@pytest.mark.slow      # runs the fake tools
def test_csv_export_holds_stdout_only(chatty_tools: dict[str, str], tmp_path: Path) -> None:
    out = export_raw_csv(chatty_tools["ncu"], tmp_path / "k.ncu-rep", tmp_path / "k.csv")
    assert out.read_text() == CSV


@pytest.mark.slow
def test_doctor_shows_what_torch_printed_around_its_probe(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ, PATH=str(tmp_path / "no-tools"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path),
                                                         os.environ.get("PYTHONPATH")])))
    env.pop("NSBRIDGE_NSYS", None)
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "doctor"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("OK   torch: ") for line in lines), proc.stdout
    warned = [line for line in lines if line.startswith("WARN torch warned: ")]
    assert len(warned) == 1, proc.stdout
    for said in ("CHATTER before on stdout {", "CHATTER after on stdout {",
                 "CHATTER before on stderr", "The NVIDIA driver on your system is too old"):
        assert said in warned[0]


def test_honour_umask_takes_away_denied_bits(tmp_path: Path) -> None:
    made = tmp_path / "made.qdstrm"
    made.write_text("x")
    made.chmod(0o666)
    old = os.umask(0o027)
    try:
        honour_umask(made, tmp_path / "missing.nsys-rep")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o640


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys is not installed")
def test_nsys_run_files_honour_the_umask(tmp_path: Path) -> None:
    """nsys starts its target with umask 0 and writes its capture 0664: every file of the
    run, and the script's own, must follow the user's umask 022 all the same."""
    script = tmp_path / "writes.py"
    script.write_text("import sys, torch\nopen(sys.argv[1], 'w').write('x')\n"
                      "print(torch.ones(3).sum())\n")
    run = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "nsbridge", "-q", "timeline", "--profile",
                           "quick", "--out", str(run), str(script), str(tmp_path / "own.txt")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          umask=0o022, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert proc.returncode == 0, proc.stderr
    files = [p for p in run.rglob("*") if p.is_file()] + [tmp_path / "own.txt"]
    assert any(p.suffix == ".nsys-rep" for p in files)
    loose = {str(p.relative_to(tmp_path)): oct(stat.S_IMODE(p.stat().st_mode)) for p in files
             if p.stat().st_mode & 0o022}
    assert not loose, f"group/other-writable despite umask 022: {loose}"
