"""What `explorer doctor` finds on the machine before any model runs: versions, CUDA and NVML, and each device's
figures (its spec row, FLOP/s per dtype, copy and read-only bandwidth), each judged as a `Check`."""

from __future__ import annotations

import importlib.metadata
import math
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from explorer.core import device as device_module
from explorer.core.device import FiguresStore, cuda_profile
from explorer.core.errors import ExplorerError, one_line
from explorer.core.gpu_specs import match_gpu_spec
from explorer.core.lab_progress import Report, part_of, silent
from explorer.core.profiles import DeviceProfile
from explorer.core.units import human_bandwidth, human_bytes, human_flops_per_s, percent

Status = Literal["PASS", "FAIL", "SKIP"]
PACKAGES = ("torch", "transformers", "streamlit")  # what a run (torch, transformers) and the app (streamlit) need
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements.txt"
# A measurement may beat a datasheet or NVML peak by this much before the peak is called wrong (the run's own rule).
PEAK_SLACK = 1.1
# Read-only over copy: 0.98-1.22x measured on the project's CPUs, near 1x on GPUs (a copy counts read + write). Outside
# this generous window the sum is not streaming from memory (cached, or compute-bound), so its figure can't be used.
READ_OVER_COPY = (0.5, 3.0)


@dataclass(frozen=True)
class Check:
    """One thing the doctor checked: PASS, FAIL, or SKIP (not applicable on this machine, with the reason; not a
    failure)."""

    name: str  # short and stable: the JSON lists it, a failed exit names it
    status: Status
    line: str  # one line: what was checked and what was found, with its figure
    figure: float | int | str | tuple[int, ...] | None = None  # the figure the verdict rests on
    unit: str = ""  # of `figure`


def verdict(ok: bool, name: str, line: str, figure: Any = None, unit: str = "") -> Check:
    return Check(name, "PASS" if ok else "FAIL", line, figure, unit)


# --- versions, CUDA, NVML --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NvmlStatus:
    available: bool
    reason: str = ""  # why not, when not available
    driver: str | None = None
    nvml_version: str | None = None
    cuda_driver: str | None = None  # the newest CUDA the driver supports, e.g. "12.8"
    gpus: int = 0  # devices NVML sees (ignores CUDA_VISIBLE_DEVICES)


@dataclass(frozen=True)
class Environment:
    python: str
    platform: str
    packages: dict[str, str | None]  # installed version, None when not installed
    pinned: dict[str, str]  # what requirements.txt pins, where the checkout has one
    torch_threads: int
    cuda_build: str | None  # the CUDA torch was built for (torch.version.cuda); None for a CPU build
    cuda_devices: int  # the devices torch can use
    nvml: NvmlStatus


def installed_version(package: str) -> str | None:
    if package == "torch":
        return torch.__version__  # with its build tag: "+cpu", "+cu128"
    try:
        return importlib.metadata.version(package)  # without importing it: streamlit is the app's, not the CLI's
    except importlib.metadata.PackageNotFoundError:
        return None


def pinned_versions() -> dict[str, str]:
    if not REQUIREMENTS.is_file():
        return {}
    pins = (line.split("#")[0].strip().split("==") for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines())
    return {pin[0]: pin[1] for pin in pins if len(pin) == 2 and pin[0] in PACKAGES}


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)  # older bindings return bytes


def nvml_status() -> NvmlStatus:
    pynvml = device_module.pynvml  # the device module's import, so a test's fake NVML is seen here too
    if pynvml is None:
        return NvmlStatus(False, "nvidia-ml-py is not installed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # no driver / no GPU: NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return NvmlStatus(False, str(exc) or type(exc).__name__)
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 12080
        return NvmlStatus(
            True,
            driver=_text(pynvml.nvmlSystemGetDriverVersion()),
            nvml_version=_text(pynvml.nvmlSystemGetNVMLVersion()),
            cuda_driver=f"{cuda // 1000}.{cuda % 1000 // 10}",
            gpus=int(pynvml.nvmlDeviceGetCount()),
        )
    except pynvml.NVMLError as exc:
        return NvmlStatus(False, f"NVML started but a query failed: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def environment() -> Environment:
    cuda = torch.cuda.is_available()
    return Environment(
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()} ({sys.platform})",
        packages={name: installed_version(name) for name in PACKAGES},
        pinned=pinned_versions(),
        torch_threads=torch.get_num_threads(),
        cuda_build=torch.version.cuda,
        cuda_devices=torch.cuda.device_count() if cuda else 0,
        nvml=nvml_status(),
    )


def versions_check(env: Environment) -> Check:
    missing = [name for name, version in env.packages.items() if version is None]
    found = ", ".join(f"{name} {version}" for name, version in env.packages.items() if version is not None)
    if missing:
        return verdict(False, "versions", f"{', '.join(missing)} not installed: pip install -r requirements.txt")
    differ = [
        f"{name} {env.packages[name]} (requirements.txt pins {pin})"
        for name, pin in env.pinned.items()
        if str(env.packages[name]).split("+")[0] != pin
    ]
    pins = f"; differs from the pins the figures were verified on: {', '.join(differ)}" if differ else ""
    same = "; as requirements.txt pins them" if env.pinned and not differ else ""
    return verdict(True, "versions", f"Python {env.python}, {found}{pins or same}", found)


def cuda_check(env: Environment) -> Check:
    torch_version = env.packages["torch"]
    build = f"torch {torch_version} built for CUDA {env.cuda_build}" if env.cuda_build else f"torch {torch_version}"
    build += "" if env.cuda_build else ", a CPU build"
    if env.cuda_devices:
        return verdict(True, "cuda", f"{env.cuda_devices} CUDA device(s), {build}", env.cuda_devices, "devices")
    if env.nvml.gpus:
        advice = "install a CUDA build of torch" if not env.cuda_build else "check the driver and CUDA_VISIBLE_DEVICES"
        return verdict(False, "cuda", f"NVML sees {env.nvml.gpus} GPU(s) but torch can use none ({build}): {advice}")
    return Check("cuda", "SKIP", f"no CUDA device ({build}): runs use the CPU", 0, "devices")


def nvml_check(env: Environment) -> Check:
    nvml = env.nvml
    if nvml.available:
        line = f"driver {nvml.driver}, NVML {nvml.nvml_version}, CUDA driver {nvml.cuda_driver}, {nvml.gpus} GPU(s)"
        return verdict(True, "nvml", line, nvml.driver)
    if env.cuda_devices:
        why = f"NVML unavailable ({nvml.reason}): peak bandwidth comes from the spec table, else the copy benchmark"
        return Check("nvml", "SKIP", why)
    return Check("nvml", "SKIP", f"no GPU, so no NVML to read ({nvml.reason})")


# --- each device's figures -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceFigures:
    device: str  # "cpu", "cuda:0", ...
    name: str
    spec_row: str | None  # the matched row of explorer/core/gpu_specs.py; None on a CPU or an unknown GPU
    spec_bandwidth_bytes_per_s: float | None  # that row's datasheet bandwidth
    profiles: tuple[DeviceProfile, ...]  # one per dtype measured, float32 first
    failures: tuple[str, ...] = ()  # "bfloat16: why" for each dtype that could not be measured


def dtypes_for(target: str) -> tuple[str, ...]:
    """float32 and bfloat16 everywhere torch runs them; float16 on CUDA only (the app refuses it on a CPU)."""
    if target == "cpu":
        return ("float32", "bfloat16")
    index = int(target.split(":")[1])
    with torch.cuda.device(index):
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    return ("float32", "bfloat16", "float16") if bf16 else ("float32", "float16")


def profile_for(target: str, dtype: str, progress: Report, store: FiguresStore) -> DeviceProfile:
    """The app's own device figures. The CPU's and the default GPU's are kept in `store` for the run that follows;
    another GPU is made current while measured, because CUDA events record on the current device."""
    if target == "cpu":
        return store.get("cpu", dtype, progress=progress)
    index = int(target.split(":")[1])
    if index == torch.cuda.current_device():
        return store.get("cuda", dtype, progress=progress)
    with torch.cuda.device(index):
        return cuda_profile(dtype, progress, index=index)


def measure_device(target: str, progress: Report = silent, store: FiguresStore | None = None) -> DeviceFigures:
    store = FiguresStore() if store is None else store
    dtypes = dtypes_for(target)
    profiles, failures = [], []
    for j, dtype in enumerate(dtypes):
        try:
            part = part_of(progress, j / len(dtypes), (j + 1) / len(dtypes))
            profiles.append(profile_for(target, dtype, part, store))
        except (ExplorerError, RuntimeError) as exc:  # a dtype the device lacks, out of memory: a failed check
            failures.append(f"{dtype}: {one_line(exc)}")
    if target == "cpu":
        return DeviceFigures(target, device_module.cpu_name(), None, None, tuple(profiles), tuple(failures))
    index = int(target.split(":")[1])
    name = torch.cuda.get_device_name(index)
    spec = match_gpu_spec(name, torch.cuda.get_device_properties(index).total_memory)
    row, bandwidth = (spec.name, spec.bandwidth_bytes_per_s) if spec is not None else (None, None)
    return DeviceFigures(target, name, row, bandwidth, tuple(profiles), tuple(failures))


def measure_devices(progress: Report = silent, store: FiguresStore | None = None) -> tuple[DeviceFigures, ...]:
    """The CPU, then every CUDA device torch can use."""
    targets = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0)]
    return tuple(
        measure_device(target, part_of(progress, k / len(targets), (k + 1) / len(targets)), store)
        for k, target in enumerate(targets)
    )


def matmul_check(target: str, p: DeviceProfile) -> Check:
    name = f"{target} {p.dtype} matmul"
    if p.measured_flops is None or not math.isfinite(p.measured_flops) or p.measured_flops <= 0:
        return verdict(False, name, f"no FLOP/s measured ({p.notes or 'the matmul benchmark gave nothing'})")
    line = f"{human_flops_per_s(p.measured_flops)} (best of {len(p.flops_samples)} {p.matmul_n}x{p.matmul_n} matmuls)"
    if p.peak_flops_source != "spec":
        return verdict(True, name, line, p.measured_flops, "FLOP/s")
    share = p.measured_flops / p.peak_flops
    line += f", {percent(share)} of the spec's {human_flops_per_s(p.peak_flops)}"
    if share > PEAK_SLACK:
        line += ": above the datasheet, so the spec row does not fit this board"
    return verdict(share <= PEAK_SLACK, name, line, p.measured_flops, "FLOP/s")


def bandwidth_checks(target: str, p: DeviceProfile) -> list[Check]:
    """The copy and the read-only stream: each measured, under any datasheet or NVML peak, and the read figure
    plausible beside the copy."""
    peak = p.bandwidth_bytes_per_s if p.bandwidth_source in ("nvml", "spec") else None
    checks = []
    for what, measured, samples, counts in (
        ("copy", p.measured_bandwidth_bytes_per_s, p.bandwidth_samples, f"{p.bandwidth_counts}, copies"),
        ("read", p.measured_read_bandwidth_bytes_per_s, p.read_bandwidth_samples, "read only, sums"),
    ):
        name = f"{target} {what} bandwidth"
        if measured is None or not math.isfinite(measured) or measured <= 0:
            checks.append(verdict(False, name, f"no {what} bandwidth measured ({p.notes or 'no samples'})"))
            continue
        size = human_bytes(p.copy_bytes or 0)
        line = f"{human_bandwidth(measured)} ({counts} of {size}, best of {len(samples)})"
        ok = True
        if what == "read" and p.measured_bandwidth_bytes_per_s:
            ratio = measured / p.measured_bandwidth_bytes_per_s
            ok = READ_OVER_COPY[0] <= ratio <= READ_OVER_COPY[1]
            line += f", {ratio:.2f}x the copy" + ("" if ok else f": outside {READ_OVER_COPY}, not a memory stream")
        if peak is not None:
            ok = ok and measured <= PEAK_SLACK * peak
            line += f", {percent(measured / peak)} of the {p.bandwidth_source} peak {human_bandwidth(peak)}"
        checks.append(verdict(ok, name, line, measured, "B/s"))
    return checks


def spec_check(figures: DeviceFigures) -> Check:
    name = f"{figures.device} spec"
    row, sheet = figures.spec_row, figures.spec_bandwidth_bytes_per_s
    if row is None or sheet is None:
        return Check(name, "SKIP", f"no row for '{figures.name}' in the spec table: its peak FLOP/s are measured")
    nvml = next((p.bandwidth_bytes_per_s for p in figures.profiles if p.bandwidth_source == "nvml"), None)
    line = f"'{figures.name}' is the table's {row} (datasheet bandwidth {human_bandwidth(sheet)})"
    if nvml is None:
        return verdict(True, name, line + "; NVML gave no bandwidth to compare", row)
    agree = abs(nvml / sheet - 1) <= PEAK_SLACK - 1
    line += f"; NVML's {human_bandwidth(nvml)} " + ("agrees" if agree else "disagrees by more than 10 %")
    return verdict(agree, name, line, row)


def device_checks(figures: DeviceFigures) -> list[Check]:
    checks = [spec_check(figures)] if figures.device != "cpu" else []
    checks += [
        verdict(False, f"{figures.device} {failure.split(':')[0]} figures", failure) for failure in figures.failures
    ]
    checks += [matmul_check(figures.device, p) for p in figures.profiles]
    if figures.profiles:  # one dtype's bandwidths speak for the device: the copy and the sum are float32 at any dtype
        checks += bandwidth_checks(figures.device, figures.profiles[0])
    return checks


def machine_checks(env: Environment, devices: tuple[DeviceFigures, ...]) -> list[Check]:
    checks = [versions_check(env), cuda_check(env), nvml_check(env)]
    for figures in devices:
        checks += device_checks(figures)
    return checks
