"""The on-disk interfaces between prep's stages: one typed form and one parser each (see README.md here)."""
