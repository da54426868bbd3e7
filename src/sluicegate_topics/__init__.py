"""Data only: topics.toml (the control topics of a source) and schemas/ (a JSON
Schema per message type). Loaded by sluicegate.protocol.topics and .codec."""
