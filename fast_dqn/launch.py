"""Builds a training run from the command line and runs it; the entry points call `main`.

Failures and stopping follow docs/design.md §5: bad input, a held run directory or a
checkpoint that fails its checks get one line and exit status 2 before anything is written;
a stopped run checkpoints and exits 128 + the signal while it has work left, 0 once its work
is done; a diverged run or a failed write exits 1 with one line naming what to resume from.
Lost standard output at the start is refused as bad input (a new run's directory discarded);
once the run trains, a line that cannot be shown is dropped and the run goes on.
"""

from __future__ import annotations

import contextlib
import fcntl
import faulthandler
import io
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from fast_dqn.training_loops import DQN, FastDQN, NonFiniteLoss, TrainingLoop
from fast_dqn.atari import GameSettings, game_of_new_run
from fast_dqn.checkpoints import (CHECKPOINT, CheckpointError, check_checkpoint_names,
                                  clear_leftovers, path_too_long, save_checkpoint,
                                  unstored_arrays)
from fast_dqn.code_version import CODE_VERSIONS, code_version, with_resume_entry
from fast_dqn.config import (ALGO_DQN, ALGO_FAST_DQN, VARIANTS, Config, flag_name,
                             given_settings, make_parser, new_run_settings, protocol_overrides,
                             validate)
from fast_dqn.loop_interfaces import LoopParts
from fast_dqn.progress import Progress
from fast_dqn.tensorflow_start import configure_device, cpu_bfloat16_note, select_device
from fast_dqn.replay_memory import make_replay_memory
from fast_dqn.resume import (checkpoint_finished, checkpoint_step, restore_loop, resume_command,
                             resumed_config, verified_checkpoint)
from fast_dqn.run_dir import (LOCK_FILE, RunDirectory, RunDirGone, WriteFailed,
                              check_run_dir_writable, default_run_dir, disk_space_warning)
from fast_dqn.run_logs import RunLogs, check_logs_match
from fast_dqn.env_pools import SERIAL, EnvPool, GroupedPool, make_env_pool
from fast_dqn.schedule import steps_at_sync_points
from fast_dqn.stop_request import StopRequest
from fast_dqn.transitions import Transitions, replay_bytes
from fast_dqn.video import ATARI_VIDEO_SIZE, video_codec

DESCRIPTIONS = {
    ALGO_DQN: "Nature DQN on Atari, the serial reference procedure (Mnih et al., 2015): "
              "act 4 steps, train 1 minibatch, repeat.",
    ALGO_FAST_DQN: "Nature DQN on Atari, trained by the concurrent and synchronized scheme of "
                   "Daley & Amato (2021): samplers act with the target network while a "
                   "learner thread updates the online network.",
}
NETWORK_CHECKPOINT_BYTES = 64 * 1024**2  # networks and optimizer slots: ~30 MB, with room
# Evaluation envs made and reset at a time: a stop waits for one group (docs/checkpoints.md).
EVAL_GROUP_SIZE = 8
# Host memory an environment of the samplers' pool holds, for the start-up memory check, and
# the count from which the run says it is making them (docs/fast-scheme.md has the figures).
ENV_BYTES = 1_250_000
MANY_ENVS = 64
# The README's smoke run's schedule, and what a CPU run whose ETA passes a day adds to it.
SMOKE_RUN_FLAGS = ("--timesteps=6000 --replay-start=1000 --replay-capacity=20000 "
                   "--evaluate=3000 --eval-episodes=2")
CPU_LONG_RUN_NOTE = ("it trains on the CPU: a smaller --timesteps makes a shorter run (the "
                     f"README's smoke run: {SMOKE_RUN_FLAGS})")


class OutputLost(Exception):
    """Standard output cannot be written (a closed pipe, a full device)."""


def prepare_config(argv: Sequence[str] | None, algo: str) -> Config:
    """Parses and checks the command line; raises ValueError on bad input."""
    parser = make_parser(algo, DESCRIPTIONS[algo], resume_command(ALGO_FAST_DQN))
    settings = given_settings(parser.parse_args(argv))
    if "resume" in settings:
        config = resumed_config(settings, algo)
        check_memory_for(config.replay_capacity, num_envs(config, algo))
        check_video_codec(config)
        return config
    if settings.get("refill_replay"):
        raise ValueError("--refill-replay only has meaning with --resume (it accepts a "
                         "checkpoint whose replay memory is missing); leave it out of a new run")
    config = Config(**new_run_settings(settings))
    validate(config, algo)
    config = config.replace(game=game_of_new_run(config.game, config, settings))
    logdir = config.logdir or str(default_run_dir(config.game, algo, config.seed))
    config = config.replace(logdir=os.path.expanduser(logdir))
    check_memory_for(config.replay_capacity, num_envs(config, algo))
    too_long = path_too_long(Path(os.path.abspath(config.logdir)))  # as a resume may name it
    if too_long is not None:
        raise ValueError(f"{too_long}; choose a shorter --logdir")
    if not Path(config.logdir).is_dir():  # an existing one is checked by RunDirectory.create
        check_run_dir_writable(Path(config.logdir))
    check_video_codec(config)
    return config


def check_video_codec(config: Config) -> None:
    """With --video-every, refuses a run whose OpenCV writes no video codec now, not at its
    first recorded evaluation."""
    if config.video_every:
        try:
            video_codec(ATARI_VIDEO_SIZE)
        except ValueError as error:
            raise ValueError(f"--video-every: {error}; leave it out to train without "
                             "videos") from None


def available_memory_bytes() -> int | None:
    """MemAvailable from /proc/meminfo; elsewhere the physical memory; None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def num_envs(config: Config, algo: str) -> int:
    """The environments the samplers' pool holds: --workers, or 1 for the serial trainer."""
    return config.workers if algo == ALGO_FAST_DQN else 1


def check_memory_for(capacity: int, envs: int = 1, headroom_bytes: int = 2 * 1024**3) -> None:
    """Raises ValueError if this machine cannot hold a replay memory of `capacity` and a
    pool of `envs` environments: numpy allocates lazily, so an oversized memory would fail
    hours into a run."""
    available = available_memory_bytes()
    if available is None:
        return
    needed = replay_bytes(capacity)
    if needed + headroom_bytes > available:
        raise ValueError(
            f"--replay-capacity {capacity} needs {needed / 1e9:.1f} GB of memory (plus "
            f"{headroom_bytes / 1e9:.0f} GB headroom) but only {available / 1e9:.1f} GB is "
            f"available; lower --replay-capacity")
    pool = envs * ENV_BYTES
    if needed + pool + headroom_bytes > available:
        raise ValueError(
            f"--workers={envs} environments need about {pool / 1e9:.1f} GB of memory beside "
            f"the replay memory's {needed / 1e9:.1f} GB (plus {headroom_bytes / 1e9:.0f} GB "
            f"headroom), but only {available / 1e9:.1f} GB is available; lower --workers")


def make_pool(config: Config, num_envs: int, backend: str, seed: int,
              max_episode_steps: int | None = None) -> EnvPool:
    """W envs of the run's game; games are cut off at the training cap unless told otherwise."""
    return make_env_pool(backend, GameSettings.of_run(config, max_episode_steps), num_envs,
                         seed=seed)


def eval_backend(config: Config) -> str:
    """ale-py's vector env where it gives the training frames; Python threads otherwise."""
    return "vector" if config.interp == "area" else "threads"


def make_eval_pool(config: Config, should_stop: Callable[[], bool]) -> EnvPool:
    """One env per evaluation game, each cut off after 5 minutes of play by default; made and
    reset in groups of EVAL_GROUP_SIZE, so that a stop waits for one group at most
    (`GroupedPool`: env i is seeded as in one pool). With --video-every the first group is
    stepped in the caller's thread, where the video reads env 0's screen."""
    def make_group(first: int, num_envs: int) -> EnvPool:
        backend = SERIAL if first == 0 and config.video_every else eval_backend(config)
        return make_pool(config, num_envs, backend, config.seed + first,
                         max_episode_steps=config.eval_max_episode_steps)

    return GroupedPool(make_group, config.eval_episodes, EVAL_GROUP_SIZE, should_stop)


def checkpoint_bytes(config: Config) -> int:
    """About what one checkpoint of this run takes on disk."""
    replay = replay_bytes(config.replay_capacity) if config.checkpoint_replay else 0
    return replay + NETWORK_CHECKPOINT_BYTES


def build_loop(config: Config, algo: str, run_log: RunLogs,
               stop: StopRequest | None = None) -> tuple[TrainingLoop, str]:
    """Wires the parts of a run together; returns the loop and the device line."""
    from fast_dqn.learner import make_learner  # TensorFlow here

    device = configure_device()  # first: a GPU's settings are fixed once it is used
    on_cpu = device.startswith("training on CPU")
    from fast_dqn.device_frames import make_frame_store  # TensorFlow is loaded by now

    frames, replay_line = make_frame_store(config.replay_device, config.replay_capacity)
    device = f"{device}; {replay_line}; XLA {config.xla}"
    say(device)
    if on_cpu and config.precision == "bfloat16" and (note := cpu_bfloat16_note()):
        say(note)
    if algo == ALGO_FAST_DQN:
        if config.workers >= MANY_ENVS:
            say(f"making {config.workers} environments of {config.game} (this takes a "
                "while) ...")
        pool = make_pool(config, config.workers, config.backend, config.seed)
    else:
        pool = make_pool(config, 1, SERIAL, config.seed)
    learner = make_learner(config, pool.n_actions, frames.device_frames)
    run_log.add_to_config({"xla_compiled": learner.xla})

    def xla_fell_back(line: str) -> None:
        warn(line)
        with contextlib.suppress(WriteFailed, OSError, ValueError):  # the line said it
            run_log.add_to_config({"xla_compiled": False})

    learner.on_xla_fallback = xla_fell_back
    seeds = np.random.SeedSequence(config.seed).spawn(2)
    memory = make_replay_memory(config, np.random.default_rng(seeds[0]), frames)

    def save(state: dict, unstored: Transitions | None) -> None:
        arrays = None
        if config.checkpoint_replay:
            arrays = memory.state_dict()
            if unstored is not None:
                arrays.update(unstored_arrays(unstored))
        save_checkpoint(run_log.directory, state, learner.checkpoint().write, arrays)

    progress = Progress(config.timesteps, every_seconds=config.progress_every,
                        periods={"evaluation": config.evaluate,
                                 "checkpoint": config.checkpoint_every},
                        replay_start=config.replay_start, steps_per_update=config.train_freq,
                        epoch_steps=config.target_update,
                        long_run_note=CPU_LONG_RUN_NOTE if on_cpu else None)
    parts = LoopParts(config=config, learner=learner, memory=memory, pool=pool,
                      make_eval_pool=lambda should_stop: make_eval_pool(config, should_stop),
                      run_log=run_log,
                      rng=np.random.default_rng(seeds[1]), progress=progress,
                      save_checkpoint=save, stop=stop)
    loop_class = FastDQN if algo == ALGO_FAST_DQN else DQN
    return loop_class(parts), device


def report_crashes() -> None:
    """A crash in native code (TensorFlow, the emulators) then leaves the threads' Python stacks
    on the process's stderr instead of a bare exit status (faulthandler's best effort: it
    reads running threads' frames, and one caught mid-change cuts the dump short)."""
    try:
        faulthandler.enable(file=sys.__stderr__, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass  # no stderr file descriptor (an embedding host): nothing to write to


def main(argv: Sequence[str] | None, algo: str, exiting: bool = False) -> int:
    """Runs one entry point; returns the exit status. The stop request is installed first,
    so that a signal during the start is not lost; with `exiting` (the run scripts) a stop
    signal after the run is over is ignored, else the caller's handlers come back."""
    stop = StopRequest()
    stop.install()
    report_crashes()
    try:
        return _main(argv, algo, stop)
    except KeyboardInterrupt:
        warn("interrupted twice: stopping at once")
        return 128 + signal.SIGINT
    except OutputLost as error:  # before the run trained: a new run's directory is gone
        _silence_stdout()
        return _refuse(error)
    finally:
        stop.uninstall(ignore_later=exiting)


def _main(argv: Sequence[str] | None, algo: str, stop: StopRequest) -> int:
    try:
        config = prepare_config(argv, algo)
        select_device(config.device)  # before anything imports TensorFlow
    except ValueError as error:
        return _refuse(error)
    try:
        run_dir = (RunDirectory.reopen(Path(config.logdir)) if config.resume
                   else RunDirectory.create(Path(config.logdir)))
    except ValueError as error:
        if config.resume:
            return _finished_without_lock(config, algo, error)
        return _refuse(error)
    # The lock is held until the run is over; lost output at the start discards a new run.
    with run_dir, _discarded_if_output_lost(run_dir):
        manifest, checkpoint = None, None
        try:
            check_checkpoint_names(run_dir.directory)  # now, not at the first checkpoint
        except CheckpointError as error:
            if not config.resume:
                run_dir.discard()
            return _refuse(error)
        if config.resume:
            try:
                checkpoint, manifest = verified_checkpoint(config, algo)
                finished = checkpoint_finished(config, checkpoint, manifest)
            except (ValueError, CheckpointError) as error:
                return _refuse(error)
            if finished:
                return _nothing_left(run_dir.path, checkpoint_step(manifest), config)
            if stop:
                return _stopped_before_start(stop)
            say(f"resuming from {checkpoint} at step {checkpoint_step(manifest)}")
        run_log = RunLogs(run_dir.directory)
        if manifest is None:
            try:
                run_log.write_config({"algo": algo, **config.saved_settings(),
                                      "protocol_overrides": protocol_overrides(config),
                                      CODE_VERSIONS: [code_version(from_step=0)]})
            except WriteFailed as error:
                run_dir.discard()
                return _refuse(f"{error}; choose another --logdir")
        say(f"run directory: {run_dir.path}")
        for line in (variant_line(config), sync_point_note(config, algo)):
            if line:
                say(line)
        warning = disk_space_warning(run_dir.path, checkpoint_bytes(config), "a checkpoint")
        if warning:
            warn(warning)
        try:
            loop, device = build_loop(config, algo, run_log, stop)
        except (ValueError, WriteFailed) as error:  # e.g. no room on the device for the frames
            if manifest is None:
                run_dir.discard()
            return _refuse(error)
        if manifest is not None:
            try:
                resume(loop, manifest, checkpoint)
                if stop:  # reading a 7 GB memory takes a while: a signal ends the resume
                    loop.close()
                    return _stopped_before_start(stop)
                run_log.add_to_config({  # a resume's only change, and the code it runs
                    "timesteps": config.timesteps,
                    CODE_VERSIONS: with_resume_entry(run_log.config_value(CODE_VERSIONS),
                                                     code_version(loop.counters.step))})
            except (CheckpointError, ValueError, WriteFailed) as error:
                loop.close()
                return _refuse(f"cannot resume {run_dir.path}: {error}")
            except OutputLost:
                loop.close()
                raise
        kept_rows = (loop.counters.games.episodes, loop.evaluator.count) if manifest else None
        try:
            clear_leftovers(run_dir.directory)  # what a crash left, once the run is sure to go on
            run_log.open(kept_rows=kept_rows)
        except (WriteFailed, ValueError) as error:
            loop.close()
            run_dir.discard()  # a new run leaves nothing behind; a resumed one is kept
            return _refuse(error)
        return run(loop, run_log, device)


def variant_line(config: Config) -> str | None:
    """One line on how the run departs from Nature DQN (None for Nature DQN itself): its
    variants' labels (config.VARIANTS), the protocol's followed by the preset's settings
    that flags changed."""
    parts = []
    for variant in VARIANTS:
        label = variant.label(getattr(config, variant.field))
        if label is not None:
            parts.append(label)
        if variant.field == "protocol":
            overridden = protocol_overrides(config)
            if overridden:
                parts.append("changed by flags: " + ", ".join(
                    f"{flag_name(name)}={getattr(config, name)}" for name in overridden))
    return "; ".join(parts) if parts else None


def sync_point_note(config: Config, algo: str) -> str | None:
    """One line on the periods that the fast trainer, which evaluates and checkpoints at
    sync points only, cannot keep (None when it keeps them all, and for the serial one)."""
    if algo != ALGO_FAST_DQN:
        return None
    kept_apart = []
    for name in ("evaluate", "checkpoint_every"):
        period = getattr(config, name)
        steps = steps_at_sync_points(period, config, count=3,
                                     at_last_step=name == "evaluate")
        multiples = [period * k for k in range(1, len(steps) + 1)]
        if steps != multiples:
            shown = ", ".join(f"{step:,}" for step in steps)
            kept_apart.append(f"{flag_name(name)}={period} acts at step {shown}, ...")
    if not kept_apart:
        return None
    return (f"note: evaluations and checkpoints come at sync points only (every "
            f"--target-update={config.target_update} steps from --replay-start="
            f"{config.replay_start}), so {'; '.join(kept_apart)}")


def _stopped_before_start(stop: StopRequest) -> int:
    """A resume signalled before it changed anything: its checkpoint stays the latest."""
    warn("stopped before the resumed run began; nothing was changed")
    return 128 + stop.signal_number


def _nothing_left(run_dir: Path, step: int, config: Config) -> int:
    """A resume of a run whose checkpoint holds all its work: it says so and succeeds, so that
    a sweep or a requeued job ends instead of trying again."""
    say(f"{run_dir} is finished: its checkpoint at step {step} holds all the work of "
        f"--timesteps={config.timesteps}; nothing to do (a larger --timesteps extends it)")
    return 0


def _finished_without_lock(config: Config, algo: str, refusal: ValueError) -> int:
    """A resume whose directory could not be locked for writing (a read-only file system):
    a finished run is still finished, and saying so writes nothing; a shared lock keeps out
    a run that holds the directory. Anything else gets `refusal`."""
    with _shared_lock(Path(config.logdir)) as locked:
        if not locked:
            return _refuse(refusal)
        try:
            checkpoint, manifest = verified_checkpoint(config, algo)
            finished = checkpoint_finished(config, checkpoint, manifest)
        except (ValueError, CheckpointError):
            return _refuse(refusal)
        if not finished:
            return _refuse(refusal)
        return _nothing_left(Path(config.logdir), checkpoint_step(manifest), config)


@contextlib.contextmanager
def _shared_lock(run_dir: Path) -> Iterator[bool]:
    """Holds a shared lock on the run's lock file, opened for reading only; yields whether
    no process holds the directory. A directory without a lock file has no holder: a run
    makes the file before it writes anything else."""
    fd = None
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        free = run_dir.is_dir()
    except OSError:  # a link, or no right to read it
        free = False
    else:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            free = True
        except OSError:  # held by a live run (or a file system without locks)
            free = False
    try:
        yield free
    finally:
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def _discarded_if_output_lost(run_dir: RunDirectory) -> Iterator[None]:
    """Standard output failed before the run trained (`OutputLost`): a new run's directory
    is discarded, so that the same command can run again; a resumed run's is kept."""
    try:
        yield
    except OutputLost:
        run_dir.discard()  # a resumed run's directory is only released
        raise


def say(line: str) -> None:
    """Prints one line of the run's start on stdout.

    Raises:
        OutputLost: stdout cannot be written (a closed pipe, a full device).
    """
    try:
        print(line, flush=True)
    except OSError as error:
        raise OutputLost(f"cannot write to standard output: {error.strerror or error}; "
                         "stopped before the run began") from None


def warn(line: str) -> None:
    """Prints one line on stderr, if stderr can be written (it may not: the line is lost)."""
    with contextlib.suppress(OSError):
        print(line, file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """Points fd 1 at the null device once stdout is lost, as Python's documentation advises
    for a closed pipe, so that the interpreter's last flush does not fail (exit status 120)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)


def _refuse(error: Exception | str) -> int:
    warn(f"{Path(sys.argv[0]).name}: error: {error}")
    return 2


def resume(loop: TrainingLoop, manifest: dict, checkpoint: Path) -> None:
    """Continues a run from its verified checkpoint (`restore_loop`) and checks that the
    CSVs hold what it counted; the run's files are changed only after it succeeds.

    Raises:
        CheckpointError: a file or a value does not fit this run.
        ValueError: the CSVs disagree with the checkpoint.
    """
    if not restore_loop(loop, checkpoint, manifest):
        warn("warning: the checkpoint holds no replay memory; the resumed run refills it "
             f"for {loop.config.replay_start} steps before it learns again")
    check_logs_match(loop.run_log.directory, loop.counters.step,
                     loop.counters.games.episodes, loop.evaluator.count)


def run_summary(loop: TrainingLoop, finished: bool, device: str) -> dict:
    """What summary.json says about a run, however it ended (figures of the whole run)."""
    counters, evaluator = loop.counters, loop.evaluator
    steps_per_second, updates_per_second = counters.rates()
    return {
        "finished": finished, "algo": loop.algo, "game": loop.config.game,
        "seed": loop.config.seed, "steps": counters.step, "updates": counters.updates,
        "wall_seconds": counters.hours() * 3600.0, "steps_per_second": steps_per_second,
        "updates_per_second": updates_per_second, "evaluations": evaluator.count,
        "last_evaluation": evaluator.last,
        # How Machado et al. (2018) report a run: the training games' mean return at its end.
        "training_games": counters.games.episodes,
        "training_return_last_100": counters.recent_mean_score(), "device": device,
        "stopped_by_signal": loop.stop.signal_number,
    }


def write_failed_line(error: WriteFailed, loop: TrainingLoop, run_dir: Path) -> str:
    """The one line for a file the run could not write: which, and what to resume from."""
    if isinstance(error, RunDirGone):  # nothing is left to resume from
        return f"error: {error}"
    if loop.saved_at is None:
        return f"error: {error}; no checkpoint had been written yet"
    return (f"error: {error}; the last checkpoint (step {loop.saved_at}) in "
            f"{run_dir / CHECKPOINT} is intact: resume with {resume_command(loop.algo)} "
            f"--resume {shlex.quote(str(run_dir))}")


def exit_status(loop: TrainingLoop) -> int:
    """0 once the run's work is done, though a stop came (during its final checkpoint, say);
    128 + the signal while a stop leaves work to do, which a resume does."""
    if loop.finished() or not loop.stop:
        return 0
    return 128 + loop.stop.signal_number


def run(loop: TrainingLoop, run_log: RunLogs, device: str) -> int:
    """Runs the loop; the summary is written however it ends. Returns the exit status."""
    status, message = 1, None
    try:
        loop.run()
        status = exit_status(loop)
    except NonFiniteLoss as error:
        message = f"error: {error}"
    except WriteFailed as error:
        message = write_failed_line(error, loop, run_log.run_dir)
    except KeyboardInterrupt:
        message = "interrupted twice: stopping at once"
        status = 128 + signal.SIGINT
    finally:
        finished = message is None and loop.finished()
        if loop.progress is not None:
            loop.progress.close()
        loop.close()
        try:
            run_log.write_summary(run_summary(loop, finished=finished, device=device))
            run_log.close()
        except WriteFailed as error:
            if message is None:  # the first failure is the one to report
                message, status = write_failed_line(error, loop, run_log.run_dir), 1
    with contextlib.suppress(OSError):  # a terminal hung up: the files say it all
        if message is not None:
            print(message, file=sys.stderr)
        print(last_line(loop, run_log, finished and status == 0, failed=status == 1),
              flush=True)
    return status


def last_line(loop: TrainingLoop, run_log: RunLogs, finished: bool, *, failed: bool) -> str:
    """The run's last line: "done: ..." for a finished run only; for one stopped with work
    left, where it stopped and the command that goes on; after an error (on stderr just
    before it), where it stopped and where its files are."""
    counters, config = loop.counters, loop.config
    gone = run_log.directory.gone()
    run_dir = run_log.run_dir  # where it is now, if it was moved
    files = "no files: the run directory was deleted" if gone else f"files in {run_dir}"
    if finished:
        steps_per_second, updates_per_second = counters.rates()
        return (f"done: {counters.step} steps, {counters.updates} updates; "
                f"{steps_per_second:.0f} steps/s and {updates_per_second:.0f} updates/s "
                f"after the replay start; {files}")
    where = f"stopped at step {counters.step} of {config.timesteps}"
    if failed or gone:
        return f"{where} by the error above; {files}"
    if loop.saved_at is None:
        return f"{where} before its first checkpoint; {files}"
    resume = f"{resume_command(loop.algo)} --resume {shlex.quote(str(run_dir))}"
    if loop.saved_at != counters.step:  # a second signal cut the stop's checkpoint short
        return f"{where}; resume from its checkpoint at step {loop.saved_at} with: {resume}"
    return f"{where}; resume with: {resume}"
