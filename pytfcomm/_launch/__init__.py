"""Internals of ``pytfcomm-run`` (see :mod:`pytfcomm.launcher` and docs/launching.md).

One job per module: ``hosts`` parses ``-H``/``--hostfile`` and places ranks, ``plan``
computes every rank's environment (ports, TF_CONFIG, secret), ``gpus`` each rank's GPUs
(``--gpus-per-rank``), ``remote`` builds ssh commands, ``output`` prefixes the ranks'
output, ``procs`` starts and supervises them, ``restart`` runs the job again after a rank
failure (``--restarts``), ``membership`` decides who goes on or joins (``--elastic``),
``discovery`` runs ``--host-discovery-script``.
Nothing here imports TensorFlow or opens a network connection other than to pick ports
and to serve the elastic membership on this machine's address as the job's hosts see it.
"""
