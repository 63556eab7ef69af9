"""A mixture's run: its file (:mod:`~prep.materialize.mixture.file`), its tables opened and pinned
(:mod:`~prep.materialize.mixture.sources`), its split tasks (:mod:`~prep.materialize.mixture.run`)."""
