"""pytfcomm's ``PreemptionCheckpointHandler``: TF's behaviour, agreed on pytfcomm collectives.

What TF's handler does under TF's ``MultiWorkerMirroredStrategy`` (TF 2.21,
``failure_handling.py``), this one does under ``pytfcomm.MultiWorkerMirroredStrategy``:

* it restores the latest checkpoint of ``checkpoint_dir`` on construction and counts
  ``run()`` calls in the checkpoint (``checkpointed_runs``, TF's name);
* a SIGTERM (or ``termination_watcher_fn`` returning True) on any worker makes every
  worker save a checkpoint before the same ``run()`` call: the chief into
  ``checkpoint_dir``, the others into ``workertemp_<task id>`` beside it, removed again
  (TF's rule); then every worker calls ``exit_fn`` (default ``sys.exit(42)``);
* with a ``grace_period``, every worker saves at once, trains on, and saves and exits
  together when the signalled worker's grace period (less TF's margin of six estimated
  steps) is nearly over.

TF agrees on the step through its coordination service (the signalled worker publishes
"step N+1" and waits for every worker's acknowledgement). Here every ``run()`` starts
with one all-reduce (max) of four int64 on the strategy's communicator: who saw a
signal, whether a grace period has run out, and the run count (which must be equal
everywhere). All workers thus learn of a signal before the same step, with no thread
and no key-value store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import tensorflow as tf

from ..errors import CommError, ConfigError, MismatchError
from . import _tf_failure_handling as tfh
from ._preemption_registry import strategy_for

__all__ = ["Handler"]

_LOG = logging.getLogger("pytfcomm.preemption")
#: The name under which the handler's collectives run (docs/negotiation.md).
STREAM = "pytfcomm.preemption"
_POLL_SECONDS = 1.0  # TF's interval for termination_watcher_fn
_BUFFER_FACTOR = 3  # TF's: stop 3 * 2 estimated steps before the grace period ends


class Handler(tfh.handler_class()):  # type: ignore[misc]
    """``tf.distribute.experimental.PreemptionCheckpointHandler`` for pytfcomm's strategy.

    Constructed in place of TF's class (same arguments) when that is created for a
    ``pytfcomm.MultiWorkerMirroredStrategy``; see the module docstring.
    """

    def __init__(
        self,
        cluster_resolver: Any,
        checkpoint_or_checkpoint_manager: Any,
        checkpoint_dir: str | None = None,
        termination_config: Any = None,
    ) -> None:
        strategy = strategy_for(cluster_resolver)
        if strategy is None:
            raise ConfigError(
                "pytfcomm's PreemptionCheckpointHandler needs a pytfcomm."
                "MultiWorkerMirroredStrategy: construct it in that strategy's scope or pass "
                "its cluster_resolver"
            )
        manager = checkpoint_or_checkpoint_manager
        if isinstance(manager, tf.train.Checkpoint) and not checkpoint_dir:
            raise tf.errors.InvalidArgumentError(
                None, None, "When a checkpoint is passed, a checkpoint_dir must be passed as well."
            )
        self._comm = strategy.communicator
        self._cluster_resolver = cluster_resolver
        self._checkpoint_dir = checkpoint_dir
        self._is_chief = bool(strategy.extended.should_checkpoint)
        self._task_id = int(getattr(strategy.extended, "_task_id", None) or 0)
        config = termination_config or tf.distribute.experimental.TerminationConfig()
        self._termination_watcher_fn = config.termination_watcher_fn
        self._exit_fn: Callable[[], Any] = config.exit_fn or _default_exit
        self._grace_period = config.grace_period or 0
        self._save_fn = config.save_fn
        self._make_managers(manager)
        self._checkpointed_runs = tf.Variable(
            tf.constant(0, tf.int64), trainable=False, name=tfh.ITERATION_VARIABLE
        )
        for m in (self._write_checkpoint_manager, self._read_checkpoint_manager):
            if not hasattr(m.checkpoint, tfh.ITERATION_VARIABLE):
                setattr(m.checkpoint, tfh.ITERATION_VARIABLE, self._checkpointed_runs)
        self._read_checkpoint_manager.restore_or_initialize()
        self._run_counter = int(self._checkpointed_runs.numpy())
        self._estimated_run_time = 0.0
        self._final_checkpoint_countdown = False
        self._exited = False
        self._target_time_for_termination = float("inf")
        self._received_own_sigterm = threading.Event()
        self._received_own_sigterm_time = 0.0
        self._poll_thread: threading.Thread | None = None
        self._stop_polling = threading.Event()
        if self._termination_watcher_fn:
            self._poll_thread = threading.Thread(
                target=self._poll_termination_signal,
                name=f"PytfcommTerminationWatcher-{self._comm.rank}",
                daemon=True,
            )
            self._poll_thread.start()
        else:
            signal.signal(signal.SIGTERM, self._sigterm_handler_fn)

    def _make_managers(self, given: Any) -> None:
        """TF's rule: the chief writes into the directory, other workers beside it."""
        if isinstance(given, tf.train.CheckpointManager):
            self._read_checkpoint_manager = self._write_checkpoint_manager = given
            self._api_made_checkpoint_manager = False
            return
        self._api_made_checkpoint_manager = True
        assert self._checkpoint_dir is not None  # __init__ refuses a checkpoint without one
        self._read_checkpoint_manager = tf.train.CheckpointManager(
            given, directory=self._checkpoint_dir, max_to_keep=1
        )
        if self._is_chief:
            self._write_checkpoint_manager = self._read_checkpoint_manager
        else:
            self._write_checkpoint_manager = tf.train.CheckpointManager(
                given, tfh.non_chief_dir(self._checkpoint_dir, self._task_id), max_to_keep=1
            )

    # -- public API (TF's) ---------------------------------------------------------

    @property
    def total_run_calls(self) -> int:
        """The number of ``run()`` calls, those before the restored checkpoint included."""
        return self._run_counter

    def run(self, distributed_train_function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one step, after saving a checkpoint and exiting if any worker was signalled.

        Every worker must call it once per step (it starts with a collective).
        """
        self._check_preemption_and_maybe_checkpoint()
        began = time.time()
        result = distributed_train_function(*args, **kwargs)
        took = time.time() - began
        self._run_counter += 1
        self._estimated_run_time += (took - self._estimated_run_time) / self._run_counter
        return result

    def save_checkpoint_if_preempted(self, *args: Any, **kwargs: Any) -> None:
        """Save (``CheckpointManager.save(*args, **kwargs)``), exit if any worker was signalled."""
        self._check_preemption_and_maybe_checkpoint(*args, **kwargs)
        self._run_counter += 1
        self._estimated_run_time = 0.0

    @contextlib.contextmanager
    def watch_preemption_scope(self) -> Iterator[None]:
        """Nothing to watch here (as for TF's strategy): errors reach every worker anyway."""
        yield

    # -- agreement -----------------------------------------------------------------

    def _check_preemption_and_maybe_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        """Agree with every worker whether to save now; save, and maybe exit, if so.

        (TF's name: tf-keras' ``BackupAndRestore(save_before_preemption=True)`` calls it.)
        """
        if self._exited:
            return  # an exit_fn that returned: like TF's handler, save no more
        seen = self._received_own_sigterm.is_set()
        due = seen and self._final_checkpoint_countdown
        due = due and time.time() >= self._target_time_for_termination
        first_seen, any_due = self._agree(seen, due)
        if first_seen < 0 or (self._final_checkpoint_countdown and not any_due):
            return
        _LOG.warning(
            "PreemptionCheckpointHandler: worker %d was told to terminate; every worker "
            "saves a checkpoint before run %d",
            first_seen,
            self._run_counter,
        )
        self._save_checkpoint(*args, **kwargs)
        if self._grace_period <= 0 or self._final_checkpoint_countdown:
            self._exit()
            return
        self._final_checkpoint_countdown = True
        if seen:
            margin = _BUFFER_FACTOR * self._estimated_run_time * 2
            self._target_time_for_termination = (
                self._received_own_sigterm_time + self._grace_period - margin
            )
        _LOG.warning("PreemptionCheckpointHandler: training on for the grace period")

    def _agree(self, seen: bool, due: bool) -> tuple[int, bool]:
        """(the lowest signalled rank or -1, whether any grace period ran out), from all."""
        size, runs = self._comm.size, self._run_counter
        mine = np.array([size - self._comm.rank if seen else 0, int(due), runs, -runs], np.int64)
        got = self._comm.allreduce(mine, op="max", name=STREAM)
        if int(got[2]) != -int(got[3]):
            raise MismatchError(
                "PreemptionCheckpointHandler: the workers are at different run counts "
                f"({-int(got[3])} to {int(got[2])}; worker {self._comm.rank}: {runs}): every "
                "worker must call run() once per step, and all must restore the same checkpoint"
            )
        return (size - int(got[0]) if got[0] else -1), bool(got[1])

    def _save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self._checkpointed_runs.assign(self._run_counter)
        began = time.monotonic()
        with tfh.save_context():
            if self._save_fn:
                self._save_fn(*args, **kwargs)
            else:
                self._write_checkpoint_manager.save(*args, **kwargs)
        self._checkpoint_time = time.monotonic() - began
        _LOG.warning(
            "PreemptionCheckpointHandler: worker %d saved run %d into %s in %.3f s",
            self._comm.rank,
            self._run_counter,
            self._write_checkpoint_manager.directory,
            self._checkpoint_time,
        )

    def _exit(self) -> None:
        """Clean up as TF does, wait until every worker has saved, then ``exit_fn``."""
        self._stop_poll_termination_signal_thread()
        if self._api_made_checkpoint_manager and not self._is_chief:
            tf.io.gfile.rmtree(os.path.dirname(self._write_checkpoint_manager.directory))
        try:
            self._comm.barrier(name=STREAM)
        except CommError as exc:  # this worker's checkpoint is complete all the same
            _LOG.warning("PreemptionCheckpointHandler: not every worker saved: %s", exc)
        _LOG.warning("PreemptionCheckpointHandler: checkpoint saved; exiting")
        self._exited = True  # on every worker at the same run: they skip the agreement alike
        self._exit_fn()

    # -- this worker's signal --------------------------------------------------------

    def _sigterm_handler_fn(self, signum: int, frame: Any) -> None:
        del signum, frame
        self._maybe_set_received_own_sigterm()

    def _maybe_set_received_own_sigterm(self) -> None:
        if not self._received_own_sigterm.is_set():
            self._received_own_sigterm_time = time.time()
            self._received_own_sigterm.set()

    def _poll_termination_signal(self) -> None:
        while not self._stop_polling.is_set():
            if self._termination_watcher_fn():
                self._maybe_set_received_own_sigterm()
                return
            self._stop_polling.wait(_POLL_SECONDS)

    def _stop_poll_termination_signal_thread(self) -> None:
        self._stop_polling.set()
        thread, self._poll_thread = self._poll_thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _stop_cluster_wise_termination_watcher_thread(self) -> None:
        pass  # no such thread here (TF's __del__ and tf-keras may call it)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._stop_polling.set()


def _default_exit() -> None:
    sys.exit(tfh.DEFAULT_EXIT_CODE)
