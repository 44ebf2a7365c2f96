# syntax=docker/dockerfile:1
# The image of one service, chosen by build arguments; build from the
# repository root (docs/deploy.md). `docker compose build` builds all eight
# (the seven services and the console) with the arguments
# docker-compose.yml gives each, or one by hand:
#   docker build --build-arg SERVICE=batcher --build-arg GRPC_PORT=7401 \
#     --build-arg METRICS_PORT=9401 -t ingestq/batcher:latest .

FROM golang:1.26-bookworm AS build
# A directory of services/, and the ports its binary listens on by default.
ARG SERVICE
ARG GRPC_PORT
ARG METRICS_PORT
RUN test -n "$SERVICE" -a -n "$GRPC_PORT" -a -n "$METRICS_PORT" || { \
      echo "build with --build-arg SERVICE=<name> GRPC_PORT=<port> METRICS_PORT=<port> (docker-compose.yml has each service's)" >&2; \
      exit 1; }
WORKDIR /src
# Only what the module needs: its go.mod replaces the proto and shared
# modules with ../../proto and ../../shared.
COPY proto/ proto/
COPY shared/ shared/
COPY services/${SERVICE}/ services/${SERVICE}/
WORKDIR /src/services/${SERVICE}
# GOWORK=off: the image builds the module alone, as released, without the
# workspace (whose other modules are not copied). Pure Go, so a static binary.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags='-s -w' -o /out/bin/ingestq .
# The default working storage, owned by nonroot: a named volume mounted on
# /var/lib/ingestq starts as a copy of it, ownership included.
RUN mkdir -p /out/data/work

FROM gcr.io/distroless/static-debian12:nonroot
ARG SERVICE
ARG GRPC_PORT
ARG METRICS_PORT
LABEL org.opencontainers.image.title="ingestq ${SERVICE}"
# One name in every image, since ENTRYPOINT and HEALTHCHECK cannot take a
# build argument.
COPY --from=build /out/bin/ingestq /usr/local/bin/ingestq
COPY --from=build --chown=65532:65532 /out/data /var/lib/ingestq
# nonroot, numeric so that Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
# The built-in defaults listen on 127.0.0.1, unreachable from outside a
# container.
ENV INGESTQ_LISTEN=0.0.0.0:${GRPC_PORT} \
    INGESTQ_METRICS_LISTEN=0.0.0.0:${METRICS_PORT}
# gRPC (health, reflection, PingService, the stage's API) and /metrics.
EXPOSE ${GRPC_PORT} ${METRICS_PORT}
# No shell in the image: the binary probes its own gRPC health (loopback,
# same TLS settings) and exits 0 only when SERVING.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/ingestq", "-check-health"]
ENTRYPOINT ["/usr/local/bin/ingestq"]
