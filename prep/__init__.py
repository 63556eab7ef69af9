"""prep: move data preparation offline, leave the trainer almost nothing to do."""

__version__ = "0.1.0"
__all__ = ["__version__"]
