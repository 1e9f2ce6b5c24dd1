"""Serving: build a Triton / FastDeploy bundle, run it, and check it, split by where the code runs.

    serving/bundle/   building a bundle (the package stage, ``make manifests``): the model repository, Triton
                      configs, deployment manifests, the Helm chart, the package / deploy config.  May import
                      ``pipeline`` (the export contract, errors, config overrides).
    serving/triton/   what is copied into a bundle and runs inside Triton's python backend: the python models
                      and the helpers beside them.  Imports neither ``pipeline`` nor the rest of ``serving``:
                      neither is installed there (tests/test_imports.py checks it).
    serving/server.py the launcher (``python -m serving.server``); of ``pipeline`` only the contract (CPU flags).
    serving/triton_install.py  which tritonserver serves, the python its models run in, that python's engine check.
    serving/process_group.py   a server's processes and shared memory, ended when it stops or was killed.
    serving/client.py ``python -m serving.client``, the command bundles' model cards print (serving/tools/client.py).
    serving/tools/    developer tools against a bundle or a running server (client, smoke, perf, loadtest, replicas,
                      the offline reference); they import ``pipeline`` for dev data, metrics and the reference.

``pipeline`` imports ``serving`` only from its package stage and its config (``PackageConfig``, ``DeployConfig``).
"""
