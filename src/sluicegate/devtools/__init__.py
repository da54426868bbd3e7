"""Developer tools, apart from the product: a local Kafka broker from Maven Central jars
(``broker``), and the demos of ``sluicegate demo`` (``demo``: reader processes;
``spark_demo``: the Spark job). Nothing in the product imports them."""
