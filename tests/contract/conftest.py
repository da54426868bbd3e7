"""The control-channel contract: one suite, run on the in-memory broker and on Kafka."""
