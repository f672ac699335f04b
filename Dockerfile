# syntax=docker/dockerfile:1
# One image holds both binaries; docker-compose.yml picks one per service.

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags='-s -w' -o /out/ ./cmd/api ./cmd/dispatcher

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/api /out/dispatcher /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080 9090 9091
CMD ["api", "serve"]
