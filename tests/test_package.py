"""The installable package: pyproject.toml's [project], its console scripts and
`python -m fast_dqn` (fast_dqn/cli.py).

The in-process tests hold each command to the call its run script or module makes. The slow
tests install the package with `pip install .` and `pip install -e .` into fresh virtualenvs
and call every entry point from a directory outside the checkout. To stay fast and offline, a
fresh venv sees this environment's installed distributions through a .pth file and pip runs
with --no-index: the package's declared dependencies must be met by what requirements.txt
installed here, or the install fails. The build is from a copy of the checkout, so that it
leaves no build/ or egg-info there.
"""

from __future__ import annotations

import os
import runpy
import shutil
import signal
import site
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from fast_dqn import benchmark, cli, launch, play
from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN
from tests.cli_runs import CPU_ONLY, REPO, Launch, assert_no_traceback, summary, wait_for

# The README's commands: console script -> (`python -m fast_dqn` command, a word its --help has).
CONSOLE_SCRIPTS = {"fast-dqn": ("train", "--workers"), "fast-dqn-serial": ("serial", "--lr"),
                   "fast-dqn-play": ("play", "RUN_DIR"),
                   "fast-dqn-benchmark": ("benchmark", "--trainer-stub-ms")}
INSTALL_SECONDS = 900  # pip builds a wheel: a minute on a busy 2-core machine
COMMAND_SECONDS = 300
INSTALLED_TINY_RUN = ["--game=breakout", "--replay-capacity=1000", "--replay-start=100",
            "--target-update=100", "--workers=2", "--evaluate=0", "--max-episode-steps=400",
            "--xla=off", "--seed=0"]


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def test_the_package_declares_exactly_the_pins_of_requirements_txt():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert sorted(project["dependencies"]) == sorted(requirement_lines(REPO / "requirements.txt"))
    assert all("==" in pin for pin in project["dependencies"])


def test_the_console_scripts_are_the_documented_commands():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == set(CONSOLE_SCRIPTS)


@pytest.mark.slow  # starts a python process
def test_import_fast_dqn_loads_no_tensorflow_until_load_builds_a_network(tmp_path):
    """`import fast_dqn` stays light, and `fast_dqn.load` refuses a bad run directory before
    it imports TensorFlow."""
    code = ("import sys, fast_dqn\n"
            "try:\n    fast_dqn.load(sys.argv[1])\n"
            "except ValueError as error:\n    print(error)\n"
            "assert 'tensorflow' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "missing")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"no run directory {tmp_path / 'missing'}\n"


# ------------------------------------------------------------------ the commands in-process


@pytest.fixture
def launch_calls(monkeypatch) -> list[tuple[list[str], str, bool]]:
    """launch.main replaced by a recorder that returns 7: the calls made to it."""
    calls = []

    def record(argv, algo, exiting=False):
        calls.append((list(argv), algo, exiting))
        return 7

    monkeypatch.setattr(launch, "main", record)
    return calls


@pytest.mark.parametrize("script, console_function, command, algo", [
    ("run_fast_dqn.py", cli.train, "train", ALGO_FAST_DQN),
    ("run_dqn.py", cli.train_serial, "serial", ALGO_DQN),
])
def test_a_trainer_command_makes_its_run_scripts_call(launch_calls, monkeypatch, script,
                                                      console_function, command, algo):
    """The run script, its console script and `python -m fast_dqn COMMAND` make one call, with
    `exiting` (a stop signal after the run is ignored) and the status passed back."""
    args = ["--game=pong", "--seed=3"]
    monkeypatch.setattr(sys, "argv", [script, *args])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(REPO / script), run_name="__main__")
    assert exit_info.value.code == 7
    monkeypatch.setattr(sys, "argv", ["/venv/bin/console-script", *args])
    assert console_function() == 7
    assert cli.main([command, *args]) == 7
    assert launch_calls == [(args, algo, True)] * 3
    assert sys.argv[0] == f"python -m fast_dqn {command}"  # its usage and error lines say so


@pytest.mark.parametrize("module, console_function, command", [
    (play, cli.play, "play"), (benchmark, cli.benchmark, "benchmark")])
def test_play_and_benchmark_run_their_modules_main(monkeypatch, module, console_function,
                                                   command):
    """As `python -m fast_dqn.play` runs play.main() (which reads sys.argv), so does the
    console script; `python -m fast_dqn play ARGS` passes ARGS."""
    calls = []
    monkeypatch.setattr(module, "main", lambda argv=None: calls.append(argv) or 5)
    monkeypatch.setattr(sys, "argv", ["x"])
    assert console_function() == 5
    assert cli.main([command, "runs/x", "--seed=1"]) == 5
    assert calls == [None, ["runs/x", "--seed=1"]]


@pytest.mark.parametrize("argv, words", [
    ([], "no command given"),
    (["trian", "--game=pong"], "unknown command 'trian' (did you mean 'train'?)"),
    (["--game=pong"], "a command comes first, before --game=pong"),
    (["fit"], "unknown command 'fit';"),
])
def test_python_m_fast_dqn_refuses_a_missing_or_unknown_command_in_one_line(
        launch_calls, monkeypatch, capsys, argv, words):
    monkeypatch.setattr(sys, "argv", ["__main__.py", *argv])
    assert cli.main() == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and words in err
    assert err.startswith("python -m fast_dqn: error: ")
    assert "train, serial, play, benchmark" in err
    assert launch_calls == []


def test_python_m_fast_dqn_help_lists_the_commands(launch_calls, capsys):
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    for script, (command, _) in CONSOLE_SCRIPTS.items():
        assert f"\n  {command} " in out
        assert script in out
    assert launch_calls == []


# --------------------------------------------------------------- installed in a fresh venv


def fresh_venv(root: Path) -> Path:
    """A venv without pip that sees this environment's distributions through a .pth file
    (its own site-packages come first on sys.path). Returns its bin/ directory."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=COMMAND_SECONDS)
    [own_site_packages] = venv.glob("lib/python*/site-packages")
    (own_site_packages / "this_environment.pth").write_text(
        "".join(f"{path}\n" for path in site.getsitepackages()))
    return venv / "bin"


def source_copy(root: Path) -> Path:
    """The checkout's files that git does not ignore (tracked or new), as a clone's `pip
    install .` would see them: not its venvs, runs or build output."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=REPO, capture_output=True, timeout=60)
    if listed.returncode == 0:
        names = [name for name in listed.stdout.decode().split("\0") if name]
    else:  # not a git checkout (an unpacked archive): all but what .gitignore names
        skipped = {".git", "venv", ".venv-ci", "runs", "build", "__pycache__", ".pytest_cache"}
        names = [str(path.relative_to(REPO)) for path in REPO.rglob("*")
                 if not skipped & set(path.relative_to(REPO).parts)
                 and not path.name.endswith((".pyc", ".egg-info"))]
    source = root / "source"
    for name in names:
        if (REPO / name).is_file():  # a tracked file deleted in the work tree is skipped
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    return source


def outside_env() -> dict[str, str]:
    """This environment, on the CPU, without a PYTHONPATH that could reach the checkout."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return {**env, **CPU_ONLY}


def run_in(directory: Path, argv: list[str], timeout: float = COMMAND_SECONDS
           ) -> subprocess.CompletedProcess:
    return subprocess.run([str(arg) for arg in argv], cwd=directory, env=outside_env(),
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def install(root: Path, *pip_args: str) -> tuple[Path, Path]:
    """`pip install PIP_ARGS SOURCE` into a fresh venv; returns its bin/ and a working
    directory outside the checkout."""
    bin_dir, source = fresh_venv(root), source_copy(root)
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    result = run_in(elsewhere, [bin_dir / "python", "-m", "pip", "install", "--no-index",
                                "--no-build-isolation", *pip_args, source],
                    timeout=INSTALL_SECONDS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return bin_dir, elsewhere


def imported_from(bin_dir: Path, elsewhere: Path, module: str = "fast_dqn") -> Path:
    result = run_in(elsewhere, [bin_dir / "python", "-c",
                                f"import {module}; print({module}.__file__)"])
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(result.stdout.strip())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, Path]:
    """`pip install .` in a fresh venv: its bin/ and a directory outside the checkout."""
    return install(tmp_path_factory.mktemp("installed"))


@pytest.mark.slow
def test_pip_install_puts_the_package_and_its_four_commands_in_the_venv(installed):
    bin_dir, elsewhere = installed
    venv = bin_dir.parent
    assert imported_from(bin_dir, elsewhere).is_relative_to(venv / "lib")
    declared = run_in(elsewhere, [bin_dir / "python", "-c", "import importlib.metadata as m; "
                                  "print(*m.requires('fast-dqn'), sep='\\n')"])
    assert sorted(declared.stdout.split()) == sorted(requirement_lines(REPO / "requirements.txt"))
    for script in CONSOLE_SCRIPTS:
        assert (bin_dir / script).is_file() and os.access(bin_dir / script, os.X_OK), script


@pytest.mark.slow
@pytest.mark.parametrize("script", CONSOLE_SCRIPTS)
def test_each_console_script_and_its_python_m_command_answer_help(installed, script):
    bin_dir, elsewhere = installed
    command, own_word = CONSOLE_SCRIPTS[script]
    for argv in ([bin_dir / script, "--help"],
                 [bin_dir / "python", "-m", "fast_dqn", command, "--help"]):
        result = run_in(elsewhere, argv)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.startswith("usage: ") and own_word in result.stdout
        if command == "serial":  # the serial trainer's flags are the fast one's, less five
            assert "--workers" not in result.stdout


@pytest.mark.slow
def test_python_m_fast_dqn_and_its_modules_run_outside_the_checkout(installed):
    bin_dir, elsewhere = installed
    python = bin_dir / "python"
    listing = run_in(elsewhere, [python, "-m", "fast_dqn", "--help"])
    assert listing.returncode == 0 and all(f"  {command} " in listing.stdout
                                           for command, _ in CONSOLE_SCRIPTS.values())
    unknown = run_in(elsewhere, [python, "-m", "fast_dqn", "trian"])
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1, unknown.stderr
    for module in ("fast_dqn.play", "fast_dqn.benchmark"):
        result = run_in(elsewhere, [python, "-m", module, "--help"])
        assert result.returncode == 0 and result.stdout.startswith("usage: "), result.stderr


def start_installed(argv: list, cwd: Path, log: Path) -> Launch:
    """Starts a command of the venv (not `python SCRIPT` from the checkout, as
    cli_runs.start does) in `cwd`, outside the checkout's environment, with its output in
    LOG.out and LOG.err (the harness's Launch)."""
    with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
        process = subprocess.Popen([str(arg) for arg in argv], cwd=cwd, env=outside_env(),
                                   stdin=subprocess.DEVNULL, stdout=out, stderr=err)
    return Launch(process, log, time.monotonic())


@pytest.mark.slow
def test_fast_dqn_trains_a_tiny_run_and_a_stopped_one_exits_130(installed):
    """Exit statuses as launch.py documents them: 0 for a finished run, 128 + SIGINT for a
    run stopped with work left, its checkpoint written; no traceback either way."""
    bin_dir, elsewhere = installed
    finished = start_installed([bin_dir / "fast-dqn", *INSTALLED_TINY_RUN, "--timesteps=200",
                                "--logdir=tiny"], elsewhere, elsewhere / "tiny-run")
    finished = finished.finish(COMMAND_SECONDS)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_no_traceback(finished)
    tiny = summary(elsewhere / "tiny")
    # It learned: one update per 4 steps after the 100 random ones.
    assert (tiny["finished"], tiny["steps"], tiny["updates"]) == (True, 200, (200 - 100) // 4)

    stopped = start_installed([bin_dir / "fast-dqn", *INSTALLED_TINY_RUN, "--timesteps=100000",
                               "--logdir=stopped"], elsewhere, elsewhere / "stopped-run")
    wait_for(stopped, elsewhere / "stopped" / "config.json", timeout=COMMAND_SECONDS)
    stopped.process.send_signal(signal.SIGINT)
    result = stopped.finish(COMMAND_SECONDS)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    assert_no_traceback(result)
    assert summary(elsewhere / "stopped")["finished"] is False
    assert (elsewhere / "stopped" / "checkpoint" / "manifest.json").is_file()


@pytest.mark.slow
def test_pip_install_editable_runs_the_sources_it_was_installed_from(tmp_path):
    bin_dir, elsewhere = install(tmp_path, "-e")
    source = tmp_path / "source"
    assert imported_from(bin_dir, elsewhere) == source / "fast_dqn" / "__init__.py"
    # A module added after the install is there: the venv reads the sources, not a copy.
    (source / "fast_dqn" / "added_after_install.py").write_text("")
    assert imported_from(bin_dir, elsewhere, "fast_dqn.added_after_install").parent == \
        source / "fast_dqn"
    for argv in ([bin_dir / "fast-dqn", "--help"],
                 [bin_dir / "python", "-m", "fast_dqn", "--help"]):
        result = run_in(elsewhere, argv)
        assert result.returncode == 0 and result.stdout.startswith("usage: "), result.stderr
