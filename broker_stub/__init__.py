"""Control-plane broker stubs: register in ZooKeeper, fence and apply controller requests."""
