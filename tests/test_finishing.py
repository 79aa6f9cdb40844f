"""Every run can be finished (docs/checkpoints.md): a stop in a run's final window, a closed
terminal, a resume without a saved replay memory, tried on the real entry points.

The final window runs from a run's last agent step to its exit: the updates its last epoch
still owes, its final evaluation, its final checkpoint and summary. A stop there leaves a
checkpoint at the last step that owes work; a resume does exactly that work, and the run then
holds the bytes of the same run never stopped (`tools/same_bytes.py`'s digests). A resume
of a finished run changes nothing and exits 0.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fast_dqn.checkpoints import CHECKPOINT, MANIFEST, read_manifest
from fast_dqn.config import ALGO_DQN
from tests.cli_runs import (ENV, FAST, FINAL_WINDOW_STOP, REPO, RUN_DQN, RUN_FAST_DQN,
                            SMALL_BATCH, Finished, Launch, assert_no_traceback, read_csv,
                            run_bytes, run_cli, run_in_process, snapshot, start, step_of,
                            summary, wait_for, wait_for_line, with_handlers)

# A fast run whose last epoch is 800 steps (200 updates) after a 400-step random start. Its
# stop in the final window is made by tests/final_window_stop.py, whatever the trainer's
# speed, so its minibatches are small (4): the updates cost a fraction of a second.
FINAL_EPOCH = [*FAST, "--target-update=800", "--timesteps=1200", "--evaluate=0",
               SMALL_BATCH, "--xla=off", "--progress-every=0.05"]
# A serial run that evaluates 4 Freeway games, each cut at 100 steps, at its last step; its
# stop in that evaluation is made by tests/evaluation_stop.py, whatever the games' length.
FINAL_EVALUATION = ["--game=freeway", "--replay-capacity=2000", "--replay-start=400",
                    "--target-update=400", "--timesteps=600", "--evaluate=600",
                    "--eval-episodes=4", "--eval-max-episode-steps=100", "--seed=0",
                    "--xla=off", "--progress-every=0.05"]
# Rainbow's two strongest pieces (Hessel et al. 2018): the runs above are made with them too,
# as "fast-pieces" and "serial-pieces".
PIECES = ["--n-step=3", "--prioritized=true"]
# `python EVALUATION_STOP SIGNAL run_*.py ARGS...`: the run stopped by SIGNAL once its first
# evaluation has made its first group of games (see the file).
EVALUATION_STOP = REPO / "tests" / "evaluation_stop.py"


def resume_here(script: Path, run_dir: Path, capfd, *extra: str) -> Finished:
    """A resume in this process (cli_runs.run_in_process), for the runs no signal reaches
    and whose bytes are compared with none."""
    return run_in_process(script, ["--resume", str(run_dir), *extra], capfd)


def resume(script: Path, run_dir: Path, log: str, *extra: str) -> Finished:
    """A resume in a process of its own, for the runs compared byte for byte with another
    process's: the serial run resumed in this process after the fast one wrote other
    checkpoint/network/ckpt bytes than a process of its own (seen once, cause not sought)."""
    return run_cli(script, ["--resume", str(run_dir), *extra], run_dir.parent / log,
                   timeout=180)


@pytest.fixture(scope="module")
def never_stopped(tmp_path_factory) -> dict[str, Path]:
    """The runs of this file, each run to its end without a stop, with and without PIECES."""
    root = tmp_path_factory.mktemp("never-stopped")
    runs = {"fast": (RUN_FAST_DQN, FINAL_EPOCH), "serial": (RUN_DQN, FINAL_EVALUATION),
            "fast-pieces": (RUN_FAST_DQN, [*FINAL_EPOCH, *PIECES]),
            "serial-pieces": (RUN_DQN, [*FINAL_EVALUATION, *PIECES])}
    started = {name: start(script, [*args, f"--logdir={root / name}"], root / f"{name}-log")
               for name, (script, args) in runs.items()}
    for name, run in started.items():
        result = run.finish(timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
    return {name: root / name for name in runs}


@pytest.mark.slow
@pytest.mark.parametrize("pieces", [[], PIECES], ids=["nature", "pieces"])
def test_a_stop_between_the_last_step_and_the_last_update_resumes_to_the_same_bytes(
        never_stopped, tmp_path, capfd, pieces):
    """Regression: the checkpoint at step == --timesteps with updates owed was refused by
    every resume ("a resume only extends a run"), so sweeps reported the run FAILED forever.
    With n-step returns and priorities, the priorities are in the bytes compared."""
    run_dir = tmp_path / "run"
    # The run stops itself once its acting is over, its trainer held (a SIGTERM sent from
    # here at its "waiting for the learner" line could come after the trainer was done).
    stopped = start(FINAL_WINDOW_STOP, ["TERM", RUN_FAST_DQN.name, *FINAL_EPOCH, *pieces,
                                        f"--logdir={run_dir}"],
                    tmp_path / "run-1").finish(timeout=300)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr[-3000:]
    manifest = read_manifest(run_dir / CHECKPOINT)
    assert step_of(manifest) == 1200
    assert manifest["counters"]["updates"] < (1200 - 400) // 4  # stopped inside the window
    # The epoch's 800, after the rows each of the 4 samplers carried from the last flush (the
    # last n transitions of a game still running, and their 3 frames of context).
    n_step = 3 if pieces else 1
    assert 800 <= manifest["unstored_transitions"] <= 800 + 4 * (3 + n_step)
    assert summary(run_dir)["finished"] is False

    resumed = resume(RUN_FAST_DQN, run_dir, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_no_traceback(resumed)
    # No step moves while the owed updates are made: a line says why (a newcomer's resume
    # showed the same step for minutes without a word).
    assert "finishing the stopped epoch's updates at step 1200" in resumed.stdout.splitlines()
    assert summary(run_dir)["finished"] is True
    assert summary(run_dir)["updates"] == (1200 - 400) // 4
    resumed_bytes, never_stopped_bytes = run_bytes(
        run_dir, never_stopped["fast-pieces" if pieces else "fast"])
    assert resumed_bytes == never_stopped_bytes
    assert ("checkpoint/replay/priorities.npy" in resumed_bytes) == bool(pieces)

    before = snapshot(run_dir)
    again = resume_here(RUN_FAST_DQN, run_dir, capfd)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "is finished" in again.stdout and again.stderr == ""
    assert snapshot(run_dir) == before


@pytest.mark.slow
@pytest.mark.parametrize("pieces", [[], PIECES], ids=["nature", "pieces"])
def test_a_stop_in_the_final_evaluation_resumes_to_play_it(never_stopped, tmp_path, pieces):
    """Regression: a stop in the last evaluation left a checkpoint at the last step that no
    resume would take; the serial trainer's run, here."""
    run_dir = tmp_path / "run"
    stopped = start(EVALUATION_STOP, ["INT", RUN_DQN.name, *FINAL_EVALUATION, *pieces,
                                      f"--logdir={run_dir}"], tmp_path / "run-1").finish(60)
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
    assert "evaluation at step 600\n" in stopped.stdout  # the final one, under way
    manifest = read_manifest(run_dir / CHECKPOINT)
    assert step_of(manifest) == 600 and manifest["evaluator"]["evaluations"] == 0

    resumed = resume(RUN_DQN, run_dir, "resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary(run_dir)["finished"] is True
    resumed_bytes, never_stopped_bytes = run_bytes(
        run_dir, never_stopped["serial-pieces" if pieces else "serial"])
    assert resumed_bytes == never_stopped_bytes


@pytest.mark.slow
def test_a_finished_run_is_finished_for_its_resumes_and_its_stops(never_stopped, tmp_path,
                                                                   capfd):
    """A finished run's resume (a requeued job, a sweep run again) exits 0 and changes
    nothing; a finished run extended by --timesteps goes on."""
    run_dir = tmp_path / "run"
    subprocess.run(["cp", "-r", str(never_stopped["serial"]), str(run_dir)], check=True)
    before = snapshot(run_dir)
    for extra in ([], ["--timesteps=600"]):
        again = resume_here(RUN_DQN, run_dir, capfd, *extra)
        assert again.returncode == 0, again.stderr[-3000:]
        assert again.stdout.strip().endswith("(a larger --timesteps extends it)")
        assert snapshot(run_dir) == before
    shorter = resume_here(RUN_DQN, run_dir, capfd, "--timesteps=599")
    assert shorter.returncode == 2 and "a resume only extends a run" in shorter.stderr


def every_byte(directory: Path) -> dict[str, bytes]:
    """Every file's bytes, the lock's too."""
    return {str(path.relative_to(directory)): path.read_bytes()
            for path in sorted(directory.rglob("*")) if path.is_file()}


@pytest.mark.slow
def test_a_finished_runs_resume_needs_no_write(never_stopped, tmp_path, capsys, monkeypatch):
    """A sweep run again over a read-only archive. Regression (issue 34): the resume opened
    the lock file for writing first, so on a read-only file system it exited 2 where the
    docs promise "is finished", exit 0. In this process, every open for writing inside the
    run directory fails as on a read-only mount (EROFS), even for root; reads go on; the
    real mount is the next test's."""
    from fast_dqn import launch

    run_dir = tmp_path / "run"
    subprocess.run(["cp", "-r", str(never_stopped["serial"]), str(run_dir)], check=True)
    before = every_byte(run_dir)
    real_open = os.open
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def read_only_run_dir(path, flags, *args, **kwargs):
        where = str(path)
        if kwargs.get("dir_fd") is not None:  # a run opens its files relative to its directory
            where = os.path.join(os.readlink(f"/proc/self/fd/{kwargs['dir_fd']}"), where)
        if flags & writing and os.path.abspath(where).startswith(str(run_dir)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), where)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only_run_dir)
    for extra in ([], ["--timesteps=600"]):
        assert launch.main(["--resume", str(run_dir), *extra], ALGO_DQN) == 0
        out, err = capsys.readouterr()
        assert out.strip().endswith("(a larger --timesteps extends it)") and err == "", err
    # Work left: the resume cannot write it, and says why in one line.
    assert launch.main(["--resume", str(run_dir), "--timesteps=700"], ALGO_DQN) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Read-only file system" in err, err
    assert every_byte(run_dir) == before


@pytest.mark.slow
def test_a_finished_runs_resume_on_a_read_only_mount_is_finished(never_stopped, tmp_path,
                                                                 small_disk):
    disk = small_disk(100_000)
    if disk is None:
        pytest.skip("no tmpfs can be mounted here (it needs root and mount)")
    run_dir = disk / "run"
    subprocess.run(["cp", "-r", str(never_stopped["serial"]), str(run_dir)], check=True)
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    result = run_cli(RUN_DQN, ["--resume", str(run_dir)], tmp_path / "read-only")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("(a larger --timesteps extends it)")
    assert result.stderr == ""


@pytest.mark.slow
def test_a_fast_resume_without_a_saved_replay_memory_refills_it_first(tmp_path, capfd):
    """Regression: the resumed fast run first trained on the empty memory (`ValueError: high
    <= 0`, a traceback, exit 1); now it refills it for --replay-start steps, as the serial
    trainer does, and the updates an epoch owed at the checkpoint are not made."""
    run_dir = tmp_path / "run"
    first = run_in_process(RUN_FAST_DQN, [*FAST, "--target-update=2000", "--timesteps=600",
                                          "--evaluate=0", SMALL_BATCH,
                                          "--checkpoint-replay=false", f"--logdir={run_dir}"],
                           capfd)
    assert first.returncode == 0, first.stderr[-3000:]
    updates = summary(run_dir)["updates"]
    resumed = resume_here(RUN_FAST_DQN, run_dir, capfd, "--timesteps=1200")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_no_traceback(resumed)
    assert "refills it for 400 steps" in resumed.stderr
    # Learning pauses from 600 to 1000 (the refill), then 200 steps of 1 update per 4.
    assert summary(run_dir)["updates"] == updates + (1200 - 600 - 400) // 4


@pytest.mark.slow
def test_a_closed_terminal_stops_the_run_with_a_checkpoint_unless_nohup(tmp_path):
    """Regression: SIGHUP (the terminal closed) killed the run with status 129 and no
    checkpoint or summary. The run writes to a terminal that is then hung up, as a closed
    window leaves it."""
    # Both runs uncompiled, with minibatches of 4: what a hang-up does is under test, not the
    # trainer; XLA's compile (seconds here) comes as learning starts, after the first
    # checkpoint, and a stop waits for the trainer's call in progress.
    run_dir = tmp_path / "run"
    main, terminal = os.openpty()
    with open(tmp_path / "hup.err", "w") as err:
        process = subprocess.Popen(
            [sys.executable, str(RUN_FAST_DQN), *FAST, "--timesteps=20000", "--evaluate=0",
             SMALL_BATCH, "--xla=off", "--checkpoint-every=400", f"--logdir={run_dir}"],
            cwd=REPO, env=ENV, stdin=terminal, stdout=terminal, stderr=err,
            preexec_fn=with_handlers({signal.SIGHUP: signal.SIG_DFL}))
    os.close(terminal)
    window_open = threading.Event()
    window_open.set()
    reader = threading.Thread(target=show_terminal, args=(main, window_open))
    reader.start()
    running = Launch(process, tmp_path / "hup", 0.0)
    (tmp_path / "hup.out").write_text("")
    try:
        wait_for(running, run_dir / CHECKPOINT / MANIFEST)
    finally:
        window_open.clear()  # the window closes: writes to the terminal now fail
        reader.join()
        os.close(main)
    process.send_signal(signal.SIGHUP)
    assert running.finish(timeout=60).returncode == 128 + signal.SIGHUP
    done = summary(run_dir)
    assert done["stopped_by_signal"] == signal.SIGHUP and done["finished"] is False
    assert step_of(read_manifest(run_dir / CHECKPOINT)) == done["steps"]
    assert "Traceback" not in (tmp_path / "hup.err").read_text()

    # Under nohup (SIGHUP ignored), a hang-up changes nothing: the run writes its next
    # checkpoint, which it does only if it went on; SIGTERM still stops it.
    ignored = tmp_path / "nohup"
    run = start(RUN_FAST_DQN, [*FAST, "--timesteps=20000", "--evaluate=0", SMALL_BATCH,
                               "--xla=off", "--checkpoint-every=400", f"--logdir={ignored}"],
                tmp_path / "nohup-log", signals={signal.SIGHUP: signal.SIG_IGN})
    wait_for_line(run, "checkpoint at step 400\n")
    run.process.send_signal(signal.SIGHUP)
    wait_for_line(run, "checkpoint at step 800\n")
    run.process.send_signal(signal.SIGTERM)
    result = run.finish(timeout=60)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    assert "stopping at step " in result.stdout and "Traceback" not in result.stderr


def show_terminal(main: int, window_open: threading.Event) -> None:
    """Reads what the run writes to its terminal while the window is open (a terminal whose
    output nobody reads blocks the writer once its buffer is full)."""
    while window_open.is_set():
        ready, _, _ = select.select([main], [], [], 0.05)
        if ready:
            try:
                os.read(main, 65536)
            except OSError:
                return


@pytest.mark.slow
def test_a_stop_while_a_large_evaluation_makes_its_games_is_prompt(tmp_path):
    """Regression: with --eval-episodes=256 a SIGTERM 3 s into the evaluation exited after 45 s
    (making and resetting the 256 games took one call each). Now the games are made in
    groups of 8 and a stop is taken between two groups: signalled once the first group is
    made (tests/evaluation_stop.py), the run makes no other and exits."""
    run_dir = tmp_path / "run"
    result = start(EVALUATION_STOP, [
        "TERM", RUN_FAST_DQN.name, "--game=freeway", "--workers=4", "--timesteps=2000",
        "--replay-start=400", "--replay-capacity=2000", "--train-freq=100",
        "--target-update=400", "--evaluate=400", "--eval-episodes=256",
        "--progress-every=0.05", f"--logdir={run_dir}"], tmp_path / "large").finish(120)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr[-3000:]
    made = [line for line in result.stdout.splitlines()
            if line.startswith("evaluation games made: ")]
    assert made == ["evaluation games made: 8 from env 0"], result.stdout
    assert "dropping the evaluation under way" in result.stdout
    assert read_csv(run_dir / "evaluations.csv") == []  # cut short: played again on resume


@pytest.mark.slow
def test_a_stop_signal_while_a_finished_run_exits_leaves_its_status_0(never_stopped, tmp_path):
    """Regression (found by the soak): a SIGINT after the last line, while the interpreter
    shut down, killed a finished run (status -2), which the sweep counted as failed."""
    run_dir = tmp_path / "run"
    subprocess.run(["cp", "-r", str(never_stopped["serial"]), str(run_dir)], check=True)
    run = start(RUN_DQN, ["--resume", str(run_dir), "--timesteps=610"], tmp_path / "late")
    wait_for_line(run, "done: ")
    run.process.send_signal(signal.SIGINT)
    result = run.finish(timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
