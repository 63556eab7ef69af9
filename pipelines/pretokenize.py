"""Ray job entry point: tokenize text sources into a Lance table.

    ray job submit --working-dir . -- python pipelines/pretokenize.py --config configs/gsm8k-sft.yaml
    python pipelines/pretokenize.py --config configs/gsm8k-sft.yaml   # this machine (or RAY_ADDRESS's cluster)

Same code as ``prep pretokenize``: this file only forwards its arguments.
"""

import sys

from prep.cli import main

if __name__ == "__main__":
    sys.exit(main(["pretokenize", *sys.argv[1:]]))
