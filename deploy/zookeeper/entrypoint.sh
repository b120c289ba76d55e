#!/bin/sh
# Debian's ZooKeeper package behind the environment interface of the official `zookeeper`
# image (ZOO_MY_ID, ZOO_SERVERS, ZOO_4LW_COMMANDS_WHITELIST, ZOO_TICK_TIME, ZOO_INIT_LIMIT,
# ZOO_SYNC_LIMIT), so deploy/compose.yaml runs unchanged on an image made without a registry
# (`controller-svc image build`). JVM heap: ZOO_HEAP (default 256m).
set -eu
data=${ZOO_DATA_DIR:-/var/lib/zookeeper/data}
conf=$data/zoo.cfg
mkdir -p "$data"
echo "${ZOO_MY_ID:-1}" > "$data/myid"
{
  echo "dataDir=$data"
  echo "tickTime=${ZOO_TICK_TIME:-2000}"
  echo "initLimit=${ZOO_INIT_LIMIT:-5}"
  echo "syncLimit=${ZOO_SYNC_LIMIT:-2}"
  echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS:-60}"
  echo "admin.enableServer=false"
  echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST:-srvr}"
  # A server listens for its peers on every address of its container, not only on the one
  # its name resolves to.
  echo "quorumListenOnAllIPs=true"
  if [ -n "${ZOO_SERVERS:-}" ]; then
    echo "standaloneEnabled=false"
    for server in $ZOO_SERVERS; do echo "$server"; done
  else
    echo "clientPort=2181"
  fi
} > "$conf"
exec java -Xmx"${ZOO_HEAP:-256m}" -XX:+UseSerialGC \
  -Dzookeeper.log.dir="$data" -Dzookeeper.root.logger=INFO,CONSOLE \
  -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf"
