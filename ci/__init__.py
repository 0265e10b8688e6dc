"""Release CI for the patched PyTorch wheels.

The GitHub Actions workflows in ``.github/workflows/`` stay thin: what they build and test
comes from ``python -m intelmac_torch_builder matrix`` (``ci.matrix``, generated from the release
catalog), and what each job runs can be previewed with ``python -m intelmac_torch_builder ci-plan``
(``ci.plan``, read from the workflow files themselves).
"""
