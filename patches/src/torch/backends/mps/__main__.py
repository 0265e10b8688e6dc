"""``python -m torch.backends.mps``: the Metal devices, which one MPS uses and why.

Added by the intelmac patch series (patch 0003). Exit status 0 when MPS is usable,
1 when it is not, so scripts and CI can gate on it. ``--check`` runs the self-check
(``_check.py``): exit status 0 when every smoke check passes, 1 when one does not, 2 when
MPS is unavailable.
"""

import sys

from ._device_policy import main


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
