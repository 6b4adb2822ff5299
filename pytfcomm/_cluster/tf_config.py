"""Source 3: ``TF_CONFIG``, the cluster layout of TF's MultiWorkerMirroredStrategy.

The chief (if any) is rank 0, then the workers in order; an evaluator may be listed but
never joins. pytfcomm's rendezvous port is derived from rank 0's TF port
(:func:`tf_rendezvous_port`), so TF's own ports are never reused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from pytfcomm.errors import ConfigError

from ._env import _MAX_INT_DIGITS, _SIZE_RANGE, _SIZE_WHY, MAX_SIZE, _get, _quote
from .address import _DIGITS_RE, _host_key, _norm_host, format_addr, parse_addr
from .spec import ClusterSpec, _env_addr, _env_port, _make_spec

#: TF_CONFIG rendezvous port: rank 0's TF port + TF_PORT_OFFSET, wrapped into
#: TF_PORT_MIN..TF_PORT_MAX, skipping every port that TF_CONFIG lists.
TF_PORT_OFFSET = 1000
TF_PORT_MIN = 1024
TF_PORT_MAX = 65535

_TF_TASK_TYPES = ("chief", "worker", "evaluator", "ps")


def _wrap_tf_port(port: int) -> int:
    span = TF_PORT_MAX - TF_PORT_MIN + 1
    return TF_PORT_MIN + (port - TF_PORT_MIN) % span


def tf_rendezvous_port(rank0_tf_port: int, tf_ports: Iterable[int]) -> int:
    """The pytfcomm port for a TF_CONFIG job, the same on every rank.

    Start at ``rank0_tf_port + 1000``, wrap into 1024..65535, and step up by one (wrapping
    again) past every port in ``tf_ports`` -- all ports TF_CONFIG lists, any task type.
    """
    used = set(tf_ports)
    port = _wrap_tf_port(rank0_tf_port + TF_PORT_OFFSET)
    for _ in range(TF_PORT_MAX - TF_PORT_MIN + 1):
        if port not in used:
            return port
        port = _wrap_tf_port(port + 1)
    raise ConfigError("TF_CONFIG uses every port in 1024..65535: set PYTFCOMM_PORT.")


_TF_EXAMPLE = (
    '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}'
)


def _tf_error(problem: str, fix: str) -> ConfigError:
    return ConfigError(f"TF_CONFIG {problem}: {fix}. Example: TF_CONFIG='{_TF_EXAMPLE}'.")


def _from_tf_config(env: Mapping[str, str]) -> ClusterSpec | None:
    raw = _get(env, "TF_CONFIG")
    if raw is None:
        return None
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _tf_error(
            f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}) in "
            f"{_quote(raw)}",
            "fix the JSON (keys and strings need double quotes)",
        ) from None
    except ValueError:  # an integer of over 4300 digits
        raise _tf_error(
            f"holds a number with too many digits in {_quote(raw)}",
            "give task.index as this process's position in its list",
        ) from None
    if not isinstance(cfg, dict):
        raise _tf_error(f"must be a JSON object, got {_quote(raw)}", 'give "cluster" and "task"')
    cluster, task = cfg.get("cluster"), cfg.get("task")
    if not isinstance(cluster, dict) or not cluster:
        what = "has no" if cluster is None else f"has an unusable {_quote(cluster)} as its"
        raise _tf_error(
            f'{what} "cluster"',
            'set "cluster" to an object mapping "chief"/"worker" to lists of "host:port"',
        )
    unknown = sorted(k for k in cluster if k not in _TF_TASK_TYPES)
    if unknown:
        raise _tf_error(
            f"cluster has unsupported task type(s) {', '.join(map(repr, unknown))}",
            'use "chief" and "worker" (an "evaluator" may be listed but does not join)',
        )
    if cluster.get("ps"):
        raise _tf_error(
            f'cluster has "ps" tasks {_quote(cluster["ps"])}',
            'parameter-server clusters are not supported by all-reduce; remove "ps" and '
            'run a MultiWorkerMirroredStrategy-style cluster of "chief"/"worker" tasks, '
            "where every worker holds all variables and updates them synchronously. How to "
            "move a ps/worker or ParameterServerStrategy job, and what all-reduce does not "
            "replace (asynchronous updates): docs/migrating.md#no-parameter-servers",
        )

    entries: dict[str, list[tuple[str, int]]] = {}
    seen: dict[str, str] = {}
    for group in _TF_TASK_TYPES:
        listed = cluster.get(group)
        if listed is None:
            continue
        if not isinstance(listed, list):
            raise _tf_error(
                f"cluster.{group} is {_quote(listed)}",
                f'make cluster.{group} a list of "host:port" strings',
            )
        parsed: list[tuple[str, int]] = []
        for i, item in enumerate(listed):
            where = f"TF_CONFIG cluster.{group}[{i}]"
            if not isinstance(item, str):
                raise _tf_error(
                    f"cluster.{group}[{i}] is {_quote(item)}",
                    'write each task as a "host:port" string',
                )
            host, port = parse_addr(item, what=where)
            if port == 0:
                raise _tf_error(
                    f"cluster.{group}[{i}] {item!r} has port 0",
                    "give each task its real port, 1..65535",
                )
            key = format_addr(_host_key(host), port)
            if key in seen:
                raise _tf_error(
                    f"lists the address {item!r} twice, at {seen[key]} and cluster.{group}[{i}]",
                    "give every task its own host:port",
                )
            seen[key] = f"cluster.{group}[{i}]"
            parsed.append((host, port))
        entries[group] = parsed
    chief, workers = entries.get("chief", []), entries.get("worker", [])
    if len(chief) > 1:
        raise _tf_error(
            f"cluster.chief has {len(chief)} entries {_quote(cluster['chief'])}",
            "list at most one chief",
        )
    if not chief and not workers:
        raise _tf_error(
            'cluster has no "chief" or "worker" tasks',
            'list the processes of the job under "worker" (and optionally one "chief")',
        )

    if not isinstance(task, dict):
        what = "has no" if task is None else f"has an unusable {_quote(task)} as its"
        raise _tf_error(
            f'{what} "task"', 'set "task" to {"type": "worker", "index": <this process\'s index>}'
        )
    ttype, index = task.get("type"), task.get("index")
    if ttype == "evaluator":
        raise ConfigError(
            f"TF_CONFIG task {_quote(task)} is an evaluator: evaluators don't join "
            "collectives, so an evaluator process must not initialise pytfcomm. Only "
            '"chief" and "worker" tasks take part in all-reduce. Run the evaluation as a '
            "separate process that reads the chief's checkpoints and never calls "
            "pytfcomm.init() or pytfcomm.MultiWorkerMirroredStrategy(): "
            "docs/migrating.md#no-evaluator-task."
        )
    if ttype not in ("chief", "worker"):
        raise _tf_error(
            f"task.type is {_quote(ttype) if ttype is not None else 'missing'}",
            'set task.type to "chief" or "worker"'
            + (
                " (all-reduce has no parameter servers: docs/migrating.md#no-parameter-servers)"
                if ttype == "ps"
                else ""
            ),
        )
    if isinstance(index, str) and _DIGITS_RE.fullmatch(index.strip()):
        digits = index.strip().lstrip("0")
        index = int(digits or "0") if len(digits) <= _MAX_INT_DIGITS else 10**_MAX_INT_DIGITS
    if not isinstance(index, int) or isinstance(index, bool):
        raise _tf_error(
            f"task.index is {_quote(index) if index is not None else 'missing'} in {_quote(task)}",
            f"set task.index to this process's position (0-based) in the cluster.{ttype} list",
        )
    members = chief if ttype == "chief" else workers
    if not 0 <= index < len(members):
        valid = f"0..{len(members) - 1}" if members else "none: the list is empty"
        raise _tf_error(
            f"task {_quote(task)} is out of range: cluster.{ttype} has {len(members)} "
            f"entr{'y' if len(members) == 1 else 'ies'} (valid indices: {valid})",
            "fix task.index or add the missing address to the cluster list",
        )

    size = len(chief) + len(workers)
    if size > MAX_SIZE:
        raise _tf_error(
            f"cluster lists {size} chief and worker tasks", f"{_SIZE_WHY}: list {_SIZE_RANGE}"
        )
    rank = index if ttype == "chief" else len(chief) + index
    own_host = members[index][0]
    rank0_host, rank0_tf_port = (chief + workers)[0]
    all_hosts = [h for lst in entries.values() for h, _ in lst]
    port_env = _env_port(env)
    override = _env_addr(env, size)
    if override is not None:
        host, port = override
    else:
        host = rank0_host
        if port_env is not None:
            rank0_key = _host_key(rank0_host)
            for ttype_, lst in entries.items():
                for i, (h, p) in enumerate(lst):
                    if p == port_env and _host_key(h) == rank0_key:
                        raise ConfigError(
                            f"PYTFCOMM_PORT={port_env} is the TensorFlow port of TF_CONFIG "
                            f"cluster.{ttype_}[{i}] on rank 0's host {h!r}: choose another "
                            "PYTFCOMM_PORT, or unset it to derive a free one."
                        )
            port = port_env
        else:
            port = tf_rendezvous_port(
                rank0_tf_port, [p for lst in entries.values() for _, p in lst]
            )
    return _make_spec(
        rank=rank,
        size=size,
        host=host,
        port=port,
        source="TF_CONFIG",
        env=env,
        own_host=own_host,
        extra_hosts=[_norm_host(h) for h in all_hosts],
    )
