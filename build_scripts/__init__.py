"""Build patched PyTorch wheels that unlock the MPS backend on Intel Macs.

The package follows the pipeline, one module per stage:

    source -> patches -> build -> repair/verify -> wheels index

``catalog`` holds the version knowledge every stage reads; ``cli`` is the one entry point.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
