"""Ray job entry point: write shuffled epochs of a prepared table.

    ray job submit --working-dir . -- python pipelines/materialize_shuffle.py \\
        --table /data/gsm8k.lance --output /data/gsm8k-shuffled --epochs 3
    python pipelines/materialize_shuffle.py --table ... --output ... --epochs 3   # on this machine, without Ray

Same code as ``prep materialize-shuffle`` (``prep.materialize.materialize_shuffle``):
this file only forwards its arguments. Inside a job, Ray is joined through ``RAY_ADDRESS``
(:func:`prep.runtime.ray_cluster.use_ray`); without a cluster the run stays in this process.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the working dir, when prep is not installed

from prep.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["materialize-shuffle", *sys.argv[1:]]))
