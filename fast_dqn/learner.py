"""The learner: online and target networks, the optimizer, and the traced calls that run the
learning rule (`update_rule.dqn_update`, not reimplemented here) and the greedy queries.

An update call runs the rule once or K times (`in_order`), from a host minibatch or from
slots gathered on the device, compiled with XLA and dispatched directly (`direct_calls`).
The simulated GPU substitutes the calls and their dispatch (`traced_calls`, `dispatch`).
"""

from __future__ import annotations

import collections
import functools
import random
import sys
import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fast_dqn.config import Config
from fast_dqn.direct_calls import Dispatch, DirectCalls, run_call
from fast_dqn.networks import build_nature_cnn, greedy
from fast_dqn.tensorflow_start import quiet_tensorflow_start
from fast_dqn.replay_memory import Minibatches
from fast_dqn.transitions import MINIBATCH_COLUMNS, STATE_SHAPE, Batch, SlotBatch
from fast_dqn.update_rule import UpdateFunction, dqn_update, make_optimizer

with quiet_tensorflow_start():
    import tensorflow as tf

keras = tf.keras
SLOT_UPDATES = ("update_slots", "update_many_slots")  # the calls' purposes: 1 or K updates
# Every traced call by purpose: the samplers' query of the target network, the online
# network's query, and the updates from host minibatches and from slots, 1 or K per call.
CALL_PURPOSES = ("query", "online_query", "update", "update_many", *SLOT_UPDATES)
# The name under which a checkpoint keeps each optimizer's slots. Both keep two slots per
# weight, which TensorFlow matches by shape alone: apart, `restore` can refuse the other
# optimizer's in one line.
OPTIMIZER_CHECKPOINT_KEYS = {"rmsprop": "optimizer", "adam": "adam_optimizer"}

# xla -> the traced function of each of CALL_PURPOSES: what a learner's calls run.
TracedCalls = Callable[[bool], Mapping[str, Any]]


def gather_states(frames: tf.Tensor, slots: tf.Tensor, mask: tf.Tensor) -> tf.Tensor:
    """frames[slots], the masked frames taken from `frames`' last row, which is zero
    (`DeviceFrames`): `HostFrames.gather`'s states without a zeroing pass over them
    (docs/throughput.md)."""
    zero_slot = tf.cast(tf.shape(frames)[0] - 1, slots.dtype)
    return tf.gather(frames, tf.where(tf.cast(mask, tf.bool), slots, zero_slot))


def in_order(step: Any, count: tf.Tensor, collect: bool = False) -> tf.Tensor | None:
    """step(k) for k = 0, ..., count - 1, one at a time (each update reads the weights the
    one before wrote); with `collect`, their outputs, flat. A loop, not unrolled copies: one
    trace serves every count, and tracing costs the same for any (docs/throughput.md)."""
    if not collect:
        def body(k: tf.Tensor) -> tuple[tf.Tensor]:
            step(k)
            return (k + 1,)

        tf.while_loop(lambda k: k < count, body, (tf.constant(0),), parallel_iterations=1)
        return None

    def collecting(k: tf.Tensor, outputs: tf.TensorArray) -> tuple[tf.Tensor, tf.TensorArray]:
        return k + 1, outputs.write(k, step(k))

    _, outputs = tf.while_loop(lambda k, _: k < count, collecting,
                               (tf.constant(0), tf.TensorArray(tf.float32, size=count)),
                               parallel_iterations=1)
    return tf.reshape(outputs.stack(), [-1])


def gathered_batch(frames: tf.Tensor, slots: SlotBatch) -> Batch:
    """The minibatch of `slots`, its states gathered from the replay frames on the device."""
    return Batch(states=gather_states(frames, slots.state_slots, slots.state_mask),
                 next_states=gather_states(frames, slots.next_slots, slots.next_mask),
                 **{name: getattr(slots, name) for name in MINIBATCH_COLUMNS})


class Learner:
    """The online and target networks, the optimizer, and the traced calls on them: K
    updates from K minibatches in one call, and the greedy queries the actors make.

    Thread use: in the fast scheme the learner thread calls `update` and the acting loop
    `greedy_actions(use_target=True)`; `sync_target` runs only at sync points, with the
    learner thread drained, so the two never race.

    `seed` fixes the initial weights (no global generator is touched). `replay_frames` is
    the memory's frames on the device (`FrameStore.device_frames`), for updates from slots.
    With `td_errors` an update call returns each transition's TD error; without, none, since
    that output makes TensorFlow's graph optimizer arrange the update otherwise, and the
    weights differ in their last bits. `precision` is what the networks compute in
    (`build_nature_cnn`); their weights and the optimizer's slots are float32 at either.
    `update_function` replaces the learning rule; `traced_calls` (every purpose in
    `CALL_PURPOSES`, or refused) and `dispatch` are the simulated GPU's, which replaces
    whole calls so that its host cost is the real calls'.
    """

    def __init__(self, n_actions: int, *, lr: float, rho: float, epsilon: float, seed: int,
                 xla: bool = False, double: bool = False, dueling: bool = False,
                 optimizer: str = Config.optimizer, loss: str = Config.loss,
                 precision: str = Config.precision,
                 replay_frames: tf.Variable | None = None, td_errors: bool = False,
                 update_function: UpdateFunction | None = None,
                 traced_calls: TracedCalls | None = None, dispatch: Dispatch = run_call):
        self.n_actions = n_actions
        seeds = random.Random(seed)
        self.online = build_nature_cnn(n_actions, "online", seeds, dueling, precision)
        self.target = build_nature_cnn(n_actions, "target", seeds, dueling, precision)
        self.optimizer_name = optimizer
        self.optimizer = make_optimizer(optimizer, lr=lr, rmsprop_rho=rho,
                                        rmsprop_epsilon=epsilon)
        self.optimizer.build(self.online.trainable_variables)
        self.replay_frames = replay_frames
        self.returns_td_errors = td_errors
        self.update_function: UpdateFunction = update_function or functools.partial(
            dqn_update, double=double, loss=loss)
        self._traced_calls = traced_calls or self._own_calls
        self._dispatch = dispatch
        # Sums over the updates since the last `take_train_stats`, kept on the device so
        # that an update never waits for a host copy. The run counts the updates.
        self._loss_sum = tf.Variable(0.0, trainable=False)
        self._q_sum = tf.Variable(0.0, trainable=False)
        self.sync_target()
        # Called with one line if this device cannot compile with XLA (else it is printed).
        self.on_xla_fallback: Callable[[str], None] | None = None
        self._fallback_lock = threading.Lock()
        self._build_functions(xla)

    def _build_functions(self, xla: bool) -> None:
        """The traced calls (this learner's own, or the ones substituted), called directly."""
        self.xla = xla
        functions = dict(self._traced_calls(xla))
        if set(functions) != set(CALL_PURPOSES):
            raise ValueError(f"traced calls for {sorted(functions)}, not for "
                             f"{sorted(CALL_PURPOSES)}")
        self._functions = functions
        self.direct_calls = DirectCalls(dispatch=self._dispatch)

    def _own_calls(self, xla: bool) -> dict[str, Any]:
        """The traced calls: the update, K updates in one call, both from frames on the
        device, and the greedy queries. With `xla` the update and the samplers' query are
        compiled, each one program: on a GPU one launch instead of one per op."""
        self._update_fn = tf.function(self._update, jit_compile=xla, reduce_retracing=True)
        # One trace for every count of updates per call (a loop, see `in_order`), itself not
        # compiled: with XLA its iterations call the compiled single update (`_updates`).
        self._update_many_fn = tf.function(self._updates, jit_compile=False)
        # The same two, gathering the states from the replay memory's frames on the device.
        self._update_slots_fn = tf.function(self._update_from_slots, jit_compile=xla,
                                            reduce_retracing=True)
        self._update_many_slots_fn = tf.function(self._updates_from_slots, jit_compile=False)
        # The samplers' batched query of the target network has one batch size (W) for the
        # whole run, so XLA compiles it once; the online network's queries come in every
        # size an evaluation's shrinking set of games asks for, each a compilation.
        self._greedy_fns = {
            True: tf.function(self._greedy_target, jit_compile=xla, reduce_retracing=True),
            False: tf.function(self._greedy_online, reduce_retracing=True),
        }
        return {"query": self._greedy_fns[True], "online_query": self._greedy_fns[False],
                "update": self._update_fn, "update_many": self._update_many_fn,
                SLOT_UPDATES[0]: self._update_slots_fn,
                SLOT_UPDATES[1]: self._update_many_slots_fn}

    def sync_target(self) -> None:
        for target_var, online_var in zip(self.target.variables, self.online.variables):
            target_var.assign(online_var)

    def _greedy_target(self, states: tf.Tensor) -> tf.Tensor:
        return greedy(self.target, states)

    def _greedy_online(self, states: tf.Tensor) -> tf.Tensor:
        return greedy(self.online, states)

    def greedy_actions(self, states: np.ndarray, use_target: bool = True) -> np.ndarray:
        """argmax_a Q(s, a) for a batch of uint8 states (B, HISTORY, 84, 84)."""
        if use_target:
            outputs = self._call_directly("query", [states], borrow=True)
            return outputs[0].numpy()
        return self._call_directly("online_query", [states], any_count=True,
                                   borrow=True)[0].numpy()

    def _call_directly(self, purpose: str, arrays: list[np.ndarray],
                       variables: tuple[tf.Variable, ...] = (),
                       any_count: bool = False, borrow: bool = False) -> Sequence[tf.Tensor]:
        """The traced function of `purpose` on `arrays`, called directly (`DirectCalls`).
        Where XLA cannot compile it on this device, the learner goes on uncompiled and the
        call is made again: a call that failed to compile has changed nothing."""
        try:
            return self.direct_calls.call(purpose, self._functions[purpose], arrays,
                                          variables, any_count, borrow)
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError,
                tf.errors.InternalError) as error:
            if not (self.xla and _xla_refused(error)):
                raise
            self._run_uncompiled(error)
            return self.direct_calls.call(purpose, self._functions[purpose], arrays,
                                          variables, any_count, borrow)

    def _run_uncompiled(self, error: Exception) -> None:
        """Rebuilds the calls without XLA, once, and says so in one line."""
        with self._fallback_lock:
            if not self.xla:
                return  # the other thread's call fell back first
            self._build_functions(False)
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        line = (f"note: XLA could not compile on this device ({reason}); the run goes on "
                "uncompiled, as with --xla=off")
        if self.on_xla_fallback is not None:
            self.on_xla_fallback(line)
        else:
            print(line, file=sys.stderr, flush=True)

    # The traced bodies. A minibatch arrives column by column, in the order of its named
    # tuple (`Batch`, `SlotBatch`, made from `transitions.MINIBATCH_COLUMNS`), and is
    # rebuilt by name before the learning rule reads it.

    def _update(self, *columns: tf.Tensor) -> tf.Tensor | None:
        """One update: the learning rule on the minibatch, its stats summed on the device;
        returns its TD errors where they are asked for."""
        stats = self.update_function(self.online, self.target, self.optimizer, Batch(*columns))
        self._loss_sum.assign_add(stats.loss)
        self._q_sum.assign_add(stats.mean_q)
        return stats.td_errors if self.returns_td_errors else None

    def _update_from_slots(self, frames: tf.Tensor, *columns: tf.Tensor) -> tf.Tensor | None:
        return self._update(*gathered_batch(frames, SlotBatch(*columns)))

    def _updates(self, *stacked: tf.Tensor) -> tf.Tensor | None:
        # With XLA each iteration calls the compiled single update: one launch per update,
        # the same floats as K single calls (a compiled loop of K gives other floats).
        step = self._update_fn if self.xla else self._update
        return in_order(lambda k: step(*(column[k] for column in stacked)),
                        tf.shape(stacked[0])[0], self.returns_td_errors)

    def _updates_from_slots(self, frames: tf.Tensor, *stacked: tf.Tensor) -> tf.Tensor | None:
        step = self._update_slots_fn if self.xla else self._update_from_slots
        return in_order(lambda k: step(frames, *(column[k] for column in stacked)),
                        tf.shape(stacked[0])[0], self.returns_td_errors)

    # The host's calls.

    def update(self, minibatches: Minibatches, count: int) -> tf.Tensor | None:
        """`count` updates in one call, update k on rows k * B ... (k + 1) * B - 1 of
        `minibatches` (a `Batch`, or a `SlotBatch` gathered from `replay_frames`): the same
        updates as `count` single calls, paying the per-call host cost once. Returns the
        count * B TD errors with `td_errors` (reading them waits for the updates), else None."""
        slots = isinstance(minibatches, SlotBatch)
        variables = (self.replay_frames,) if slots else ()
        purposes = SLOT_UPDATES if slots else ("update", "update_many")
        if count == 1:
            outputs = self._call_directly(purposes[0], list(minibatches), variables)
        else:
            size = len(minibatches.actions) // count
            stacked = [column.reshape(count, size, *column.shape[1:]) for column in minibatches]
            outputs = self._call_directly(purposes[1], stacked, variables, any_count=True)
        return outputs[0] if outputs else None

    def take_train_stats(self, updates: int) -> tuple[float, float]:
        """Mean loss per transition and mean Q(s, a) over the `updates` updates made
        since the last call (the run counts them: `RunCounters.updates`), NaN for none; the
        sums start again from zero. Reading them waits for the updates under way."""
        loss_sum, q_sum = float(self._loss_sum.numpy()), float(self._q_sum.numpy())
        self._loss_sum.assign(0.0)
        self._q_sum.assign(0.0)
        if updates == 0:
            return float("nan"), float("nan")
        return loss_sum / updates, q_sum / updates

    def restore(self, prefix: str) -> None:
        """Reads both networks and the optimizer's slots from a checkpoint of `checkpoint()`.

        Raises:
            ValueError: no checkpoint at `prefix`, a damaged one, or one that does not fit
                this network (another game's action count, another optimizer's slots).
        """
        try:
            saved = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(prefix)}
            for optimizer, key in OPTIMIZER_CHECKPOINT_KEYS.items():
                if key in saved and optimizer != self.optimizer_name:
                    raise ValueError(f"it holds the slots of --optimizer={optimizer}, and "
                                     f"this run's optimizer is {self.optimizer_name}")
            self.checkpoint().read(prefix).assert_consumed()
        except (tf.errors.OpError, ValueError, AssertionError) as error:
            message = " ".join(str(error).split())
            raise ValueError(f"cannot restore the networks from {prefix}: {message}") from None

    def restore_online(self, prefix: str) -> None:
        """Reads only the online network from a checkpoint written by `checkpoint()`.

        Raises:
            ValueError: no checkpoint at `prefix`, a damaged one, or one whose online network
                is missing or has other shapes (another game's action count).
        """
        try:
            status = tf.train.Checkpoint(online=self.online).read(prefix)
            status.expect_partial()  # the target network and optimizer slots are not needed
            status.assert_existing_objects_matched()  # every online weight came from the file
        except (tf.errors.OpError, ValueError, AssertionError) as error:
            message = " ".join(str(error).split())
            raise ValueError(f"cannot restore the online network from {prefix} "
                             f"({self.n_actions} actions): {message}") from None

    def checkpoint(self) -> tf.train.Checkpoint:
        """Networks and optimizer slots, saved by TensorFlow's own format (no pickles)."""
        return tf.train.Checkpoint(online=self.online, target=self.target, **{
            OPTIMIZER_CHECKPOINT_KEYS[self.optimizer_name]: self.optimizer})

# Graph nodes the runtime does not dispatch as work: constants and the function's inputs.
_NOT_DISPATCHED = frozenset({"Const", "Placeholder", "NoOp"})


def dispatched_ops(learner: Learner, batch_size: int,
                   num_envs: int) -> tuple[collections.Counter, collections.Counter]:
    """The framework ops, by type, that the host dispatches one by one for one minibatch
    update and for one batched query of `num_envs` states when they are not compiled: the
    nodes of their traced graphs but constants and inputs, counted before TensorFlow's graph
    optimizer. With XLA each of the two runs as one compiled program: one launch."""
    states = tf.TensorSpec((batch_size, *STATE_SHAPE), tf.uint8)
    minibatch = Batch(states=states, next_states=states, **{
        name: tf.TensorSpec((batch_size, *shape), tf.as_dtype(dtype))
        for name, (shape, dtype) in MINIBATCH_COLUMNS.items()})
    update = learner._update_fn.get_concrete_function(*minibatch)
    query = learner._greedy_fns[True].get_concrete_function(
        tf.TensorSpec((num_envs, *STATE_SHAPE), tf.uint8))
    return _op_types(update), _op_types(query)


def _op_types(concrete: Any) -> collections.Counter:
    return collections.Counter(op.type for op in concrete.graph.get_operations()
                               if op.type not in _NOT_DISPATCHED)


def _xla_refused(error: Exception) -> bool:
    """Whether a call's error is XLA declining to compile it (not a failure of the run)."""
    text = str(error)
    return "XLA" in text or "jit_compile" in text or "compil" in text.lower()


def learner_settings(config: Config) -> dict[str, Any]:
    """Learner's keyword arguments from `config` (optimizer, loss, Double DQN, dueling,
    precision)."""
    return dict(lr=config.lr, rho=config.rmsprop_rho, epsilon=config.rmsprop_epsilon,
                seed=config.seed, xla=config.xla == "on", double=config.double,
                dueling=config.dueling, optimizer=config.optimizer, loss=config.loss,
                precision=config.precision, td_errors=config.prioritized)


def make_learner(config: Config, n_actions: int,
                 replay_frames: tf.Variable | None = None) -> Learner:
    """The run's learner, as `config` describes it (`learner_settings`)."""
    return Learner(n_actions, replay_frames=replay_frames, **learner_settings(config))
