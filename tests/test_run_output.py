"""What a run prints, on the real entry points (issue 36): a stop's two lines, each
evaluation's line, the final progress line, the progress line's phases on a terminal, and
the README's "What a run prints" block against a real run.

Every test that needs a moment waits for a line the run prints itself (read from its
stdout as it grows), never for a length of time, so it holds on a loaded machine.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.cli_runs import (ENV, FAST, LINE_STOP, REPO, RUN_DQN, RUN_FAST_DQN, SMALL_BATCH,
                            TINY, read_csv, run_in_process, start, summary)
from tests.fakes import screen

SERIAL = [*TINY, "--xla=off"]
FAST_OFF = [*FAST, "--xla=off"]


def lines_of(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


# -- a stop speaks ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("script,args", [(RUN_FAST_DQN, FAST_OFF), (RUN_DQN, SERIAL)],
                         ids=["fast", "serial"])
def test_a_stop_says_what_it_does_and_its_last_line_is_the_command_that_goes_on(
        script, args, tmp_path, capfd):
    """Regression (issue 36): a stopped run said nothing until its checkpoint was written,
    then "done: ...", as a finished run does. Stopped as its evaluation at step 1,200
    begins, past its first checkpoint (800), the run says that it stops and what it still
    does, with the write's time estimated from the first checkpoint's; its last line gives
    the command that finishes it, and that command does."""
    run_dir = tmp_path / "run"
    # Small minibatches (4), so that the updates cost little: nothing here is about the
    # trainer's speed. The run signals itself as it prints the line that begins its
    # evaluation at step 1,200 (tests/line_stop.py): a line every run prints, between its
    # first checkpoint and its last step, however fast or slow the machine. (A progress line
    # between two steps is not: the loop hands the line its step every half second, and an
    # epoch can take less on a quiet machine.)
    result = start(LINE_STOP, ["INT", "evaluation at step 1200", str(script), *args,
                               "--timesteps=1600", "--evaluate=1200", "--eval-episodes=2",
                               "--eval-max-episode-steps=100", "--checkpoint-every=800",
                               SMALL_BATCH, f"--logdir={run_dir}"],
                   tmp_path / "stopped").finish(timeout=600)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    lines = lines_of(result.stdout)
    stopping = [line for line in lines if line.startswith("stopping at step")]
    assert len(stopping) == 1, result.stdout
    match = re.fullmatch(r"stopping at step (\d+): (.*)writing the checkpoint "
                         r"\((under a second|about \d+ s), from the last one's write\)",
                         stopping[0])
    assert match, stopping[0]
    step = int(match[1])
    assert summary(run_dir)["steps"] == step and summary(run_dir)["finished"] is False
    assert not any(line.startswith("done:") for line in lines), result.stdout
    assert 800 < step < 1600
    assert lines[-1] == (f"stopped at step {step} of 1600; resume with: python {script} "
                         f"--resume {run_dir}")
    assert lines.index(stopping[0]) < lines.index(f"checkpoint at step {step}")

    # The command's arguments, given to the script's main in this process: what the command
    # does is under test here, not its process (other tests start `python run_*.py`).
    command = lines[-1].split("resume with: ", 1)[1].split()
    assert command[:2] == ["python", str(script)]
    resumed = run_in_process(script, command[2:], capfd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert lines_of(resumed.stdout)[-1].startswith("done: 1600 steps, ")


@pytest.mark.slow
@pytest.mark.parametrize("script,args", [(RUN_FAST_DQN, FAST_OFF), (RUN_DQN, SERIAL)],
                         ids=["fast", "serial"])
def test_a_stop_before_any_step_speaks_too(script, args, tmp_path):
    """A stop while the run starts (TensorFlow's import and the network's making take
    seconds after the run directory's line): the run stops at step 0, says so, writes its
    checkpoint of an empty memory and says how to go on; it used to say "done: 0 steps"."""
    run_dir = tmp_path / "run"
    # The run signals itself as it prints its first line (tests/line_stop.py), so the stop
    # comes before the first step however fast the start is.
    result = start(LINE_STOP, ["INT", "run directory: .*", str(script), *args,
                               "--timesteps=2000", f"--logdir={run_dir}"],
                   tmp_path / "early").finish(timeout=600)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    lines = lines_of(result.stdout)
    assert "stopping at step 0: writing the checkpoint (0 MB of replay memory and the " \
           "networks)" in lines, result.stdout
    assert lines[-1] == f"stopped at step 0 of 2000; resume with: python {script} " \
                        f"--resume {run_dir}"


@pytest.mark.slow
def test_a_stop_in_the_random_phase_estimates_the_write_from_the_memory(tmp_path):
    """Stopped while the memory fills (no checkpoint written yet), the stop's line gives
    the replay memory's size to write, which is the steps stored × 7,064 bytes + the
    columns; its last line is the resume command."""
    run_dir = tmp_path / "run"
    # The run signals itself at its first progress line past step 500 (tests/line_stop.py),
    # inside its random phase of 5,000 steps: a memory of some MB, not a rounded 0. The loop
    # hands the line its step every half second, and 4,500 random steps of one game take
    # seconds on any CPU, so such a line comes.
    result = start(LINE_STOP, ["INT", r"step ([5-9]\d\d|[1-4]\d\d\d)/6000 .*", str(RUN_DQN),
                               "--game=breakout", "--replay-capacity=5000",
                               "--replay-start=5000", "--timesteps=6000", "--seed=0",
                               "--xla=off", "--progress-every=0.05", f"--logdir={run_dir}"],
                   tmp_path / "random").finish(timeout=600)
    assert result.returncode == 128 + signal.SIGINT, result.stderr[-3000:]
    lines = lines_of(result.stdout)
    match = next(re.fullmatch(r"stopping at step (\d+): writing the checkpoint \((\d+) MB of "
                              r"replay memory and the networks\)", line) for line in lines
                 if line.startswith("stopping"))
    step = int(match[1])
    assert 500 <= step < 5000 and summary(run_dir)["updates"] == 0
    # An 84 x 84 frame, a uint8 action, a float32 reward and 3 one-byte flags, by hand.
    assert int(match[2]) == round(step * (84 * 84 + 1 + 4 + 3) / 1e6)
    assert lines[-1] == f"stopped at step {step} of 6000; resume with: python {RUN_DQN} " \
                        f"--resume {run_dir}"


# -- evaluations and the final line -----------------------------------------------------------


@pytest.mark.slow
def test_every_evaluation_prints_its_line_and_the_final_line_carries_the_last(tmp_path, capfd):
    """Regression (issue 36): evaluations.csv held each evaluation's mean, but the run
    printed none of them, and its last progress line said "eval -". The run is the serial
    script's main() in this process (no signal, no terminal here), its output on file
    descriptors 1 and 2 (`capfd`)."""
    run_dir = tmp_path / "run"
    result = run_in_process(RUN_DQN, [*SERIAL, "--timesteps=1200", "--evaluate=400",
                                      "--eval-episodes=2", "--eval-max-episode-steps=100",
                                      SMALL_BATCH, f"--logdir={run_dir}"], capfd)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_csv(run_dir / "evaluations.csv")
    assert [row["timestep"] for row in rows] == ["400", "800", "1200"]
    lines = lines_of(result.stdout)
    printed = [re.fullmatch(r"evaluation at step (\d+): mean (\S+) over 2 games \(min (\S+), "
                            r"max (\S+)\), (\d+\.\d) s", line) for line in lines
               if line.startswith("evaluation at step") and ":" in line]
    assert [match[1] for match in printed] == ["400", "800", "1200"], result.stdout
    for match, row in zip(printed, rows):
        assert float(match[2]) == pytest.approx(float(row["mean"]), abs=0.051)
        assert float(match[3]) <= float(match[2]) <= float(match[4])
    final_progress = [line for line in lines if line.startswith("step ")][-1]
    assert final_progress.startswith("step 1200/1200 (100.0%)")
    assert final_progress.endswith(f"| eval {float(rows[-1]['mean']):.1f}"), final_progress
    assert lines[-1].startswith("done: 1200 steps, ")


def test_the_progress_line_done_summary_json_and_summarize_give_one_rate(tmp_path, capfd):
    """Regression (issue 46): one run said 88 steps/s on its progress line and 73 on `done:`
    (the line left the evaluations and the compile out), and a stopped run's summary.json
    counted steps its learner had not trained. Each report now shows the run's counters'
    rates: the same figures, to their rounding (the last progress line is drawn a moment
    before `done:`). Three evaluations of 4 games make the pauses a large part of this run."""
    run_dir = tmp_path / "run"
    result = run_in_process(RUN_FAST_DQN, [*FAST_OFF, "--timesteps=1200", "--evaluate=400",
                                           "--eval-episodes=4", "--eval-max-episode-steps=100",
                                           SMALL_BATCH, f"--logdir={run_dir}"], capfd)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = lines_of(result.stdout)
    final_progress = [line for line in lines if line.startswith("step ")][-1]
    shown = re.search(r"\| (\S+) steps/s \| (\S+) updates/s \|", final_progress)
    done = re.fullmatch(r"done: 1200 steps, (\d+) updates; (\d+) steps/s and (\d+) updates/s "
                        r"after the replay start; files in .*", lines[-1])
    assert shown and done, result.stdout
    saved = summary(run_dir)
    table = tmp_path / "table.csv"
    subprocess.run([sys.executable, str(REPO / "scripts" / "summarize.py"), str(run_dir),
                    f"--csv={table}"], check=True, capture_output=True, env=ENV)
    summarized = read_csv(table)[0]
    steps_rates = [float(shown[1]), float(done[2]), saved["steps_per_second"],
                   float(summarized["steps_per_second"])]
    updates_rates = [float(shown[2]), float(done[3]), saved["updates_per_second"],
                     float(summarized["updates_per_second"])]
    for rates in (steps_rates, updates_rates):
        assert max(rates) - min(rates) <= max(1.0, 0.02 * max(rates)), (rates, final_progress)
    # Every step of the finished run is trained: 4 steps per update, from the replay start.
    assert int(done[1]) == (1200 - 400) // 4
    assert saved["steps_per_second"] == pytest.approx(4 * saved["updates_per_second"])


# -- on a terminal ---------------------------------------------------------------------------


def drawn_lines(output: str) -> list[str]:
    """Each state the progress line was drawn in (the pieces between carriage returns)."""
    return [piece.rstrip() for piece in re.split(r"[\r\n]", output) if piece.strip()]


class Terminal:
    """A run on a pseudo-terminal 250 columns wide, its output read as it comes."""

    def __init__(self, args: list[str], log: Path, script: Path = RUN_FAST_DQN):
        self.main, terminal = os.openpty()
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        self.err = open(log.with_suffix(".err"), "w")
        self.process = subprocess.Popen([sys.executable, str(script), *args], cwd=REPO,
                                        env=ENV, stdin=terminal, stdout=terminal,
                                        stderr=self.err)
        os.close(terminal)
        self.output = ""

    def read(self, timeout: float = 0.1) -> bool:
        ready, _, _ = select.select([self.main], [], [], timeout)
        if not ready:
            return True
        try:
            chunk = os.read(self.main, 65536)
        except OSError:  # the run exited and closed its side
            return False
        self.output += chunk.decode(errors="replace")
        return bool(chunk)

    def finish(self, timeout: float = 300) -> int:
        deadline = time.monotonic() + timeout
        while self.read() and time.monotonic() < deadline:
            pass
        returncode = self.process.wait(timeout=max(1.0, deadline - time.monotonic()))
        os.close(self.main)
        self.err.close()
        return returncode


@pytest.mark.slow
def test_on_a_terminal_the_line_names_its_phases_and_a_stop_speaks(tmp_path):
    """On a pseudo-terminal (issue 36): the progress line names the wait for the trainer,
    the evaluation and the checkpoint while each lasts; the checkpoint and each evaluation
    leave a line on the screen; a Ctrl-C after the first checkpoint shows the stop's line,
    and the screen's last line is the command that goes on."""
    # The Ctrl-C comes from the run itself as it shows its checkpoint's line at step 800
    # (tests/line_stop.py), so it lands before the run's last step however slow the run is.
    # Minibatches of 4 (the resume keeps them): each phase's name is drawn as the phase
    # begins, however short it is, so the trainer's speed is not under test.
    run_dir = tmp_path / "run"
    terminal = Terminal(["INT", "checkpoint at step 800", str(RUN_FAST_DQN), *FAST_OFF,
                         SMALL_BATCH, "--timesteps=1200", "--evaluate=800", "--eval-episodes=2",
                         "--eval-max-episode-steps=100", "--checkpoint-every=800",
                         f"--logdir={run_dir}"], tmp_path / "terminal", script=LINE_STOP)
    assert terminal.finish() == 128 + signal.SIGINT, (tmp_path / "terminal.err").read_text()
    drawn = drawn_lines(terminal.output)
    for phase in ("| waiting for learner |", "| evaluating 2 games |", "| writing checkpoint |"):
        assert any(line.startswith("step ") and phase in line for line in drawn), phase
    shown = [line for line in screen(terminal.output) if line]
    evaluation = [line for line in shown if line.startswith("evaluation at step 800: mean ")]
    assert len(evaluation) == 1, shown
    assert "checkpoint at step 800" in shown
    stopping = [line for line in shown if line.startswith("stopping at step ")]
    assert len(stopping) == 1, shown
    step = summary(run_dir)["steps"]
    assert stopping[0].startswith(f"stopping at step {step}: ")
    assert step < 1200
    assert shown[-1] == (f"stopped at step {step} of 1200; resume with: python "
                         f"{RUN_FAST_DQN} --resume {run_dir}")
    assert shown[-2].startswith(f"step {step}/1200 ")  # the progress line, left above it
    assert not any(line.startswith("done:") for line in shown)

    # The resume, on a terminal too: its "resuming from" line comes first and stays on the
    # screen, and the run finishes.
    resumed = Terminal(["--resume", str(run_dir)], tmp_path / "resumed")
    assert resumed.finish() == 0, (tmp_path / "resumed.err").read_text()
    shown = [line for line in screen(resumed.output) if line]
    assert shown[0].startswith("resuming from ") and shown[0].endswith(f" at step {step}"), \
        shown
    assert shown[-1].startswith("done: 1200 steps"), shown


# -- the README's block ------------------------------------------------------------------------

README = REPO / "README.md"
# The README's smoke command with a shorter schedule, to keep this test well under a minute
# of training: the same kinds of lines in the same order (one learning epoch that ends at the
# last step, an evaluation and a checkpoint there). The README's 2 evaluation games stay: a
# line of 1 game says "1 game".
SHORTER = ["--timesteps=1400", "--replay-capacity=2000", "--evaluate=1100", "--workers=4"]


def readme_block() -> tuple[list[str], list[str]]:
    """The smoke command's arguments and the printed block under "What a run prints"."""
    text = README.read_text()
    command = re.search(r"```bash\n(python run_fast_dqn\.py [^`]*?--eval-episodes=\d+)\n```",
                        text)
    assert command, "the README's smoke command is not where this test looks"
    args = command[1].replace("\\\n", " ").split()[2:]
    block = re.search(r"### What a run prints\n.*?```\n(.*?)```", text, re.S)
    assert block, "the README's printed block is not where this test looks"
    return args, block[1].splitlines()


def shape(line: str) -> str:
    """A line with its numbers and the run directory's name left out."""
    line = re.sub(r"runs/pong-fast_dqn-seed0-\d{8}-\d{6}|\S*/run\b", "RUN", line)
    line = re.sub(r"\d[\d,]*(\.\d+)?", "#", line)
    return re.sub(r"\| (ETA|eps|return|eval) (\S+)", r"| \1 #", line)


def without_periodic_progress(lines: list[str]) -> list[str]:
    """The lines but the progress lines printed every --progress-every seconds (how many a
    run prints depends on the machine's speed): the last progress line, which the run
    prints when it ends, stays."""
    last = max(i for i, line in enumerate(lines) if line.startswith("step "))
    return [line for i, line in enumerate(lines) if i == last or not line.startswith("step ")]


def test_the_long_run_note_names_timesteps_and_the_readmes_smoke_run():
    """Issue 46: a CPU run whose ETA passes a day names the way to a shorter run."""
    from fast_dqn.launch import CPU_LONG_RUN_NOTE, SMOKE_RUN_FLAGS

    args, _ = readme_block()
    flags = SMOKE_RUN_FLAGS.split()
    assert "--timesteps=6000" in flags and set(flags) <= set(args)
    assert f"--timesteps makes a shorter run (the README's smoke run: {SMOKE_RUN_FLAGS})" in \
        CPU_LONG_RUN_NOTE


@pytest.mark.slow
def test_the_readmes_printed_block_is_what_the_smoke_command_prints(tmp_path, capfd):
    """The run is the script's main() in this process: what it prints is under test, not
    its process (no signal, no exit status but main's)."""
    args, block = readme_block()
    assert args == ["--game=pong", "--workers=8", "--timesteps=6000", "--replay-start=1000",
                    "--replay-capacity=20000", "--evaluate=3000", "--eval-episodes=2"]
    result = run_in_process(RUN_FAST_DQN, [*args, *SHORTER, f"--logdir={tmp_path / 'run'}"],
                            capfd)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = without_periodic_progress(lines_of(result.stdout))
    # `...` in the README stands for progress lines left out, as `without_periodic_progress`
    # leaves them out of the run's.
    expected = without_periodic_progress([line for line in block if line != "..."])
    assert [shape(line) for line in expected] == [shape(line) for line in printed], \
        result.stdout


@pytest.mark.parametrize("argv0,algo,expected", [
    ("run_fast_dqn.py", "fast_dqn", "python run_fast_dqn.py"),
    ("/home/me/fast_dqn/run_dqn.py", "dqn", "python /home/me/fast_dqn/run_dqn.py"),
    ("/home/me/venv/bin/fast-dqn", "fast_dqn", "fast-dqn"),
    ("/home/me/venv/bin/fast-dqn-serial", "dqn", "fast-dqn-serial"),
    ("python -m fast_dqn train", "fast_dqn", "python -m fast_dqn train"),
    ("python -m fast_dqn serial", "dqn", "python -m fast_dqn serial"),
    ("/usr/lib/python3/site-packages/pytest/__main__.py", "dqn", "python run_dqn.py"),
    # the other trainer's command, in the form this one was called (issue 46)
    ("/home/me/fast_dqn/run_dqn.py", "fast_dqn", "python /home/me/fast_dqn/run_fast_dqn.py"),
    ("./run_fast_dqn.py", "dqn", "python ./run_dqn.py"),
    ("/home/me/venv/bin/fast-dqn-serial", "fast_dqn", "fast-dqn"),
    ("python -m fast_dqn serial", "fast_dqn", "python -m fast_dqn train"),
    ("python -m fast_dqn train", "dqn", "python -m fast_dqn serial"),
])
def test_the_resume_command_is_the_one_the_run_was_started_with(argv0, algo, expected,
                                                                 monkeypatch):
    """The last line of a stopped run names the command its user ran: the run script with
    its path as given, the console script, or `python -m fast_dqn COMMAND` (whose argv[0]
    fast_dqn.cli sets so); the run script where the process cannot tell."""
    from fast_dqn import launch
    from fast_dqn.config import ALGO_DQN, ALGO_FAST_DQN

    assert {ALGO_FAST_DQN, ALGO_DQN} == {"fast_dqn", "dqn"}
    monkeypatch.setattr(sys, "argv", [argv0])
    assert launch.resume_command(algo) == expected
