"""The stages of one iteration, each a :class:`prep.reader.stage.Stage`, chained by ``pipeline``.

``source`` (large sequential reads of a rank's splits), ``cached`` (a fetch stage filling a
local cache ahead of the reads), ``prefetch`` (a stage on a background thread behind a
bounded queue), ``batcher`` (chunks cut into local batches), ``transform`` (a user's
``transform`` on a thread pool), ``pipeline`` (the chain and its counters).
"""
