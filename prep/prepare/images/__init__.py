"""Image preparation: image sources -> a Lance table of fixed-size pixel rows.

Modules, in the order data flows through them:

- ``config``: :class:`~prep.prepare.images.config.ImagesConfig`, the job's keys.
- ``sources``: listing and chunk planning for ImageFolder trees and manifests;
  ``shards`` (WebDataset tar) and ``tables`` (manifest files, Parquet image bytes)
  read the other kinds; ``samples`` is what they all yield; ``labels`` maps class names.
- ``decode``: bytes -> upright RGB/gray pixels (torchvision, Pillow fallback).
- ``transform``: resize + center-crop or pad to the configured size.
- ``worker``: one chunk -> Arrow rows + rejects; ``job``: the Ray job and its summary.

This package imports nothing heavy itself; ``decode`` and ``worker`` import torch.
"""
