"""Whether a node's NVIDIA driver and GPUs can run a framework's build, and which install would.

Two sets of answers meet here. The node's (`Node`): its driver, the newest CUDA that driver runs
and each GPU's compute capability, read from nvidia-smi (cluster/nvidia_smi.py `read_node`). The
build's (`Build`): the framework's version, the CUDA it was built with, the GPU architectures it
carries kernels for, its NCCL and the NCCL files mapped in its process, Horovod's GPU operations,
asked of the framework in its own environment (the runtimes' `build_answers`). `problems` says in
full sentences why they do not fit; `notes` what fits only in part. A rank refuses its cell on a
problem before its first step (train/devices.py `check_stack`); workflow/scripts/check_stack.py
asks every installed environment on a node and prints a verdict per framework and GPU.

The rules are NVIDIA's (docs.nvidia.com/deploy/cuda-compatibility; the CUDA C++ Programming
Guide's binary and PTX compatibility):

- a build of CUDA X.y runs on a driver whose CUDA version is X.z or newer; with z < y it runs
  under minor-version compatibility (a note, not a refusal), but PTX of the newer toolkit cannot
  be JIT-compiled there;
- a GPU of compute capability M.m runs SASS `sm_Mn` of the same major M with n <= m, or PTX
  `compute_XY` with X.Y <= M.m (JIT-compiled at the first run); family-specific `sm_90a`
  entries run only on exactly that capability.

No framework is imported here.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import asdict, dataclass, field

from scalebench.environments import Environment

DISPLAY = {"torch": "torch", "tensorflow": "TensorFlow"}

# NVIDIA's minimum driver of each CUDA major: a build of that major runs from it on, through
# minor-version compatibility (CUDA Toolkit release notes, table "CUDA Toolkit and Minimum Required
# Driver Version for CUDA Minor Version Compatibility"; docs.nvidia.com/deploy/cuda-compatibility).
MINIMUM_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}


@dataclass(frozen=True)
class Install:
    """One way this project's ./install.sh puts a framework build in place, as published."""

    framework: str
    version: str  # the pin of envs/<framework>.yaml
    command: str
    cuda: str  # the CUDA it was built with
    architectures: tuple[str, ...]  # its kernels: SASS sm_XY, PTX compute_XY
    driver_branch: str  # the driver branch that ships with its CUDA (preferred under minor compatibility)

    def describe(self) -> str:
        return (
            f"`{self.command}` ({DISPLAY[self.framework]} {self.version} built with CUDA {self.cuda}, kernels "
            f"{self.architectures[0]} to {self.architectures[-1]}, for drivers from "
            f"{MINIMUM_DRIVER[numbers(self.cuda)[0]]}, {self.driver_branch} or newer preferred)"
        )


# For advice only: which install to name where the build found does not fit a node. The check
# itself reads the build that is installed (its own answers), never this table, so a table gone
# stale misnames an install but never passes or refuses a build. Sources: PyTorch's CUDA support
# matrix (pytorch/pytorch#178665: CUDA 12.8 builds removed from release 2.12 on, 12.6 kept as legacy
# for the older GPUs, 13.0 published to PyPI; #190355: 2.14 ships 12.6, 13.0 and 13.2), the x86_64
# wheels' TORCH_CUDA_ARCH_LIST in pytorch/.ci/manywheel/build_cuda.sh (which changes between
# releases), the cu130 list as a real torch 2.11+cu130 reports it
# (tests/fixtures/gpu-stack/README.md); TensorFlow 2.21.0's own tf.sysconfig.get_build_info()
# (PyPI's wheel is that one CUDA 12 build; `and-cuda` adds NVIDIA's CUDA 12 libraries). The
# versions are envs/*.yaml's pins (a test holds them together).
TORCH_MODERN = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
INSTALLS = (
    Install(
        "torch",
        "2.13.0",
        "SCALEBENCH_TORCH_CUDA=cu126 ./install.sh",
        "12.6",
        ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"),
        "560",
    ),
    Install("torch", "2.13.0", "./install.sh", "13.0", TORCH_MODERN, "580"),  # PyPI's default, or cu130
    Install(
        "tensorflow",
        "2.21.0",
        "SCALEBENCH_TF_CUDA=and-cuda ./install.sh",
        "12.5.1",
        ("sm_60", "sm_70", "sm_80", "sm_89", "compute_90"),
        "555",
    ),
)

NATIVE, MINOR, TOO_OLD, UNKNOWN = "native", "minor", "too old", "unknown"  # how a driver runs a build's CUDA
# why a GPU runs no kernel of a build
NO_KERNEL, PTX_UNDER_MINOR, CAPABILITY_UNKNOWN = "no kernel", "PTX under minor-version compatibility", "unknown"


def numbers(version: str) -> tuple[int, ...]:
    """'580.159.04' -> (580, 159, 4); '12.5.1' -> (12, 5, 1)."""
    return tuple(int(part) for part in re.findall(r"\d+", version))


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it: its index, model and compute capability (None: not reported)."""

    index: int
    name: str
    capability: tuple[int, int] | None = None

    def describe(self) -> str:
        capability = "compute capability unknown" if self.capability is None else f"compute capability {self.cc}"
        return f"GPU {self.index} {self.name} ({capability})"

    @property
    def cc(self) -> str:
        return "?" if self.capability is None else f"{self.capability[0]}.{self.capability[1]}"


@dataclass(frozen=True)
class Node:
    """A node's answers: its driver, the newest CUDA it runs (nvidia-smi's "CUDA Version") and its
    GPUs; `reason` says why an answer is missing (no nvidia-smi, no GPU, no -q)."""

    driver: str | None = None
    cuda: str | None = None
    gpus: tuple[Gpu, ...] = ()
    reason: str = ""

    def describe_driver(self) -> str:
        if self.driver is None:
            return "of unknown version"
        return f"{self.driver} (CUDA {self.cuda or 'version unknown'})"

    def restricted(self, ids: list[str] | None) -> Node:
        """The GPUs of a process that sees only `ids` (CUDA_VISIBLE_DEVICES's, as indices); all of them
        where it names none, or names them otherwise (UUIDs) or names none of the listed."""
        if not ids or not all(value.isdigit() for value in ids):
            return self
        chosen = tuple(gpu for gpu in self.gpus if str(gpu.index) in ids)
        return Node(self.driver, self.cuda, chosen, self.reason) if chosen else self


def describe_gpus(gpus: tuple[Gpu, ...]) -> str:
    """'GPU 0 Tesla V100-SXM2-32GB (compute capability 7.0)'; 'GPUs 0,1,2,3 NVIDIA H100 (...)' for a model's several."""
    groups: dict[tuple[str, str], list[int]] = {}
    for gpu in gpus:
        groups.setdefault((gpu.name, gpu.cc), []).append(gpu.index)
    parts = []
    for (name, cc), indices in groups.items():
        which = f"GPU {indices[0]}" if len(indices) == 1 else f"GPUs {','.join(map(str, indices))}"
        capability = "compute capability unknown" if cc == "?" else f"compute capability {cc}"
        parts.append(f"{which} {name} ({capability})")
    return " and ".join(parts)


@dataclass(frozen=True)
class Horovod:
    """Horovod's GPU operations as its binding for the framework reports them; `problem` says why it
    could not be asked (not installed, no extension for the framework). `refusal`: the words a GPU
    cell of backend horovod is refused with (train/horovod_common.py check_gpu_reductions), if any."""

    version: str | None = None
    nccl_built: bool = False
    cuda_built: bool = False
    refusal: str | None = None
    problem: str = ""


@dataclass(frozen=True)
class Build:
    """A framework build's answers, asked of the framework in its own environment. cuda: the CUDA it
    was built with (None: a CPU build); architectures: the kernels it carries; nccl: the NCCL version
    it reports; nccl_files: the libnccl files mapped into its process (observed, not copied);
    gpus_seen: the GPUs it sees (None: not asked); cuda_libraries: NVIDIA's CUDA packages in its
    environment (TensorFlow's `and-cuda`); horovod: Horovod's GPU operations (None: not asked)."""

    framework: str
    version: str
    cuda: str | None
    architectures: tuple[str, ...] = ()
    nccl: str | None = None
    nccl_files: tuple[str, ...] = ()
    gpus_seen: int | None = None
    cuda_libraries: tuple[str, ...] = ()
    horovod: Horovod | None = None

    @property
    def label(self) -> str:
        return f"{DISPLAY[self.framework]} {self.version}"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Build:
        horovod = data.get("horovod")
        return cls(
            framework=data["framework"],
            version=data["version"],
            cuda=data.get("cuda"),
            architectures=tuple(data.get("architectures") or ()),
            nccl=data.get("nccl"),
            nccl_files=tuple(data.get("nccl_files") or ()),
            gpus_seen=data.get("gpus_seen"),
            cuda_libraries=tuple(data.get("cuda_libraries") or ()),
            horovod=Horovod(**horovod) if horovod is not None else None,
        )


ARCHITECTURE = re.compile(r"(sm|compute)_(\d+)(\d)([af]?)")


def kernel_for(architectures: tuple[str, ...], capability: tuple[int, int]) -> str | None:
    """The entry of `architectures` a GPU of `capability` runs: the nearest SASS of its major at or
    below its minor, else the newest PTX at or below its capability (JIT); None where none runs it.
    sm_90a-style entries are family-specific: exactly that capability; sm_100f-style run like SASS."""
    sass, ptx = [], []
    for entry in architectures:
        found = ARCHITECTURE.fullmatch(entry)
        if not found:
            continue
        kind, version, suffix = found[1], (int(found[2]), int(found[3])), found[4]
        if suffix == "a" and version != capability:
            continue
        if kind == "sm" and version[0] == capability[0] and version[1] <= capability[1]:
            sass.append((version, entry))
        elif kind == "compute" and version <= capability:
            ptx.append((version, entry))
    return max(sass or ptx)[1] if sass or ptx else None


def is_ptx(entry: str) -> bool:
    return entry.startswith("compute_")


def cuda_fit(build_cuda: str, node: Node) -> str:
    """How the node's driver runs a build of CUDA `build_cuda`: NATIVE, MINOR (minor-version
    compatibility), TOO_OLD, or UNKNOWN (nvidia-smi gave no CUDA version)."""
    if node.cuda is None:
        return UNKNOWN
    built, runs = numbers(build_cuda)[:2], numbers(node.cuda)[:2]
    if built[0] > runs[0]:
        return TOO_OLD
    if built[0] < runs[0] or built[1] <= runs[1]:
        return NATIVE
    minimum = MINIMUM_DRIVER.get(built[0])
    if minimum and node.driver and numbers(node.driver) < numbers(minimum):
        return TOO_OLD
    return MINOR


def gpu_fit(architectures: tuple[str, ...], cuda: str, node: Node, gpu: Gpu) -> tuple[str | None, str]:
    """(the kernel entry GPU `gpu` runs, '') or (None, why it runs none), on this node's driver."""
    if gpu.capability is None:
        return None, CAPABILITY_UNKNOWN
    entry = kernel_for(architectures, gpu.capability)
    if entry is None:
        return None, NO_KERNEL
    if is_ptx(entry) and cuda_fit(cuda, node) == MINOR:  # the older driver cannot compile newer PTX
        return None, PTX_UNDER_MINOR
    return entry, ""


def fits(install: Install, node: Node) -> bool:
    """Whether `install`'s build runs on the node: its CUDA on the driver, a kernel for every GPU
    whose capability is known."""
    if cuda_fit(install.cuda, node) == TOO_OLD:
        return False
    return all(
        gpu_fit(install.architectures, install.cuda, node, gpu)[1] in ("", CAPABILITY_UNKNOWN) for gpu in node.gpus
    )


def fitting_install(framework: str, node: Node) -> Install | None:
    """The newest of this project's installs of `framework` whose CUDA the node's driver runs and
    whose architectures hold every GPU's; None where none does."""
    fitting = [install for install in INSTALLS if install.framework == framework and fits(install, node)]
    return max(fitting, key=lambda install: numbers(install.cuda), default=None)


def install_advice(framework: str, node: Node) -> str:
    """The install that fits the node, said as the end of a sentence; or plainly that none does and why."""
    fit = fitting_install(framework, node)
    if fit is not None:
        minor = cuda_fit(fit.cuda, node) == MINOR
        how = " (on this driver under CUDA minor-version compatibility)" if minor else ""
        return f"the {DISPLAY[framework]} install that runs here{how} is {fit.describe()}"
    candidates = [install for install in INSTALLS if install.framework == framework]
    version = candidates[0].version if candidates else "?"
    whys, driver_too_old = [], False
    for install in candidates:
        if cuda_fit(install.cuda, node) == TOO_OLD:
            driver_too_old = True
            needed = MINIMUM_DRIVER.get(numbers(install.cuda)[0], "newer")
            whys.append(f"`{install.command}` (CUDA {install.cuda}) needs driver {needed} or newer")
        else:
            lacking = [
                gpu
                for gpu in node.gpus
                if gpu_fit(install.architectures, install.cuda, node, gpu)[1] in (NO_KERNEL, PTX_UNDER_MINOR)
            ]
            whys.append(f"`{install.command}` (CUDA {install.cuda}) has no kernel {describe_gpus(tuple(lacking))} runs")
    remedy = "upgrade the node's driver" if driver_too_old else "run the study on other GPUs"
    return (
        f"no {DISPLAY[framework]} {version} build this project installs runs on driver {node.describe_driver()} "
        f"with {describe_gpus(node.gpus)} ({'; '.join(whys)}): {remedy}, or leave {framework} out of the "
        "study (matrix.frameworks)"
    )


def problems(node: Node, build: Build) -> list[str]:
    """Why `build` cannot train on `node`'s GPUs, each a full sentence naming the driver, the GPU, the
    build and the install that fits; [] where it can, or where the node lists no GPU."""
    return gpu_problems(node, build) + library_problems(node, build)


def gpu_problems(node: Node, build: Build) -> list[str]:
    """The driver against the build's CUDA, each GPU against its architectures, a build that sees none."""
    if not node.gpus:
        return []
    driver, gpus = node.describe_driver(), describe_gpus(node.gpus)
    advice = install_advice(build.framework, node)
    if build.cuda is None:
        return [f"{build.label} is a CPU build, but this node has {gpus} with driver {driver}: {advice}."]
    found = []
    if cuda_fit(build.cuda, node) == TOO_OLD:
        minimum = MINIMUM_DRIVER.get(numbers(build.cuda)[0], "a newer one")
        found.append(
            f"driver {driver} runs CUDA up to {node.cuda}, but {build.label} was built with CUDA {build.cuda}, "
            f"which needs driver {minimum} or newer, so it sees no GPU on this node ({gpus}): {advice}."
        )
    for gpu in node.gpus:
        why = gpu_fit(build.architectures, build.cuda, node, gpu)[1]
        if why == NO_KERNEL:
            major, minor = gpu.capability
            sass = f"sm_{major}0" if minor == 0 else f"sm_{major}0 to sm_{major}{minor}"
            found.append(
                f"{gpu.describe()} has no kernel in {build.label} (CUDA {build.cuda}), whose architectures are "
                f"{' '.join(build.architectures) or 'none'} (no {sass}, no PTX at or below compute_{major}{minor}), "
                f"so its first kernel would fail (no kernel image is available) under driver {driver}: {advice}."
            )
        elif why == PTX_UNDER_MINOR:
            ptx = kernel_for(build.architectures, gpu.capability)
            found.append(
                f"{gpu.describe()} would run {build.label} only by JIT-compiling its {ptx} PTX of CUDA "
                f"{build.cuda}, which driver {driver} cannot do under minor-version compatibility "
                f"(unsupported PTX version): {advice}."
            )
    if not found and build.gpus_seen == 0:
        found.append(
            f"{build.label} (CUDA {build.cuda}) sees none of this node's {gpus} under driver {driver}, though "
            f"its CUDA and architectures fit them: {unseen_advice(build)}."
        )
    return found


def library_problems(node: Node, build: Build) -> list[str]:
    """Two NCCL libraries mapped in one process: the framework's and another (Horovod's, the loader's)."""
    distinct = sorted(set(build.nccl_files))
    if not node.gpus or len(distinct) < 2:
        return []
    return [
        f"{len(distinct)} NCCL libraries are loaded in one {build.label} process ({', '.join(distinct)}) on "
        f"this node ({describe_gpus(node.gpus)}, driver {node.describe_driver()}): the framework and Horovod "
        "must share one; rebuild Horovod against the framework's (HOROVOD_NCCL_HOME, tools/build_horovod.sh) "
        "or take the other off LD_LIBRARY_PATH."
    ]


def unseen_advice(build: Build) -> str:
    """What to do where a build that fits sees no GPU: TensorFlow loads CUDA's libraries at run time."""
    if build.framework == "tensorflow" and not build.cuda_libraries:
        return (
            "its environment holds none of NVIDIA's CUDA 12 libraries (cuDNN, cuBLAS); install them with "
            "`SCALEBENCH_TF_CUDA=and-cuda ./install.sh`, or load the site's CUDA 12 and cuDNN 9 modules before "
            "the ranks start"
        )
    return "check CUDA_VISIBLE_DEVICES and the job's GPU request (the gres template, cluster.gpus_per_node)"


def notes(node: Node, build: Build) -> list[str]:
    """What fits only in part: minor-version compatibility, PTX compiled at the first run, what could
    not be checked (no driver version, no compute capability)."""
    if not node.gpus or build.cuda is None:
        return []
    found = []
    fit = cuda_fit(build.cuda, node)
    if fit == MINOR:
        found.append(
            f"{build.label} (CUDA {build.cuda}) runs on driver {node.describe_driver()} under CUDA minor-version "
            f"compatibility: a driver that runs CUDA {build.cuda} itself is preferred"
        )
    elif fit == UNKNOWN:
        found.append(
            f"driver {node.describe_driver()}: its CUDA version is unknown, so {build.label}'s CUDA "
            f"{build.cuda} was not checked against it"
        )
    for gpu in node.gpus:
        entry, why = gpu_fit(build.architectures, build.cuda, node, gpu)
        if why == CAPABILITY_UNKNOWN:
            found.append(
                f"{gpu.describe()}: nvidia-smi gave no compute capability, so {build.label}'s "
                "architectures were not checked against it"
            )
        elif entry is not None and is_ptx(entry):
            found.append(
                f"{gpu.describe()} runs {build.label}'s {entry} PTX, compiled by the driver at the first "
                "run (once, then cached)"
            )
    return found


def record(node: Node, build: Build | None, reason: str = "", unheeded: list[str] | None = None) -> dict:
    """run.json's gpu_stack (records/definitions.py GPU_STACK): the driver's CUDA, each GPU's
    capability, the build's architectures, what the check noted and the problems a rank that trained
    on the CPU did not refuse (`unheeded`); `reason` where the check did not run."""
    if build is None or not node.gpus:
        why = reason or node.reason or "nvidia-smi lists no GPU on this node"
        return {
            "driver_cuda": node.cuda,
            "capabilities": None,
            "architectures": None,
            "notes": [],
            "problems": [],
            "reason": why,
        }
    return {
        "driver_cuda": node.cuda,
        "capabilities": {str(gpu.index): gpu.cc for gpu in node.gpus},
        "architectures": list(build.architectures),
        "notes": notes(node, build),
        "problems": list(unheeded or []),
        "reason": None,
    }


@dataclass
class Report:
    """The check command's verdict lines and whether any found a mismatch."""

    lines: list[str] = field(default_factory=list)
    mismatch: bool = False


def horovod_line(build: Build) -> tuple[str, bool]:
    """Horovod's GPU operations for `build`'s framework, and whether GPU cells of backend horovod would be refused."""
    horovod = build.horovod
    if horovod is None:
        return f"{build.label}: Horovod not asked", False
    if horovod.problem:
        return f"{build.label}: Horovod: {horovod.problem}", False
    operations = f"NCCL {'yes' if horovod.nccl_built else 'no'}, CUDA {'yes' if horovod.cuda_built else 'no'}"
    line = f"{build.label}: Horovod {horovod.version}: GPU operations {operations}"
    if horovod.refusal:
        return f"{line}: MISMATCH: GPU cells of backend horovod are refused: {horovod.refusal}", True
    return line, False


def report(node: Node, builds: list[Build], unasked: dict[str, str] | None = None) -> Report:
    """One verdict line per framework and GPU (after the node's), then the framework's NCCL and
    Horovod's GPU operations; `unasked`: frameworks whose environment gave no answers, with why."""
    if not node.gpus:
        why = node.reason or "nvidia-smi lists no GPU on this node"
        return Report([f"node: no GPU to check ({why}): run this on a GPU node, e.g. under srun --gres=gpu:1"])
    result = Report([f"node: driver {node.describe_driver()}, {describe_gpus(node.gpus)}"])
    if not builds and not unasked:
        result.lines.append("MISMATCH: no framework's environment is installed beside this pipeline (./install.sh)")
        result.mismatch = True
    for framework, why in (unasked or {}).items():
        result.lines.append(f"{DISPLAY[framework]}: MISMATCH: its environment gave no answers: {why}")
        result.mismatch = True
    for build in builds:
        cuda = f"CUDA {build.cuda}" if build.cuda else "a CPU build"
        for gpu in node.gpus:
            one = Node(node.driver, node.cuda, (gpu,), node.reason)
            found = gpu_problems(one, build)
            said = f"{build.label} ({cuda}) on {gpu.describe()}: "
            if found:
                result.lines.append(said + "MISMATCH: " + " ".join(found))
            else:
                result.lines.append(said + "ok" + "".join(f"; note: {note}" for note in notes(one, build)))
            result.mismatch |= bool(found)
        nccl = f"NCCL {build.nccl}" if build.nccl else "no NCCL reported"
        files = ", ".join(sorted(set(build.nccl_files))) or "no libnccl mapped"
        doubled = library_problems(node, build)
        result.lines.append(f"{build.label}: {nccl} ({files})" + "".join(f": MISMATCH: {s}" for s in doubled))
        line, refused = horovod_line(build)
        result.lines.append(line)
        result.mismatch |= bool(doubled) or refused
    return result


def ask_build(environment: Environment, script: str, timeout: float = 300) -> tuple[Build | None, str]:
    """(`environment`'s build answers, '') or (None, why it gave none): `script --build-answers
    FRAMEWORK` (workflow/scripts/check_stack.py) run with its Python, as its ranks run."""
    command = [*environment.command, script, "--build-answers", environment.framework]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as error:
        return None, f"{shlex.join(command)} did not run: {error}"
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"{shlex.join(command)} failed (exit {done.returncode}): {last}"
    try:
        return Build.from_json(json.loads(done.stdout.strip().splitlines()[-1])), ""
    except (ValueError, IndexError, KeyError, TypeError) as error:
        return None, f"{shlex.join(command)} answered no build ({error}): {done.stdout.strip()[-200:]!r}"
