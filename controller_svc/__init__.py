"""A re-implementation of Apache Kafka's ZooKeeper-mode controller on asyncio."""
