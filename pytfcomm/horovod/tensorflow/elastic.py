"""Horovod's elastic training API for TensorFlow, on ``pytfcomm-run --elastic`` or
``--restarts``.

Horovod recovers from a lost worker inside the surviving processes: they roll
their state back to the last ``commit()``, rendezvous again (with hosts added
or removed) and go on. Under ``pytfcomm-run --elastic`` ``@hvd.elastic.run``
does the same when hosts are removed: on :class:`~pytfcomm.PeerLostError`
(``HorovodInternalError`` here) it restores the last commit in memory, re-forms
the communicator among the survivors (:func:`pytfcomm.elastic.reform`), runs the
reset callbacks, syncs from the new rank 0 and calls ``func`` again, in the same
process (docs/elastic.md). When workers wait to join (``--host-discovery-script``),
``state.commit()`` raises :class:`HostsUpdatedInterrupt` on every rank at the same
commit (``check_host_updates``: rank 0's answer, broadcast); ``run`` then re-forms
with the joiners, without a restore, and goes on the same way; a joiner's
``hvd.init()`` waits for that commit and its ``run`` starts with the sync, so it
gets rank 0's state. Otherwise the launcher recovers by restarting *every*
rank (``pytfcomm-run --restarts N``), and this module gives Horovod's API that
meaning:

* ``state.commit()`` saves the state in memory (for ``restore()``) and, when
  ``PYTFCOMM_ELASTIC_DIR`` is set (``pytfcomm-run --restarts`` sets it to a
  directory that lives as long as the launcher), rank 0 also writes it there,
  atomically, as a new 0600 file; it loads back only a file of this user's that
  group and others cannot write, not a link, in such a directory (a pickle runs
  code when loaded; docs/security.md, "Files pytfcomm trusts");
* ``@hvd.elastic.run`` starts ``func(state)`` from the last committed state
  (after a restart: rank 0 reads it back; then ``state.sync()`` gives every rank
  rank 0's), and lets errors propagate: a lost peer fails every rank, the
  launcher restarts the job, and ``run`` resumes from the commit;
* reset callbacks run after a restart, before ``func``.

What is lost to a failure is what happened since the last commit, as in
Horovod.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import elastic as _elastic
from ..._owned_file import open_owned, open_owned_dir
from ...errors import PeerLostError
from .. import _basics
from .._basics import rank
from .functions import broadcast_object, broadcast_variables

__all__ = [
    "HorovodInternalError",
    "HostsUpdatedInterrupt",
    "ObjectState",
    "State",
    "TensorFlowKerasState",
    "TensorFlowState",
    "restarted",
    "run",
]

#: Horovod's recoverable error: pytfcomm's is :class:`~pytfcomm.PeerLostError` (one class).
HorovodInternalError = PeerLostError


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's interrupt: workers wait to join, raised by ``state.commit()``
    (:meth:`State.check_host_updates`) on every rank at the same commit;
    ``hvd.elastic.run`` catches it and re-forms the job with them. ``skip_sync``: the
    re-formed ranks need no ``state.sync()`` (False here: joiners need rank 0's state)."""

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__("workers wait to join the job: re-form at this commit")
        self.skip_sync = skip_sync


ELASTIC_DIR_VAR = "PYTFCOMM_ELASTIC_DIR"
_DIR_FIX = (
    "hvd.elastic would unpickle what it finds there, and a pickle runs code when loaded: "
    f"point {ELASTIC_DIR_VAR} at a directory of your own that group and others cannot write "
    "(mkdir -m 700 DIR), or unset it (pytfcomm-run --restarts then makes a private one)"
)
_FILE_FIX = (
    "it was not unpickled, since a pickle runs code when loaded: if you did not write it, "
    "someone else may have, so delete it (the job then starts from its initial state) and "
    "keep the directory private (mode 700)"
)


class State:
    """State kept in step across ranks, committed and restored as in Horovod.

    ``bcast_object(obj)`` returns rank 0's ``obj`` on every rank; ``get_rank()``
    this process's rank. Subclasses implement ``save``, ``restore`` and ``sync``,
    and ``_snapshot``/``_load_snapshot`` for what is written to disk.
    """

    _count = 0  # states made in this process: names their files

    def __init__(self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int]) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks: list[Callable[[], None]] = []
        self._file = f"state{State._count}.pkl"
        State._count += 1

    def register_reset_callbacks(self, callbacks: Sequence[Callable[[], None]]) -> None:
        """Functions to call after a reset (the job re-formed in place or restarted),
        before ``func`` runs again."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Save the state (in memory, and on disk from rank 0 when PYTFCOMM_ELASTIC_DIR is set)."""
        self.save()
        self._persist()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Raise :class:`HostsUpdatedInterrupt` when workers wait to join
        (:func:`pytfcomm.elastic.hosts_updated`: rank 0 asks the launcher and every rank
        gets its answer, so all raise at the same commit). Never under a job that
        cannot grow (no ``pytfcomm-run --elastic --host-discovery-script``)."""
        if _elastic.hosts_updated():
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self) -> None:
        raise NotImplementedError()

    def restore(self) -> None:
        raise NotImplementedError()

    def sync(self) -> None:
        raise NotImplementedError()

    def reset(self) -> None:
        """Called after a reset, before the reset callbacks."""

    # -- on disk ---------------------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        raise NotImplementedError()

    def _load_snapshot(self, data: dict[str, Any]) -> None:
        raise NotImplementedError()

    def _dir(self, create: bool) -> int | None:
        """A descriptor of PYTFCOMM_ELASTIC_DIR, checked (``_owned_file``); None when the
        variable is unset, or when ``create`` is false and the directory does not exist."""
        folder = os.environ.get(ELASTIC_DIR_VAR, "").strip()
        if not folder:
            return None
        if create:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        elif not os.path.lexists(folder):
            return None
        return open_owned_dir(folder, f"{ELASTIC_DIR_VAR}={folder!r}", _DIR_FIX)

    def _persist(self) -> None:
        """Rank 0 writes the snapshot into a new 0600 file (O_EXCL) in the checked
        directory, then renames it over the last commit (atomic)."""
        if self._rank() != 0:
            return
        dfd = self._dir(create=True)
        if dfd is None:
            return
        tmp = f".commit-{secrets.token_hex(8)}"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    pickle.dump(self._snapshot(), f, protocol=pickle.HIGHEST_PROTOCOL)
                # a crash mid-write leaves the previous commit whole
                os.replace(tmp, self._file, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
        finally:
            os.close(dfd)

    def _resume(self) -> bool:
        """Rank 0 loads the last commit written before a restart; True if it did.

        Only a file that obeys the rule of ``_owned_file`` (this user's, not writable by
        group or others, not a link, in such a directory) is unpickled: ConfigError else.
        """
        if self._rank() != 0:
            return False
        dfd = self._dir(create=False)
        if dfd is None:
            return False
        try:
            try:
                os.lstat(self._file, dir_fd=dfd)
            except FileNotFoundError:
                return False
            folder = os.environ[ELASTIC_DIR_VAR].strip()
            what = f"the committed state {os.path.join(folder, self._file)!r}"
            fd = open_owned(self._file, what, _FILE_FIX, follow=False, dir_fd=dfd)
        finally:
            os.close(dfd)
        with os.fdopen(fd, "rb") as f:
            self._load_snapshot(pickle.load(f))
        return True


class ObjectState(State):
    """Python objects given as keyword arguments, exposed as attributes."""

    def __init__(
        self, bcast_object: Callable[[Any], Any], get_rank: Callable[[], int], **kwargs: Any
    ) -> None:
        self._saved_state = dict(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    if TYPE_CHECKING:  # for type checkers only: the keyword arguments are attributes

        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    def save(self) -> None:
        self._saved_state = {k: getattr(self, k) for k in self._saved_state}

    def restore(self) -> None:
        self._set_attrs()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self) -> None:
        for k, v in self._saved_state.items():
            setattr(self, k, v)

    def _snapshot(self) -> dict[str, Any]:
        return {"objects": self._saved_state}

    def _load_snapshot(self, data: dict[str, Any]) -> None:
        self._saved_state = dict(data["objects"])
        self._set_attrs()


#: The ``tf.function``s a Keras model caches (Keras 3 and tf-keras; ``train_tf_function``:
#: tf-keras' copy of the traced one).
_COMPILED_FUNCTIONS = ("train_function", "test_function", "predict_function", "train_tf_function")


def drop_compiled_functions(model: Any) -> None:
    """Forget ``model``'s cached train/test/predict functions; Keras makes them again at
    the next ``fit``/``evaluate``/``predict`` (as after ``compile``)."""
    for name in _COMPILED_FUNCTIONS:
        if getattr(model, name, None) is not None:
            setattr(model, name, None)


def _optimizer_variables(optimizer: Any) -> list[Any]:
    if optimizer is None:
        return []
    v = optimizer.variables
    return list(v() if callable(v) else v)


class _VariablesState(ObjectState):
    """Variables saved as NumPy copies and broadcast from rank 0, plus keyword objects.

    Subclasses say which variables (``_groups``: lists saved and restored apart)
    and may prepare them before a load (``_prepare``).
    """

    def _groups(self) -> list[list[Any]]:
        raise NotImplementedError()

    def _prepare(self, saved: list[list[np.ndarray]]) -> None:
        """Make the variables a load needs (e.g. a Keras 3 optimizer's)."""

    def _save_vars(self) -> None:
        self._saved = [[np.array(v.numpy()) for v in g] for g in self._groups()]

    def _load_vars(self) -> None:
        self._prepare(self._saved)
        groups = self._groups()
        have = [len(g) for g in groups]
        want = [len(g) for g in self._saved]
        if have != want:
            raise ValueError(
                f"the committed state does not fit: {want} variables saved, {have} here"
            )
        for g, values in zip(groups, self._saved, strict=True):
            for v, value in zip(g, values, strict=True):
                v.assign(value)

    def save(self) -> None:
        self._save_vars()
        super().save()

    def restore(self) -> None:
        self._load_vars()
        super().restore()

    def sync(self) -> None:
        broadcast_variables([v for g in self._groups() for v in g], root_rank=0)
        self._save_vars()
        super().sync()

    def _snapshot(self) -> dict[str, Any]:
        return {**super()._snapshot(), "variables": self._saved}

    def _load_snapshot(self, data: dict[str, Any]) -> None:
        self._saved = [list(g) for g in data["variables"]]
        self._load_vars()
        super()._load_snapshot(data)


class TensorFlowKerasState(_VariablesState):
    """A Keras model and its optimizer (Keras 3 or tf-keras), plus keyword objects.

    The model must be built. An optimizer whose variables do not exist yet
    (Keras 3 makes them on the first step) is built for the model's trainable
    variables when a committed state is loaded into it.
    """

    def __init__(
        self, model: Any, optimizer: Any = None, backend: Any = None, **kwargs: Any
    ) -> None:
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self.backend = backend
        self._save_vars()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def _groups(self) -> list[list[Any]]:
        return [list(self.model.variables), _optimizer_variables(self.optimizer)]

    def reset(self) -> None:
        """Drop the model's compiled train, test and predict functions, so that the next
        ``fit``/``evaluate``/``predict`` traces them again against the job's current
        communicator: one traced before a re-forming holds the closed one
        (``FailedPreconditionError``, "this communicator was closed")."""
        drop_compiled_functions(self.model)

    def _prepare(self, saved: list[list[np.ndarray]]) -> None:
        build = getattr(self.optimizer, "build", None)
        if saved[1] and not _optimizer_variables(self.optimizer) and build is not None:
            build(self.model.trainable_variables)


class TensorFlowState(_VariablesState):
    """A list of ``tf.Variable`` (TF2, eager), plus keyword objects."""

    def __init__(self, variables: Sequence[Any] | None = None, session: Any = None, **kwargs: Any):
        if not variables:
            raise ValueError(
                "TensorFlowState needs variables=[...] (TF2 has no global variable collection)"
            )
        if session is not None:
            raise NotImplementedError(
                "TensorFlowState(session=...): TF1 sessions are not supported"
            )
        self.variables = list(variables)
        self.session = None
        self._save_vars()
        super().__init__(bcast_object=broadcast_object, get_rank=rank, **kwargs)

    def _groups(self) -> list[list[Any]]:
        return [self.variables]


def restarted() -> bool:
    """Whether this run of the job is a restart (``pytfcomm-run --restarts``)."""
    try:
        return int(os.environ.get("PYTFCOMM_RESTART_COUNT", "0") or 0) > 0
    except ValueError:
        return False


def _reform() -> None:
    """The survivors' new communicator, made the job's (``hvd`` and the TF ops)."""
    had = _basics._comm is not None
    _basics.shutdown()
    _elastic.reform()
    if had:
        _basics.init()


def run(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: ``func(state, ...)`` resumed from the last commit (see the module doc).

    On a restart, rank 0 loads the state committed before it and the reset
    callbacks run; then ``state.sync()`` gives every rank rank 0's state and
    ``func`` runs. Under ``pytfcomm-run --elastic``, a :class:`~pytfcomm.PeerLostError`
    (or another error of the failed job: :func:`pytfcomm.elastic.recoverable`)
    in ``func`` restores the last commit, re-forms the job among the survivors, runs
    the reset callbacks and ``sync()``, and calls ``func`` again, in this process;
    a :class:`HostsUpdatedInterrupt` (workers wait to join) does the same without the
    restore (the state was just committed), the joiners included.
    Otherwise errors (a lost peer) propagate: the launcher restarts the job.
    """
    if not callable(func):
        raise TypeError(f"hvd.elastic.run decorates a function, got {func!r}")

    def wrapper(state: State, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(state, State):
            raise TypeError(f"the first argument must be an hvd.elastic State, got {state!r}")
        if restarted():
            state._resume()
            state.on_reset()
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HostsUpdatedInterrupt as exc:
                skip_sync = exc.skip_sync  # no restore: the state was just committed
            except Exception as exc:
                if not (_elastic.enabled() and _elastic.recoverable(exc)):
                    raise
                state.restore()
                skip_sync = False
            _reform()
            state.on_reset()

    wrapper.__name__ = getattr(func, "__name__", "wrapper")
    wrapper.__doc__ = getattr(func, "__doc__", None)
    return wrapper
