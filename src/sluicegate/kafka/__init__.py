"""Kafka adapters: the aiokafka clients as sluicegate uses them, topics, ACLs and
compacted-topic reads. Only adapters live here; what they carry is decided elsewhere.
The Kafka adapters of the two ports live beside their ports: the readers' control
channel in reader/kafka_channel.py, the coordinator's log in coordinator/kafka_log.py."""
