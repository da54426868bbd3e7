"""The source events between the ``postgres`` enumerator and its readers.

- ``chunk_done`` (reader -> enumerator): a chunk is read, with its pieces; sent once a
  checkpoint that holds it finished is durable.
- ``chunks_wanted`` (stream reader -> enumerator): send me the finished chunks.
- ``chunks`` (enumerator -> stream reader): finished chunks, ``CHUNK_GROUP`` at a time
  (no control record carries them all).
- ``chunks_released`` (stream reader -> enumerator): a durable checkpoint of the stream is
  past every chunk's point: the finished chunks are needed no more.
"""

CHUNK_DONE = "chunk_done"
CHUNKS_WANTED = "chunks_wanted"
CHUNKS = "chunks"
CHUNKS_RELEASED = "chunks_released"
CHUNK_GROUP = 1_000
