// Package destination owns the destinations an endpoint may deliver to
// besides an HTTP URL: a customer's broker, queue or stream (RabbitMQ,
// NATS JetStream, Kafka, SQS, Pub/Sub, Redis streams, MQTT). It owns each
// type's configuration and its validation, which of its fields are
// credentials, the publishers built on each system's own client library,
// the pool that keeps one publisher per destination, and the verdict on
// one publish (Result). It signs nothing: a Message carries the Standard
// Webhooks signature the delivery package computed, as for HTTP.
package destination
