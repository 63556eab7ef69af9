"""The text prepare job: sources, formats (SFT, pretraining), tokenization, packing."""
