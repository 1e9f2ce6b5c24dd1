"""Developer tools against a bundle or a running server: ``client``, ``smoke`` (served == offline), ``loadtest``,
``perf`` (perf_analyzer), ``replicas`` (two servers behind HAProxy) and ``offline`` (the bundle's model run without
a server, the reference the others compare to).  Each runs as ``python -m serving.tools.<name>`` (the Makefile's
``make smoke``, ``make perf``, ...); they import ``pipeline`` for the dev data, metrics and the offline reference.
"""
