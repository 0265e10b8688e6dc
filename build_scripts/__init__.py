"""Build patched PyTorch wheels that unlock the MPS backend on Intel Macs.

``stages/`` holds the pipeline, one module per stage:

    source -> patches -> build -> repair/verify -> wheels index

``core/`` is what the stages share (``core.catalog`` holds the version knowledge, and
``core.records`` what each stage leaves for the next), ``maint/`` the maintainers' tools that
check the series, and ``cli`` the one entry point.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
