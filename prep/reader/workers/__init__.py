"""DataLoader-worker plumbing: batches shipped out of worker processes, and workers that are safe to fork and end with their trainer.

``shipping`` (many steps per message, in one shared buffer), ``handoff`` (the main process
serves the first steps while workers start), ``release`` (freeing batches off the trainer's
thread), ``buffers`` (recycled output memory), ``forksafe`` (Lance opened per process),
``lifeline`` (workers exit when their trainer dies), ``preload`` (what the forkserver imports).
"""
