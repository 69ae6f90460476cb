# redlockd: a static binary on a distroless base, run as a non-root user.
#
#   docker build -t redlockd .                      (or --build-arg VERSION=v1.2.3)
#   docker run -p 8080:8080 -e REDLOCKD_REDIS=redis://h1:6379,... redlockd
#
# Every flag has an environment variable twin (redlockd --help); the image
# sets only REDLOCKD_LISTEN, so that the port is reachable from outside the
# container. The health check runs `redlockd probe`, which GETs /healthz on
# the port of REDLOCKD_LISTEN (the image has no shell or curl); it follows
# REDLOCKD_LISTEN and REDLOCKD_TLS_CERT when you change them.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY client/go.mod client/go.sum ./client/
RUN go mod download
COPY . .
# The build context has .git (see .dockerignore), so the go command stamps
# the version (the tag, or a pseudo-version of the commit, +dirty with
# uncommitted changes) and the commit into the binary, as `redlockd version`
# and redlockd_build_info report them; --build-arg VERSION overrides it.
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=true -ldflags "-s -w ${VERSION:+-X main.version=$VERSION}" -o /redlockd ./cmd/redlockd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /redlockd /redlockd
USER nonroot:nonroot
ENV REDLOCKD_LISTEN=0.0.0.0:8080
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/redlockd", "probe"]
ENTRYPOINT ["/redlockd"]
CMD ["serve"]
