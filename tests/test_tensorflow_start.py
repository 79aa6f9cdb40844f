"""TensorFlow's C++ start-up lines are held back on a healthy start (fast_dqn/tensorflow_start.py).

The context manager is driven here by writes to file descriptor 2, as TensorFlow's C++ code
makes them; tests/test_cli.py checks a real run's first lines.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fast_dqn import tensorflow_start
from fast_dqn.tensorflow_start import TF_LOGS_ENV, gpu_trouble, quiet_tensorflow_start
from tests.cli_runs import REPO, TINY
from tests.fakes import write_checkpoint, write_run_dir

# What `import tensorflow` and the GPU listing printed on the development machine (no GPU).
CPU_MACHINE_START = """\
WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
I0000 00:00:1795355408.443259    3774 port.cc:153] oneDNN custom operations are on. You may \
see slightly different numerical results due to floating-point round-off errors.
I0000 00:00:1795355408.444407    3774 cudart_stub.cc:31] Could not find cuda drivers on your \
machine, GPU will not be used.
E0000 00:00:1795355412.353948    3774 cuda_platform.cc:52] failed call to cuInit: INTERNAL: \
CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)
"""
BROKEN_CUDA_START = """\
W0000 00:00:1795355408.444407    3774 gpu_device.cc:2344] Cannot dlopen some GPU libraries. \
Please make sure the missing libraries mentioned above are installed properly.
"""


@pytest.fixture(autouse=True)
def cpu_machine(monkeypatch):
    """No GPU visible and no NVIDIA driver, whatever machine runs the tests."""
    monkeypatch.delenv(TF_LOGS_ENV, raising=False)
    monkeypatch.setattr(tensorflow_start, "_gpu_visible", lambda: False)
    monkeypatch.setattr(tensorflow_start, "_NVIDIA_DEVICE", Path("/nonexistent/nvidiactl"))
    monkeypatch.setattr(tensorflow_start, "_started", False)  # as in a new process


def write_fd2(text: str) -> None:
    os.write(2, text.encode())


def test_healthy_cpu_start_is_quiet_and_stderr_is_restored(capfd):
    with quiet_tensorflow_start():
        write_fd2(CPU_MACHINE_START)
    write_fd2("after\n")
    assert capfd.readouterr().err == "after\n"


def test_failed_import_shows_what_was_captured(capfd):
    with pytest.raises(ImportError, match="no tensorflow"):
        with quiet_tensorflow_start():
            write_fd2("F0000 libtensorflow_framework.so.2: cannot open shared object file\n")
            raise ImportError("no tensorflow")
    err = capfd.readouterr().err
    assert "cannot open shared object file" in err
    write_fd2("after\n")
    assert capfd.readouterr().err == "after\n"


def test_gpu_trouble_is_shown_with_a_note(capfd):
    with quiet_tensorflow_start():
        write_fd2(BROKEN_CUDA_START)
    err = capfd.readouterr().err
    assert "Cannot dlopen some GPU libraries" in err
    assert err.strip().splitlines()[-1].startswith("note: TensorFlow sees no GPU")
    assert TF_LOGS_ENV in err


def test_nvidia_machine_without_a_visible_gpu_is_reported(capfd, monkeypatch, tmp_path):
    device = tmp_path / "nvidiactl"
    device.touch()
    monkeypatch.setattr(tensorflow_start, "_NVIDIA_DEVICE", device)
    with quiet_tensorflow_start():
        write_fd2(CPU_MACHINE_START)
    err = capfd.readouterr().err
    assert "note: this machine has an NVIDIA GPU, but TensorFlow sees no GPU" in err


def test_the_note_comes_once_a_process_whatever_the_blocks(capfd, monkeypatch, tmp_path):
    """Regression (review of issue 44): on an NVIDIA machine whose TensorFlow sees no GPU,
    each module's block printed the note again (6 notes in one training run)."""
    device = tmp_path / "nvidiactl"
    device.touch()
    monkeypatch.setattr(tensorflow_start, "_NVIDIA_DEVICE", device)
    with quiet_tensorflow_start():
        write_fd2(CPU_MACHINE_START)
    for _ in range(5):
        with quiet_tensorflow_start():
            pass  # TensorFlow is imported already: nothing new to show
    assert capfd.readouterr().err.count("note: ") == 1


def test_visible_gpu_is_quiet(capfd, monkeypatch):
    monkeypatch.setattr(tensorflow_start, "_gpu_visible", lambda: True)
    with quiet_tensorflow_start():
        write_fd2(CPU_MACHINE_START)
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("setting", ["1", "true", "yes"])
def test_env_variable_leaves_tensorflow_lines_alone(capfd, monkeypatch, setting):
    monkeypatch.setenv(TF_LOGS_ENV, setting)
    with quiet_tensorflow_start():
        write_fd2(CPU_MACHINE_START)
    assert capfd.readouterr().err == CPU_MACHINE_START


@pytest.mark.parametrize("captured,nvidia_device,trouble", [
    (CPU_MACHINE_START, False, False),
    ("", False, False),
    (CPU_MACHINE_START, True, True),
    (BROKEN_CUDA_START, False, True),
    ("E0000 cuda_platform.cc:52] failed call to cuInit: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH "
     "(803)\n", False, True),
    ("E0000 cuda_diagnostics.cc] no CUDA-capable device is detected\n", False, False),
])
def test_gpu_trouble(captured, nvidia_device, trouble):
    assert gpu_trouble(captured, nvidia_device=nvidia_device) is trouble


@pytest.mark.slow  # starts a python process
def test_python_level_writes_are_held_back_too_in_a_real_process():
    """Outside pytest's capture sys.stderr writes to fd 2, as in a run (Python warnings)."""
    code = ("import os, sys\n"
            "from fast_dqn import tensorflow_start\n"
            "tensorflow_start._gpu_visible = lambda: False\n"
            "tensorflow_start._NVIDIA_DEVICE = tensorflow_start.Path('/nonexistent')\n"
            "with tensorflow_start.quiet_tensorflow_start():\n"
            "    os.write(2, b'I0000 port.cc] oneDNN custom operations are on\\n')\n"
            "    print('a Python warning', file=sys.stderr)\n"
            "print('after', file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if k != TF_LOGS_ENV}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd=Path(__file__).resolve().parents[1],
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "after\n"


# -- --device (issue 36) ------------------------------------------------------------------------

# Run in a child process before the command: reports CUDA_VISIBLE_DEVICES at the moment
# something imports TensorFlow, and ends the process there (nothing of TensorFlow is loaded).
WATCH_TENSORFLOW_IMPORT = """\
import os, sys
os.environ.pop("CUDA_VISIBLE_DEVICES", None)
class TensorFlowImportWatch:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            print("at TensorFlow's import:", os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
            os._exit(0)
        return None
sys.meta_path.insert(0, TensorFlowImportWatch())
"""


def command_in_child(command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return subprocess.run([sys.executable, "-c", WATCH_TENSORFLOW_IMPORT + command],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)


def play_run_dir(tmp_path: Path) -> Path:
    run_dir = write_run_dir(tmp_path / "played")
    write_checkpoint(run_dir, 1000)
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("command, device, hidden", [
    ("from fast_dqn.launch import main; main({flags}, 'dqn')", "cpu", "-1"),
    ("from fast_dqn.launch import main; main({flags}, 'fast_dqn')", "cpu", "-1"),
    ("from fast_dqn.launch import main; main({flags}, 'dqn')", "auto", "None"),
    ("from fast_dqn.play import main; main([{run_dir!r}, '--device={device}'])", "cpu", "-1"),
    ("from fast_dqn.benchmark import main; main(['--device={device}', '--skip-serial', "
     "'--workers', '4'])", "cpu", "-1"),
], ids=["serial", "fast", "serial-auto", "play", "benchmark"])
def test_device_cpu_hides_the_gpus_before_tensorflow_is_imported(tmp_path, command, device,
                                                                  hidden):
    """Regression (issue 36): there was no way to choose the device (`--device=cpu` was
    "unrecognized"). TensorFlow reads CUDA_VISIBLE_DEVICES once, when it starts: the
    variable must hide the GPUs by the time anything imports it."""
    run_dir = play_run_dir(tmp_path) if "play" in command else None
    flags = [*TINY, "--timesteps=800", f"--device={device}", f"--logdir={tmp_path / 'run'}"]
    result = command_in_child(command.format(flags=flags, run_dir=str(run_dir), device=device))
    assert result.stdout.splitlines()[-1:] == [f"at TensorFlow's import: {hidden}"], \
        result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("argv, prog", [
    (["run_fast_dqn.py", *TINY, "--timesteps=800", "--device=gpu"], "run_fast_dqn.py"),
    (["run_dqn.py", *TINY, "--timesteps=800", "--device=gpu"], "run_dqn.py"),
    (["-m", "fast_dqn.play", "{run_dir}", "--device=gpu"], "play"),
])
def test_device_gpu_without_a_gpu_is_one_line_and_exit_2(tmp_path, argv, prog):
    run_dir = play_run_dir(tmp_path)
    argv = [arg.format(run_dir=run_dir) for arg in argv]
    logdir = [f"--logdir={tmp_path / 'run'}"] if prog != "play" else []
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1"}  # no GPU, whatever the machine has
    result = subprocess.run([sys.executable, *argv, *logdir], capture_output=True, text=True,
                            env=env, cwd=REPO, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"{prog}: error: --device=gpu: TensorFlow sees no GPU here (CUDA_VISIBLE_DEVICES='-1' "
        "hides them); --device=auto or cpu trains on the CPU" + (" (see --help)"
                                                                 if prog == "play" else "")]
    assert result.stdout == ""
    assert not (tmp_path / "run").exists()


# /proc/cpuinfo's lines, shortened: an AMD EPYC host's (AVX-512 BF16, no AMX), a Sapphire
# Rapids host's (both) and an older host's (AVX-512 without either).
CPUINFO_FLAGS = {
    "epyc": "fpu vme sse2 avx2 avx512f avx512bw avx512_bf16 avx512vnni",
    "sapphire rapids": "fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8",
    "cascade lake": "fpu sse2 avx2 avx512f avx512bw avx512_vnni",
}


@pytest.mark.parametrize("host, noted", [("epyc", False), ("sapphire rapids", False),
                                         ("cascade lake", True)])
def test_a_cpu_without_bfloat16_units_is_named_in_one_line(tmp_path, host, noted):
    """Issue 45: where the host has neither AMX nor AVX-512 BF16, a --precision=bfloat16 run
    says so in one line (and runs anyway)."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {CPUINFO_FLAGS[host]}\n"
                       f"\nprocessor\t: 1\nflags\t\t: {CPUINFO_FLAGS[host]}\n")
    note = tensorflow_start.cpu_bfloat16_note(cpuinfo)
    if noted:
        assert note is not None and len(note.splitlines()) == 1
        assert "AMX" in note and "AVX-512 BF16" in note and "--precision=bfloat16" in note
    else:
        assert note is None


def test_no_readable_cpuinfo_gives_no_bfloat16_note(tmp_path):
    assert tensorflow_start.cpu_bfloat16_note(tmp_path / "absent") is None
    (tmp_path / "no_flags").write_text("processor\t: 0\n")
    assert tensorflow_start.cpu_bfloat16_note(tmp_path / "no_flags") is None
