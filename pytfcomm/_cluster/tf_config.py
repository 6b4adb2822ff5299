"""Source 3: ``TF_CONFIG``, the cluster layout of TF's MultiWorkerMirroredStrategy.

The forms that schedulers write (docs/launching.md#kubernetes-vertex-ai-and-ray):
``chief`` + ``worker`` (Kubeflow TFJob, TF's own), ``master`` + ``worker`` (AI Platform
and Vertex AI; ``master`` is read as ``chief``), ``worker`` only (Ray Train), and, when
TF_CONFIG is unset, Vertex AI's ``CLUSTER_SPEC`` (``workerpool0`` = chief,
``workerpool1`` = workers, ``workerpool2`` = parameter servers, ``workerpool3`` =
evaluator). The chief (if any) is rank 0, then the workers in order; an evaluator may be
listed but never joins; parameter servers are refused. pytfcomm's rendezvous port is
derived from rank 0's TF port (:func:`tf_rendezvous_port`), so TF's own ports are never
reused. Keys other than ``cluster`` and ``task`` (``environment``, ``job``, ``rpc_layer``)
are ignored.
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
#: Vertex AI's CLUSTER_SPEC worker pools, by the TF task type each one plays.
_VERTEX_POOLS = {
    "chief": "workerpool0",
    "worker": "workerpool1",
    "ps": "workerpool2",
    "evaluator": "workerpool3",
}


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


_VERTEX_EXAMPLE = (
    '{"cluster": {"workerpool0": ["host1:2222"], "workerpool1": ["host2:2222"]}, '
    '"task": {"type": "workerpool1", "index": 0}}'
)


def _tf_error(problem: str, fix: str, var: str = "TF_CONFIG") -> ConfigError:
    example = _VERTEX_EXAMPLE if var == "CLUSTER_SPEC" else _TF_EXAMPLE
    return ConfigError(f"{var} {problem}: {fix}. Example: {var}='{example}'.")


def _parse(raw: str, var: str) -> dict:
    """``raw`` (the value of ``var``) as a JSON object, else ConfigError."""
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _tf_error(
            f"is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}) in "
            f"{_quote(raw)}",
            "fix the JSON (keys and strings need double quotes)",
            var,
        ) from None
    except ValueError:  # an integer of over 4300 digits
        raise _tf_error(
            f"holds a number with too many digits in {_quote(raw)}",
            "give task.index as this process's position in its list",
            var,
        ) from None
    if not isinstance(cfg, dict):
        raise _tf_error(
            f"must be a JSON object, got {_quote(raw)}", 'give "cluster" and "task"', var
        )
    return cfg


def _tf_names(cluster: dict, task: object) -> dict[str, str]:
    """TF_CONFIG: the key each TF task type has in ``cluster`` -- ``chief``, or ``master``
    (AI Platform and Vertex AI write it), never both."""
    if "master" in cluster and "chief" in cluster:
        raise _tf_error(
            f'cluster lists both "chief" {_quote(cluster["chief"])} and "master" '
            f"{_quote(cluster['master'])}",
            'keep one of them: "master" is the older name of "chief" and both are rank 0',
        )
    uses_master = "master" in cluster or (
        isinstance(task, dict) and task.get("type") == "master" and "chief" not in cluster
    )
    return {t: ("master" if t == "chief" and uses_master else t) for t in _TF_TASK_TYPES}


def _from_tf_config(env: Mapping[str, str]) -> ClusterSpec | None:
    """The job from TF_CONFIG, else from Vertex AI's CLUSTER_SPEC; None when neither is set."""
    var = "TF_CONFIG"
    raw = _get(env, var)
    if raw is None:
        var = "CLUSTER_SPEC"
        raw = _get(env, var)
        if raw is None:
            return None
    cfg = _parse(raw, var)
    cluster, task = cfg.get("cluster"), cfg.get("task")
    roles = ", ".join(f'"{p}" ({t})' for t, p in _VERTEX_POOLS.items())
    if not isinstance(cluster, dict) or not cluster:
        what = "has no" if cluster is None else f"has an unusable {_quote(cluster)} as its"
        lists = f"{roles} to lists of" if var == "CLUSTER_SPEC" else '"chief"/"worker" to lists of'
        raise _tf_error(
            f'{what} "cluster"', f'set "cluster" to an object mapping {lists} "host:port"', var
        )
    names = dict(_VERTEX_POOLS) if var == "CLUSTER_SPEC" else _tf_names(cluster, task)
    by_name = {n: t for t, n in names.items()}
    unknown = sorted(k for k in cluster if k not in by_name)
    if unknown:
        fix = (
            f"use {roles}"
            if var == "CLUSTER_SPEC"
            else 'use "chief" (or "master") and "worker" (an "evaluator" may be listed but '
            "does not join)"
        )
        raise _tf_error(
            f"cluster has unsupported task type(s) {', '.join(map(repr, unknown))}", fix, var
        )
    cluster = {by_name[k]: v for k, v in cluster.items()}
    if isinstance(task, dict) and task.get("type") in by_name:
        task = {**task, "type": by_name[task["type"]]}
    ps = names["ps"]
    if cluster.get("ps"):
        raise _tf_error(
            f'cluster has "{ps}" (parameter server) tasks {_quote(cluster["ps"])}',
            f'parameter-server clusters are not supported by all-reduce; remove "{ps}" and '
            f'run a MultiWorkerMirroredStrategy-style cluster of "{names["chief"]}"/'
            f'"{names["worker"]}" tasks, '
            "where every worker holds all variables and updates them synchronously. How to "
            "move a ps/worker or ParameterServerStrategy job, and what all-reduce does not "
            "replace (asynchronous updates): docs/migrating.md#no-parameter-servers",
            var,
        )

    entries: dict[str, list[tuple[str, int]]] = {}
    seen: dict[str, str] = {}
    for group in _TF_TASK_TYPES:
        listed = cluster.get(group)
        if listed is None:
            continue
        name = names[group]
        if not isinstance(listed, list):
            raise _tf_error(
                f"cluster.{name} is {_quote(listed)}",
                f'make cluster.{name} a list of "host:port" strings',
                var,
            )
        parsed: list[tuple[str, int]] = []
        for i, item in enumerate(listed):
            where = f"{var} cluster.{name}[{i}]"
            if not isinstance(item, str):
                raise _tf_error(
                    f"cluster.{name}[{i}] is {_quote(item)}",
                    'write each task as a "host:port" string',
                    var,
                )
            host, port = parse_addr(item, what=where)
            if port == 0:
                raise _tf_error(
                    f"cluster.{name}[{i}] {item!r} has port 0",
                    "give each task its real port, 1..65535",
                    var,
                )
            key = format_addr(_host_key(host), port)
            if key in seen:
                raise _tf_error(
                    f"lists the address {item!r} twice, at {seen[key]} and cluster.{name}[{i}]",
                    "give every task its own host:port",
                    var,
                )
            seen[key] = f"cluster.{name}[{i}]"
            parsed.append((host, port))
        entries[group] = parsed
    chief, workers = entries.get("chief", []), entries.get("worker", [])
    if len(chief) > 1:
        raise _tf_error(
            f"cluster.{names['chief']} has {len(chief)} entries {_quote(cluster['chief'])}",
            f"list at most one {names['chief']} (it is rank 0)",
            var,
        )
    if not chief and not workers:
        raise _tf_error(
            f'cluster has no "{names["chief"]}" or "{names["worker"]}" tasks',
            f'list the processes of the job under "{names["worker"]}" (and optionally one '
            f'"{names["chief"]}")',
            var,
        )
    return _locate(env, var, names, entries, task)


def _locate(
    env: Mapping[str, str],
    var: str,
    names: Mapping[str, str],
    entries: Mapping[str, list[tuple[str, int]]],
    task: object,
) -> ClusterSpec:
    """This process's rank (the chief first, then the workers in order) and the
    rendezvous address, from the parsed cluster ``entries`` and the ``task`` entry."""
    chief, workers = entries.get("chief", []), entries.get("worker", [])

    if not isinstance(task, dict):
        what = "has no" if task is None else f"has an unusable {_quote(task)} as its"
        raise _tf_error(
            f'{what} "task"',
            f'set "task" to {{"type": "{names["worker"]}", "index": <this process\'s index>}}',
            var,
        )
    ttype, index = task.get("type"), task.get("index")
    if ttype == "evaluator":
        raise ConfigError(
            f"{var} task {_quote(task)} is an evaluator: evaluators don't join "
            "collectives, so an evaluator process must not initialise pytfcomm. Only "
            f'"{names["chief"]}" and "{names["worker"]}" tasks take part in all-reduce. '
            "Run the evaluation as a "
            "separate process that reads the chief's checkpoints and never calls "
            "pytfcomm.init() or pytfcomm.MultiWorkerMirroredStrategy(): "
            "docs/migrating.md#no-evaluator-task."
        )
    if ttype not in ("chief", "worker"):
        raise _tf_error(
            f"task.type is {_quote(ttype) if ttype is not None else 'missing'}",
            f'set task.type to "{names["chief"]}" or "{names["worker"]}"'
            + (
                " (all-reduce has no parameter servers: docs/migrating.md#no-parameter-servers)"
                if ttype == "ps"
                else ""
            ),
            var,
        )
    if isinstance(index, str) and _DIGITS_RE.fullmatch(index.strip()):
        digits = index.strip().lstrip("0")
        index = int(digits or "0") if len(digits) <= _MAX_INT_DIGITS else 10**_MAX_INT_DIGITS
    if not isinstance(index, int) or isinstance(index, bool):
        raise _tf_error(
            f"task.index is {_quote(index) if index is not None else 'missing'} in {_quote(task)}",
            "set task.index to this process's position (0-based) in the "
            f"cluster.{names[ttype]} list",
            var,
        )
    members = chief if ttype == "chief" else workers
    if not 0 <= index < len(members):
        valid = f"0..{len(members) - 1}" if members else "none: the list is empty"
        raise _tf_error(
            f"task {_quote(task)} is out of range: cluster.{names[ttype]} has {len(members)} "
            f"entr{'y' if len(members) == 1 else 'ies'} (valid indices: {valid})",
            "fix task.index or add the missing address to the cluster list",
            var,
        )

    size = len(chief) + len(workers)
    if size > MAX_SIZE:
        raise _tf_error(
            f"cluster lists {size} chief and worker tasks",
            f"{_SIZE_WHY}: list {_SIZE_RANGE}",
            var,
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
                            f"PYTFCOMM_PORT={port_env} is the TensorFlow port of {var} "
                            f"cluster.{names[ttype_]}[{i}] on rank 0's host {h!r}: choose another "
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
        source=var,
        env=env,
        own_host=own_host,
        extra_hosts=[_norm_host(h) for h in all_hosts],
    )
