# syntax=docker/dockerfile:1
# Build stage: generate the protobuf code and build a wheel.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
# Pinned build tools: the generated code is the same on every build.
RUN pip install --no-cache-dir grpcio-tools==1.85.1 mypy-protobuf==5.1.0 setuptools==84.2.1 wheel==0.48.0
COPY pyproject.toml README.md ./
COPY proto proto
COPY scripts scripts
COPY controller_svc controller_svc
COPY broker_stub broker_stub
RUN python scripts/gen_proto.py && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# Runtime stage: the package and its dependencies, run as a non-root user.
FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --home-dir /var/lib/kcontroller --create-home kcontroller
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 10001
WORKDIR /var/lib/kcontroller
# Controllers: gRPC 9190, metrics 9191. Brokers (entrypoint broker-stub): gRPC 9092, metrics 9093
# (set KCONTROLLER_GRPC_LISTEN, KCONTROLLER_METRICS_LISTEN and KCONTROLLER_HEALTH_ADDRESS).
EXPOSE 9190 9191 9092 9093
ENV KCONTROLLER_GRPC_LISTEN=0.0.0.0:9190 \
    KCONTROLLER_METRICS_LISTEN=0.0.0.0:9191 \
    KCONTROLLER_HEALTH_ADDRESS=127.0.0.1:9190
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s CMD ["controller-svc", "health"]
# Exec form: SIGTERM reaches the process itself, so a controller closes its ZooKeeper
# session (instant failover) and a broker deregisters.
ENTRYPOINT ["controller-svc"]
CMD ["controller"]
