"""The prepare stage: raw sources -> a prepared Lance table (see docs/architecture.md)."""
