"""prep.reader: stream materialized epochs into torch with minimal CPU work.

Whole local batches (dicts of tensors) from ``prep materialize-shuffle`` output,
exact resume from ``{fingerprint, epoch, step}``, elastic world sizes, and a status
line that says where the time goes. Never imports Ray.

>>> import prep.reader
>>> sorted(prep.reader.__all__)[:3]
['Batch', 'DeviceFeed', 'HF_IMAGE_KEYS']
"""

from prep.reader.batch import Batch
from prep.reader.dataset import ReaderDataset
from prep.reader.device import DeviceFeed
from prep.reader.loader import Loader
from prep.reader.options import ReaderOptions
from prep.reader.spec import HF_IMAGE_KEYS
from prep.reader.stage import ReaderError
from prep.reader.stats import StatsSnapshot

__all__ = ["Batch", "DeviceFeed", "HF_IMAGE_KEYS", "Loader", "ReaderDataset", "ReaderError", "ReaderOptions", "StatsSnapshot"]
