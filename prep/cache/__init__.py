"""The reader cache: verified local copies of a rank's splits, and prewarm, which fills it ahead.

``records`` (the layout and the copy record), ``locks`` (how processes share the cache),
``eviction`` (what makes room), ``claim`` (whose cache it is: the marker), ``check`` (whether a
copy is verified), ``store`` (:class:`~prep.cache.store.SplitCache`: read and fetch),
``prewarm`` (the fetch, run ahead for one rank).
"""
