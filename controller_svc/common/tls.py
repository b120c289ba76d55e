"""Optional mutual TLS on both gRPC services, and who may call what.

Every server requires a client certificate signed by the cluster's CA once `grpc.tls.enable`
is on. A caller's identity is its certificate's common name and DNS subject alternative
names. Brokers accept control RPCs only from `broker.controller.identities`; a controller
accepts admin RPCs only from `controller.admin.identities` and ControlledShutdown only from
`controller.broker.identities` (like Kafka's ClusterAction ACL for brokers). An empty list
admits any certificate the CA signed. Health checks and reflection need a certificate, no
identity. Plaintext stays the default.

Command-line tools (CLI, launcher, health check) take the same settings from the environment:
KCONTROLLER_GRPC_TLS_ENABLE, KCONTROLLER_GRPC_TLS_CA_FILE, ..._CERT_FILE, ..._KEY_FILE. Key
material is read from files and never logged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from prometheus_client import Counter

log = logging.getLogger(__name__)

DENIED = Counter(
    "kcontroller_rpc_denied_total", "RPCs refused because the caller's certificate identity is not allowed", ["method"]
)


class TlsConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: bytes
    cert: bytes
    key: bytes

    def __repr__(self) -> str:  # never print key material
        return "TlsFiles(ca=<pem>, cert=<pem>, key=<redacted>)"


def _read(key: str, path: str) -> bytes:
    if not path:
        raise TlsConfigError(f"{key} must be set when grpc.tls.enable is true")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TlsConfigError(f"{key}={path!r}: {e.strerror}") from None


def load(settings: Mapping[str, Any]) -> TlsFiles | None:
    """From config values (grpc.tls.*); None when TLS is off."""
    enabled = settings.get("grpc.tls.enable", False)
    if isinstance(enabled, str):
        enabled = enabled.strip().lower() in ("1", "true", "yes", "on")
    if not enabled:
        return None
    return TlsFiles(
        ca=_read("grpc.tls.ca.file", str(settings.get("grpc.tls.ca.file", ""))),
        cert=_read("grpc.tls.cert.file", str(settings.get("grpc.tls.cert.file", ""))),
        key=_read("grpc.tls.key.file", str(settings.get("grpc.tls.key.file", ""))),
    )


def from_env(environ: Mapping[str, str] | None = None) -> TlsFiles | None:
    env = os.environ if environ is None else environ
    return load(
        {
            key: env.get("KCONTROLLER_" + key.upper().replace(".", "_"), "")
            for key in ("grpc.tls.enable", "grpc.tls.ca.file", "grpc.tls.cert.file", "grpc.tls.key.file")
        }
    )


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials([(tls.key, tls.cert)], root_certificates=tls.ca, require_client_auth=True)


def channel_credentials(tls: TlsFiles) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(root_certificates=tls.ca, private_key=tls.key, certificate_chain=tls.cert)


def aio_channel(address: str, tls: TlsFiles | None, options: Sequence[tuple[str, Any]] = ()) -> grpc.aio.Channel:
    if tls is None:
        return grpc.aio.insecure_channel(address, options=list(options))
    return grpc.aio.secure_channel(address, channel_credentials(tls), options=list(options))


def channel(address: str, tls: TlsFiles | None) -> grpc.Channel:
    if tls is None:
        return grpc.insecure_channel(address)
    return grpc.secure_channel(address, channel_credentials(tls))


def identities(context: Any) -> set[str]:
    """The caller's certificate identities: common name and subject alternative names."""
    auth = context.auth_context() or {}
    names: set[str] = set()
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for value in auth.get(key, []):
            names.add(value.decode() if isinstance(value, bytes) else str(value))
    return names


def parse_identities(text: str) -> frozenset[str] | None:
    """A comma-separated list; empty means any certificate the CA signed."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    return names or None


Behavior = Callable[[Any, Any], Awaitable[Any]]


class Authorizer(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks the caller's identity for the methods in `rules` (full method name or service
    prefix -> allowed identities, None = any certificate). Other methods pass."""

    def __init__(self, rules: Mapping[str, frozenset[str] | None]) -> None:
        self._rules = dict(rules)

    def _allowed(self, method: str) -> tuple[bool, frozenset[str] | None]:
        if method in self._rules:
            return True, self._rules[method]
        for prefix, allowed in self._rules.items():
            if prefix.endswith("/") and method.startswith(prefix):
                return True, allowed
        return False, None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        guarded, allowed = self._allowed(method)
        if handler is None or not guarded or allowed is None or handler.unary_unary is None:
            return handler
        behavior: Behavior = handler.unary_unary

        async def check(request: Any, context: Any) -> Any:
            caller = identities(context)
            if not caller & allowed:
                DENIED.labels(method).inc()
                log.warning(
                    "refused %s from %s: not one of %s", method, sorted(caller) or "(no identity)", sorted(allowed)
                )
                await context.abort(
                    grpc.StatusCode.PERMISSION_DENIED,
                    f"{method} is not allowed for {', '.join(sorted(caller)) or 'this certificate'}",
                )
            return await behavior(request, context)

        return grpc.unary_unary_rpc_method_handler(
            check,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
