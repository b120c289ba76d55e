# syntax=docker/dockerfile:1
# BASE_IMAGE: a Debian bookworm image with Python 3.11 and its venv module. The default is the
# official image; where no registry is reachable, `controller-svc image build` makes one from
# Debian's packages (mmdebstrap) and passes it here (README, "Containers").
ARG BASE_IMAGE=python:3.11-slim-bookworm

# Build stage: generate the protobuf code, build the wheel, install it with its dependencies
# into a virtualenv that the runtime stage copies as it is.
FROM ${BASE_IMAGE} AS build
WORKDIR /src
# Wheels made on the build host (deploy/wheelhouse holds none in the repository). With
# --build-arg PIP_NO_INDEX=1 pip installs only from them: the build needs no network, as in an
# air-gapped pipeline. Without it, pip uses PyPI as usual.
ARG PIP_NO_INDEX
ENV PIP_FIND_LINKS=/wheelhouse \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY deploy/wheelhouse /wheelhouse
COPY deploy/build-requirements.txt /tmp/
RUN python3 -m venv /opt/build \
    && /opt/build/bin/pip install --no-cache-dir -r /tmp/build-requirements.txt
COPY pyproject.toml README.md ./
COPY proto proto
COPY scripts scripts
COPY controller_svc controller_svc
COPY broker_stub broker_stub
RUN /opt/build/bin/python scripts/gen_proto.py \
    && /opt/build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels . \
    && python3 -m venv /opt/kcontroller \
    && /opt/kcontroller/bin/pip install --no-cache-dir /wheels/kcontroller-*.whl

# Runtime stage: the virtualenv, run as a non-root user whose only writable place is its
# home (mount a volume on /var/lib/kcontroller/logs for the state-change log).
FROM ${BASE_IMAGE}
RUN groupadd --system --gid 10001 kcontroller \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/kcontroller --create-home kcontroller \
    && install -d -o 10001 -g 10001 /var/lib/kcontroller/logs
COPY --from=build /opt/kcontroller /opt/kcontroller
ENV PATH=/opt/kcontroller/bin:$PATH
USER 10001
WORKDIR /var/lib/kcontroller
# Controllers: gRPC 9190, metrics 9191. Brokers (entrypoint broker-stub): gRPC 9092, metrics 9093
# (set KCONTROLLER_GRPC_LISTEN, KCONTROLLER_METRICS_LISTEN and KCONTROLLER_HEALTH_ADDRESS).
EXPOSE 9190 9191 9092 9093
ENV KCONTROLLER_GRPC_LISTEN=0.0.0.0:9190 \
    KCONTROLLER_METRICS_LISTEN=0.0.0.0:9191 \
    KCONTROLLER_HEALTH_ADDRESS=127.0.0.1:9190 \
    KCONTROLLER_STATE_CHANGE_LOG_DIR=/var/lib/kcontroller/logs
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s CMD ["controller-svc", "health"]
# Exec form: SIGTERM reaches the process itself, so a controller closes its ZooKeeper
# session (instant failover) and a broker runs its controlled shutdown.
ENTRYPOINT ["controller-svc"]
CMD ["controller"]
