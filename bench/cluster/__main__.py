"""python -m bench.cluster (bench/cluster/__init__.py)."""

import os

from bench.cluster import main

if not os.environ.get("REDIS_SENTINELS"):  # the bench's own Django must reach the cluster's Redis too
    raise SystemExit(
        "run as: REDIS_SENTINELS=127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392 "
        "python -m bench.cluster (bench/README.md)"
    )
raise SystemExit(main())
