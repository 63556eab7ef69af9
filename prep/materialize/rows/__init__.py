"""Where a split task gets its rows: the selected rows read by position (:mod:`~prep.materialize.rows.selected`),
held in memory (:mod:`~prep.materialize.rows.held`, :mod:`~prep.materialize.rows.take`), or beyond the memory
budget spilled and read back (:mod:`~prep.materialize.rows.spill`)."""
