"""Ray job entry point: decode, normalize and resize images into a Lance table.

    ray job submit --working-dir . -- python pipelines/decode_images.py --config configs/imagefolder.yaml --output /abs/out/hymenoptera-224.lance
    python pipelines/decode_images.py --config configs/imagefolder.yaml   # this machine (or RAY_ADDRESS's cluster)

Same code as ``prep decode-images``: this file only forwards its arguments.
Under ``ray job submit`` the job runs in a temporary copy of the working dir, so
give absolute (or ``s3://``) input and output paths there.
"""

import sys

from prep.cli import main

if __name__ == "__main__":
    sys.exit(main(["decode-images", *sys.argv[1:]]))
