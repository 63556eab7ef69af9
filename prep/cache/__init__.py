"""The reader cache: verified local copies of a rank's splits, and prewarm, which fills it ahead."""
