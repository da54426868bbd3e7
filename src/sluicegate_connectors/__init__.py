"""sluicegate's reference connectors, found through the ``sluicegate.connectors`` entry points."""
