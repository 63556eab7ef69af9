"""Storage I/O: URIs and their filesystems, retries, transfers, Lance tables, checksums."""
