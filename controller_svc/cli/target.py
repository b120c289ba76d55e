"""Which controller an admin command talks to: `--zookeeper`, `--controller` or `--dir`."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controller_svc.adapters.admin_client import AdminClient


def add_target_args(parser: argparse.ArgumentParser) -> None:
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--zookeeper", help="find the active controller through this ZooKeeper (host:port[/chroot])")
    target.add_argument("--controller", help="any controller's gRPC address; NOT_CONTROLLER answers are followed")
    target.add_argument("--dir", help="a local cluster directory (its cluster.json names ZooKeeper)")


def client_of(args: argparse.Namespace) -> AdminClient:
    # Imported here: every command registers the admin parsers, few talk to a controller.
    from controller_svc.adapters.admin_client import AdminClient, zookeeper_of_cluster_dir

    zookeeper = args.zookeeper or (zookeeper_of_cluster_dir(args.dir) if args.dir else None)
    return AdminClient(controller=args.controller, zookeeper=zookeeper)
