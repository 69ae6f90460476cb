# Multi-stage build: a static redlockd binary on a distroless base, run as non-root.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /redlockd ./cmd/redlockd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /redlockd /redlockd
USER nonroot:nonroot
EXPOSE 8080
ENTRYPOINT ["/redlockd"]
CMD ["serve"]
