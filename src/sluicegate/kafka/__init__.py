"""Kafka adapters: the aiokafka clients as sluicegate uses them, and the control channel
of the reader hosts. Only adapters live here; what they carry is decided elsewhere."""
