"""The patch series and the release catalog, shipped as package data.

Nothing here is code to import: this file only lets `pip install .` carry `catalog.yaml`,
the patches and their sources next to the `build_scripts` package, so the installed
`intelmac-torch` command finds them exactly where a checkout has them.
"""
