"""`python -m etcd_compute.mdserver`: run the metadata server."""

import sys

from etcd_compute.mdserver.server import main

sys.exit(main())
