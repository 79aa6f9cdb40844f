"""Starting TensorFlow: the device it computes on, and a start that keeps its C++ lines back.

`select_device` applies `--device` before TensorFlow is imported, since TensorFlow reads
CUDA_VISIBLE_DEVICES once, when it first looks; `configure_device` sets up the chosen device
once TensorFlow is loaded. Importing TensorFlow on a machine without a GPU prints lines to
stderr from C++ (absl's preamble, the oneDNN notice, "Could not find cuda drivers") before its
logging is set up, so TF_CPP_MIN_LOG_LEVEL cannot silence them, and they would be a new user's
first read. The import and the GPU listing run with fd 2 captured, shown only when the import
fails or no GPU is visible and the lines name a GPU problem other than "no NVIDIA driver" (or
the machine has an NVIDIA device). `FAST_DQN_TF_LOGS=1` leaves them alone.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterator

TF_LOGS_ENV = "FAST_DQN_TF_LOGS"
GPU_MASK_ENV = "CUDA_VISIBLE_DEVICES"
NO_GPUS = "-1"  # a CUDA_VISIBLE_DEVICES that names no GPU: CUDA then sees none

# Words of a captured line that concern the GPU, and the lines among those that only say that
# this machine has no NVIDIA driver or device: a CPU machine's normal start.
_GPU_WORDS = ("cuda", "gpu", "cudnn", "cublas", "cufft", "cusolver", "cusparse", "nccl",
              "tensorrt", "dlopen", "libcu", "nvidia", "ptxas")
_NO_GPU_HERE = ("could not find cuda drivers", "cuda_error_no_device",
                "no cuda-capable device is detected")
_NVIDIA_DEVICE = Path("/dev/nvidiactl")  # present where an NVIDIA driver runs a GPU


def tensorflow_logs_wanted() -> bool:
    """True when the user asked to see TensorFlow's own start-up lines (FAST_DQN_TF_LOGS=1)."""
    return os.environ.get(TF_LOGS_ENV, "").strip().lower() not in ("", "0", "false", "no")


# TensorFlow's start (its import, once a process) has been checked and shown if need be.
_started = False


@contextlib.contextmanager
def quiet_tensorflow_start() -> Iterator[None]:
    """Runs the block (which imports TensorFlow) with fd 2 captured, then lists the GPUs;
    the captured lines are shown only as the module docstring says. Every module that
    imports TensorFlow does so in such a block; only the first imports it, so the later ones
    only run their block."""
    global _started
    if tensorflow_logs_wanted() or _started:
        yield
        return
    # Keeps TensorFlow's later INFO and WARNING lines out too (its logging reads this once).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    capture = _Fd2Capture()
    try:
        with capture:
            yield
            gpu_visible = _gpu_visible()
    except BaseException:
        _show(capture.text)
        raise
    _started = True
    nvidia_device = _NVIDIA_DEVICE.exists()
    if not gpu_visible and gpu_trouble(capture.text, nvidia_device=nvidia_device):
        _show(capture.text)
        _show(_no_gpu_note(nvidia_device))


def select_device(device: str) -> None:
    """Applies `--device` before TensorFlow computes anything: cpu hides the GPUs (by
    CUDA_VISIBLE_DEVICES before the import, by TensorFlow's visible devices after it); gpu
    checks that TensorFlow sees one; auto does nothing.

    Raises:
        ValueError: gpu without a GPU, or cpu once TensorFlow computes on a GPU. One line.
    """
    if device == "cpu":
        _hide_gpus()
    elif device == "gpu":
        with quiet_tensorflow_start():
            import tensorflow as tf
        if not tf.config.list_physical_devices("GPU"):
            raise ValueError(f"--device=gpu: TensorFlow sees no GPU here ({_why_no_gpu()}); "
                             "--device=auto or cpu trains on the CPU")


def configure_device(deterministic_cpu: bool = True, activity: str = "training") -> str:
    """Picks the device and returns one line that names it ("<activity> on GPU: ...").

    GPUs get memory growth so that several runs of a sweep can share one card. On the CPU,
    ops are made deterministic so that a seed fixes a run bit for bit.
    """
    with quiet_tensorflow_start():
        import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:
            pass  # already initialized: the setting is fixed for this process
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return f"{activity} on GPU: {details.get('device_name', gpus[0].name)}"
    if deterministic_cpu:
        tf.config.experimental.enable_op_determinism()
    return f"{activity} on CPU ({os.cpu_count()} cores; no GPU visible to TensorFlow)"


# The x86 instruction sets that compute bfloat16 products in hardware, as /proc/cpuinfo's
# flags name them: Intel's AMX tiles and AVX-512 BF16 (on Intel and AMD CPUs).
CPU_BFLOAT16_FLAGS = ("amx_bf16", "avx512_bf16")


def cpu_bfloat16_note(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """One line for a `--precision=bfloat16` run on a CPU that has none of
    CPU_BFLOAT16_FLAGS, whose bfloat16 products then run without bfloat16 instructions;
    None where it has one or the flags cannot be read (not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), None)
    if flags is None or set(CPU_BFLOAT16_FLAGS) & set(flags):
        return None
    return ("note: this CPU has no bfloat16 units (neither AMX nor AVX-512 BF16): "
            "--precision=bfloat16 runs without bfloat16 instructions here, and may be slower "
            "than float32")


def _hide_gpus() -> None:
    tf = sys.modules.get("tensorflow")
    if tf is None:
        os.environ[GPU_MASK_ENV] = NO_GPUS
        return
    try:
        tf.config.set_visible_devices([], "GPU")
    except RuntimeError:  # the runtime has started: its devices are fixed
        if tf.config.list_logical_devices("GPU"):
            raise ValueError("--device=cpu: TensorFlow already computes on a GPU in this "
                             f"process; start a new one (or set {GPU_MASK_ENV}={NO_GPUS})"
                             ) from None


def _why_no_gpu() -> str:
    mask = os.environ.get(GPU_MASK_ENV)
    if mask is not None and mask.strip() in ("", NO_GPUS):
        return f"{GPU_MASK_ENV}={mask.strip()!r} hides them"
    if not _NVIDIA_DEVICE.exists():
        return "no NVIDIA driver is running"
    return ("its CUDA libraries may be missing: pip install tensorflow[and-cuda]==2.21.0; "
            f"{TF_LOGS_ENV}=1 shows why")


def _no_gpu_note(nvidia_device: bool) -> str:
    why = "this machine has an NVIDIA GPU, but " if nvidia_device else ""
    return (f"note: {why}TensorFlow sees no GPU; its start-up lines are above "
            f"({TF_LOGS_ENV}=1 shows all of them; pip install tensorflow[and-cuda]==2.21.0 "
            "installs its CUDA libraries)")


def gpu_trouble(captured: str, *, nvidia_device: bool) -> bool:
    """Whether TensorFlow's start-up lines, on a start without a visible GPU, show a problem.

    Args:
        captured: what TensorFlow printed to stderr while it was imported and listed GPUs.
        nvidia_device: whether the machine has an NVIDIA GPU driver (so a GPU was expected).
    """
    if nvidia_device:
        return True
    return any(_about_gpu(line) and not _no_gpu_here(line)
               for line in captured.lower().splitlines())


def _about_gpu(line: str) -> bool:
    return any(word in line for word in _GPU_WORDS)


def _no_gpu_here(line: str) -> bool:
    # cuInit fails with 303 when TensorFlow's stub finds no driver library at all.
    return any(text in line for text in _NO_GPU_HERE) or ("cuinit" in line and "(303)" in line)


def _gpu_visible() -> bool:
    tf = sys.modules.get("tensorflow")
    return tf is not None and bool(tf.config.list_physical_devices("GPU"))


def _show(text: str) -> None:
    if text:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()


class _Fd2Capture:
    """Points fd 2 (below sys.stderr, so C++ writes too) at a temporary file; `text` holds
    what was written. Where fd 2 cannot be duplicated, nothing is captured."""

    def __init__(self) -> None:
        self.text = ""
        self._saved: int | None = None
        self._file: IO[bytes] | None = None

    def __enter__(self) -> "_Fd2Capture":
        _flush_stderr()
        try:
            self._saved = os.dup(2)
        except OSError:
            return self
        self._file = tempfile.TemporaryFile()
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._saved is None or self._file is None:
            return
        _flush_stderr()  # Python's own writes in the block belong to the capture
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._saved = None
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", errors="replace")
        self._file.close()
        self._file = None


def _flush_stderr() -> None:
    with contextlib.suppress(Exception):  # a replaced or closed sys.stderr
        sys.stderr.flush()
