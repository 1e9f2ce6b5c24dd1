"""Building a bundle: the model repository (``repository.write_repository``, called by the package stage), its Triton
configs, deployment manifests, the Helm chart and the CRD schemas, and the ``package:`` / ``deploy:`` config.

Runs where the pipeline runs; reads the python models and helpers it copies from ``serving/triton`` and ``serving/kinds/<kind>/models`` as files.
"""
