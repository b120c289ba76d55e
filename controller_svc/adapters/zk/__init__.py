"""ZooKeeper adapter: Kafka's znode layout, its JSON codecs, the aiozk client and the fenced store."""
