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
from explorer.core.device_profile import DeviceProfile
from explorer.core.errors import ExplorerError, one_line
from explorer.core.gpu_specs import match_gpu_spec
from explorer.core.lab_progress import Report, part_of, silent
from explorer.core.units import human_bandwidth, human_bytes, human_flops_per_s, percent

Status = Literal["PASS", "WARN", "FAIL", "SKIP"]
PACKAGES = ("torch", "transformers", "streamlit")  # what a run (torch, transformers) and the app (streamlit) need
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements.txt"
# Every check below states its threshold and where it comes from in its own line; the constants say why.
# A measurement may beat a datasheet or NVML peak by this much before the peak is called wrong (the run's own rule,
# `explorer.core.trace.PLAUSIBLE_SLACK`: timers and clocks wobble by a few percent).
PEAK_SLACK = 1.1
# Read-only over copy: 0.98-1.22x measured on the project's CPUs, near 1x on GPUs (a copy counts read + write). Outside
# this generous window the sum is not streaming from memory (cached, or compute-bound), so its figure can't be used.
READ_OVER_COPY = (0.5, 3.0)
# A large matmul on a healthy GPU reaches well over half of the dense datasheet peak (cuBLAS at n = 8192 on H100 and
# A100 boards: 60-80 %); under a quarter, the board is throttled, shared, or not the row it was matched to.
SPEC_FLOOR = 0.25
# A dtype the doctor's run does not use has no pass to bound it: its matmul must reach at least this share of the same
# device's float32 figure. A software bfloat16 path on a CPU without bfloat16 instructions measured 1/600 of float32
# (recordings/bfloat16.pdx: 0.29 against 176 GFLOP/s), so below 1/1000 the figure is broken, not merely slow.
OTHER_DTYPE_FLOOR = 1e-3
# A copy counts read + write; a decode pass mostly reads. Reads ran 0.98-1.22x the copy figure on the project's CPUs,
# so a copy under half what a pass of the run read per second was measured on a busy or throttled machine.
COPY_FLOOR_OF_RUN = 0.5
ROOFLINE_RULE = "no pass runs faster than the device's peak (the roofline)"


@dataclass(frozen=True)
class RunFloor:
    """What the doctor's own run achieved on one device and dtype: its best pass's FLOP/s and bytes moved per second.
    The roofline says no pass beats the device's peak, so these are lower bounds on the device's figures."""

    device: str  # "cpu", "cuda:0", ...
    dtype: str
    flops_per_s: float
    bytes_per_s: float


@dataclass(frozen=True)
class Check:
    """One thing the doctor checked: PASS, WARN (works, but not as verified: said, not a failure), FAIL, or SKIP (not
    applicable on this machine, with the reason; not a failure)."""

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


APP_ONLY = "streamlit"  # the one package only the app needs


def versions_check(env: Environment) -> Check:
    """Every package installed at the version requirements.txt pins: the versions every figure and test here was
    verified on (a local build tag such as +cpu or +cu128 is allowed). Another version is a WARN, not a FAIL: a GPU
    image's own torch may well run everything, and the doctor's other checks (the run's tokens against generate(),
    the KV bytes, the clocks) are what says whether it does here. A package missing is a FAIL, except streamlit: a GPU
    image without it runs the CLI, `bench` and the GPU check (only the app needs it), so its absence warns."""
    rule = "threshold: torch, transformers and streamlit at requirements.txt's pins (the verified versions)"
    missing = [name for name, version in env.packages.items() if version is None]
    found = ", ".join(f"{name} {version}" for name, version in env.packages.items() if version is not None)
    if set(missing) - {APP_ONLY}:
        return verdict(False, "versions", f"{', '.join(missing)} not installed: pip install -r requirements.txt")
    differ = [
        f"{name} {env.packages[name]} (requirements.txt pins {pin})"
        for name, pin in env.pinned.items()
        if env.packages.get(name) is not None and str(env.packages[name]).split("+")[0] != pin
    ]
    if differ or missing:
        below = "not the verified versions, so the checks below say whether this machine runs the explorer"
        said = [f"{', '.join(differ)}: {below}"] if differ else []
        if missing:
            said.append(f"{APP_ONLY} not installed: the CLI, bench and the GPU check run here, the app does not")
        line = (
            f"{'; '.join(said)}; pip install -r requirements.txt for the verified stack ({rule}; another version warns)"
        )
        return Check("versions", "WARN", line, found)
    same = "as requirements.txt pins them" if env.pinned else "no requirements.txt beside this checkout to compare"
    return verdict(True, "versions", f"Python {env.python}, {found}; {same} ({rule})", found)


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
    """NVML, where a GPU is: it must see every GPU torch uses, and its driver must support the CUDA major version
    torch was built for (NVIDIA's CUDA compatibility rule: https://docs.nvidia.com/deploy/cuda-compatibility/)."""
    nvml = env.nvml
    rule = (
        "threshold: NVML sees at least torch's GPUs, and the driver's CUDA major version is at least the build's "
        "(NVIDIA's CUDA compatibility guide)"
    )
    if nvml.available:
        line = f"driver {nvml.driver}, NVML {nvml.nvml_version}, CUDA driver {nvml.cuda_driver}, {nvml.gpus} GPU(s)"
        problems = []
        if nvml.gpus < env.cuda_devices:
            problems.append(f"NVML sees {nvml.gpus} GPU(s) where torch uses {env.cuda_devices}")
        if env.cuda_build and nvml.cuda_driver and _major(nvml.cuda_driver) < _major(env.cuda_build):
            problems.append(f"the driver supports CUDA {nvml.cuda_driver}, torch was built for {env.cuda_build}")
        line += f": {'; '.join(problems)}" if problems else ""
        return verdict(not problems, "nvml", f"{line} ({rule})", nvml.driver)
    if env.cuda_devices and nvml.reason.startswith("NVML started but"):
        return verdict(False, "nvml", f"{nvml.reason}: the driver answers torch but not NVML ({rule})")
    if env.cuda_devices:
        why = f"NVML unavailable ({nvml.reason}): peak bandwidth comes from the spec table, else the copy benchmark"
        return Check("nvml", "SKIP", why)
    return Check("nvml", "SKIP", f"no GPU, so no NVML to read ({nvml.reason})")


def _major(version: str) -> int:
    return int(version.split(".")[0])


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


def matmul_check(
    target: str, p: DeviceProfile, run: RunFloor | None = None, float32_flops: float | None = None
) -> Check:
    """The matmul figure, judged against what bounds it: the datasheet (at most 110 %, at least a quarter), a pass of
    the doctor's own run on this device and dtype (the figure at least what that pass achieved: the roofline), and
    for a dtype no pass ran in, at least 1/1000 of the device's float32 figure."""
    name = f"{target} {p.dtype} matmul"
    if p.measured_flops is None or not math.isfinite(p.measured_flops) or p.measured_flops <= 0:
        return verdict(False, name, f"no FLOP/s measured ({p.notes or 'the matmul benchmark gave nothing'})")
    measured = p.measured_flops
    line = f"{human_flops_per_s(measured)} (best of {len(p.flops_samples)} {p.matmul_n}x{p.matmul_n} matmuls)"
    problems, rules = [], []
    if p.datasheet_flops:
        share = measured / p.datasheet_flops
        line += f", {percent(share)} of the spec's {human_flops_per_s(p.datasheet_flops)}"
        rules.append(f"{percent(SPEC_FLOOR)} to {percent(PEAK_SLACK)} of the datasheet's dense peak")
        if share > PEAK_SLACK:
            problems.append("above the datasheet, so the spec row does not fit this board")
        elif share < SPEC_FLOOR:
            problems.append("under a quarter of the datasheet: a throttled, shared or mismatched board")
    if run is not None:
        line += f"; the run's best pass reached {human_flops_per_s(run.flops_per_s)}"
        rules.append(f"at least the run's best pass / {PEAK_SLACK:g}: {ROOFLINE_RULE}")
        if run.flops_per_s > PEAK_SLACK * measured:
            problems.append("a pass of the run beat it, so the figure is too low (taken while the machine was busy?)")
    elif float32_flops is not None and p.dtype != "float32":
        rules.append(f"at least {OTHER_DTYPE_FLOOR:g} x float32 (a software bfloat16 path measured 1/600)")
        if measured < OTHER_DTYPE_FLOOR * float32_flops:
            problems.append(f"under {OTHER_DTYPE_FLOOR:g} x float32's {human_flops_per_s(float32_flops)}: broken")
    if not rules:
        rules.append("a finite, positive figure (no run and no datasheet to bound it)")
    line += (f": {'; '.join(problems)}" if problems else "") + f" (threshold: {'; '.join(rules)})"
    return verdict(not problems, name, line, measured, "FLOP/s")


def bandwidth_checks(target: str, p: DeviceProfile, run: RunFloor | None = None) -> list[Check]:
    """The copy and the read-only stream: each measured, under any datasheet or NVML peak, over what a pass of the
    doctor's run moved per second (the read at least that, the copy at least half), and the read figure plausible
    beside the copy."""
    peak, peak_source = p.datasheet_bandwidth_bytes_per_s, p.datasheet_bandwidth_source
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
        problems, rules = [], []
        if what == "read" and p.measured_bandwidth_bytes_per_s:
            ratio = measured / p.measured_bandwidth_bytes_per_s
            line += f", {ratio:.2f}x the copy"
            rules.append(f"{READ_OVER_COPY[0]:g}-{READ_OVER_COPY[1]:g}x the copy (0.98-1.22x on the project's CPUs)")
            if not READ_OVER_COPY[0] <= ratio <= READ_OVER_COPY[1]:
                problems.append(f"outside {READ_OVER_COPY}, not a memory stream")
        if peak is not None:
            line += f", {percent(measured / peak)} of the {peak_source} peak {human_bandwidth(peak)}"
            rules.append(f"at most {percent(PEAK_SLACK)} of the {peak_source} peak")
            if measured > PEAK_SLACK * peak:
                problems.append(f"above the {peak_source} peak")
        if run is not None:
            share = 1 / PEAK_SLACK if what == "read" else COPY_FLOOR_OF_RUN
            line += f"; the run's best pass moved {human_bandwidth(run.bytes_per_s)}"
            rules.append(f"at least {share:.2g} x the run's best pass: {ROOFLINE_RULE}")
            if measured < share * run.bytes_per_s:
                problems.append("a pass of the run moved bytes faster, so the figure is too low (a busy machine?)")
        if not rules:
            rules.append("a finite, positive figure (no run and no peak to bound it)")
        line += (f": {'; '.join(problems)}" if problems else "") + f" (threshold: {'; '.join(rules)})"
        checks.append(verdict(not problems, name, line, measured, "B/s"))
    return checks


def spec_check(figures: DeviceFigures) -> Check:
    name = f"{figures.device} spec"
    row, sheet = figures.spec_row, figures.spec_bandwidth_bytes_per_s
    if row is None or sheet is None:
        return Check(name, "SKIP", f"no row for '{figures.name}' in the spec table: its peak FLOP/s are measured")
    nvml = next(
        (p.datasheet_bandwidth_bytes_per_s for p in figures.profiles if p.datasheet_bandwidth_source == "nvml"), None
    )
    line = f"'{figures.name}' is the table's {row} (datasheet bandwidth {human_bandwidth(sheet)})"
    if nvml is None:
        return verdict(True, name, line + "; NVML gave no bandwidth to compare", row)
    agree = abs(nvml / sheet - 1) <= PEAK_SLACK - 1
    line += f"; NVML's {human_bandwidth(nvml)} " + ("agrees" if agree else "disagrees by more than 10 %")
    return verdict(agree, name, line, row)


def run_floor_for(floors: tuple[RunFloor, ...], device: str, dtype: str) -> RunFloor | None:
    return next((f for f in floors if f.device == device and f.dtype == dtype), None)


def device_checks(figures: DeviceFigures, floors: tuple[RunFloor, ...] = ()) -> list[Check]:
    checks = [spec_check(figures)] if figures.device != "cpu" else []
    checks += [
        verdict(False, f"{figures.device} {failure.split(':')[0]} figures", failure) for failure in figures.failures
    ]
    float32 = next((p.measured_flops for p in figures.profiles if p.dtype == "float32"), None)
    checks += [
        matmul_check(figures.device, p, run_floor_for(floors, figures.device, p.dtype), float32)
        for p in figures.profiles
    ]
    if figures.profiles:  # one dtype's bandwidths speak for the device: the copy and the sum are float32 at any dtype
        first = figures.profiles[0]
        run = next((f for f in floors if f.device == figures.device), None)  # bytes/s whatever the run's dtype
        checks += bandwidth_checks(figures.device, first, run)
    return checks


def machine_checks(
    env: Environment, devices: tuple[DeviceFigures, ...], floors: tuple[RunFloor, ...] = ()
) -> list[Check]:
    checks = [versions_check(env), cuda_check(env), nvml_check(env)]
    for figures in devices:
        checks += device_checks(figures, floors)
    return checks
