"""Train with prep.reader in the frameworks people use, with exact resume in each.

One small module per framework, each imported only by the user who needs it (none of
them is imported by :mod:`prep.reader`, and none of their frameworks is a core dependency):

- :mod:`prep.integrations.hf`: HF ``Trainer`` / TRL (``pip install prep-lance[hf]``);
- :mod:`prep.integrations.accelerate`: an Accelerate loop (``pip install prep-lance[hf]``);
- :mod:`prep.integrations.lightning`: a ``LightningDataModule`` (``pip install prep-lance[lightning]``);
- :mod:`prep.integrations.torchdata`: torchdata's ``StatefulDataLoader`` (``pip install prep-lance[torchdata]``).
- :mod:`prep.integrations.ray_data`: prep at the end of a Ray Data pipeline (``Tokenize``, ``DecodeImages``,
  ``write_table``) and a prep table as a Ray Dataset (``read_table``); Ray is a core dependency. Ray Train
  needs no module: see ``docs/trainers/ray_train.md``.

The rule they share: the reader state saved in a checkpoint is the one after the last batch
the trainer *trained on* (``batch.state``), never the one after what its loader prefetched.
See ``docs/trainers/``.
"""
