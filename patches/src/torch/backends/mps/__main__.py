"""``python -m torch.backends.mps``: the Metal devices, which one MPS uses and why.

Added by the intelmac patch series (patch 0003). Exit status 0 when MPS is usable,
1 when it is not, so scripts and CI can gate on it.
"""

import sys

from torch.backends.mps._device_policy import main


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
