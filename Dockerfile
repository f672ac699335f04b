# syntax=docker/dockerfile:1
# One image holds both binaries; docker-compose.yml and deploy/k8s pick one
# per container. The receiver stage is the tour's webhook receiver, for
# docker-compose.yml only: it is never in the shipped image.

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
# The main module replaces the Go client library (which the hookd command
# line uses) with ./sdk/go: go mod download reads its go.mod.
COPY sdk/go/go.mod sdk/go/go.sum ./sdk/go/
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags='-s -w' -o /out/ ./cmd/api ./cmd/dispatcher ./internal/delivery/deliverytest/cmd/receiver

FROM gcr.io/distroless/static-debian12:nonroot AS receiver
COPY --from=build /out/receiver /usr/local/bin/
USER nonroot:nonroot
EXPOSE 9000
CMD ["receiver", "--addr", "0.0.0.0:9000"]

# The last stage is the default target: the image that is shipped.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/dispatcher /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080 9090 9091
CMD ["api", "serve"]
