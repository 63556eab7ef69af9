"""Helpers shared by several test modules: the stage round-trip contract, tiny tables made in tmp_path."""
