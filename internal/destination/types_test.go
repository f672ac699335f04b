package destination_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/destination"
)

func TestParseNamesTheField(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		typ   destination.Type
		raw   string
		field string // "" when valid
	}{
		{"rabbitmq ok", destination.RabbitMQ, `{"url":"amqp://broker.example:5672/v","exchange":"events","routing_key":"hooks","username":"u","password":"p"}`, ""},
		{"rabbitmq default exchange needs key", destination.RabbitMQ, `{"url":"amqp://broker.example"}`, "destination.routing_key"},
		{"rabbitmq exchange with space", destination.RabbitMQ, `{"url":"amqp://broker.example","exchange":"a b","routing_key":"k"}`, "destination.exchange"},
		{"rabbitmq credentials in url", destination.RabbitMQ, `{"url":"amqp://u:p@broker.example","routing_key":"k"}`, "destination.url"},
		{"rabbitmq bad scheme", destination.RabbitMQ, `{"url":"http://broker.example","routing_key":"k"}`, "destination.url"},
		{"rabbitmq password alone", destination.RabbitMQ, `{"url":"amqp://broker.example","routing_key":"k","password":"p"}`, "destination.username"},
		{"unknown field", destination.RabbitMQ, `{"url":"amqp://broker.example","routing_key":"k","exchnage":"x"}`, "destination.exchnage"},
		{"wrong json type", destination.Redis, `{"url":"redis://r.example","stream":"s","max_len":"big"}`, "destination.max_len"},
		{"missing object", destination.NATS, ``, "destination"},
		{"http has none", destination.HTTP, `{}`, "destination"},
		{"unknown type", destination.Type("smtp"), `{}`, "type"},
		{"nats ok", destination.NATS, `{"url":"nats://n.example:4222","subject":"hooks.acme","token":"t"}`, ""},
		{"nats wildcard", destination.NATS, `{"url":"nats://n.example","subject":"hooks.*"}`, "destination.subject"},
		{"nats token and user", destination.NATS, `{"url":"nats://n.example","subject":"a","token":"t","username":"u","password":"p"}`, "destination.token"},
		{"kafka ok", destination.Kafka, `{"brokers":["k1.example:9092","[::1]:9093"],"topic":"hooks","key_path":"customer.id","sasl_mechanism":"scram-sha-512","username":"u","password":"p"}`, ""},
		{"kafka no port", destination.Kafka, `{"brokers":["k1.example"],"topic":"hooks"}`, "destination.brokers[0]"},
		{"kafka bad topic", destination.Kafka, `{"brokers":["k:9092"],"topic":"a/b"}`, "destination.topic"},
		{"kafka bad key path", destination.Kafka, `{"brokers":["k:9092"],"topic":"t","key_path":"a..b"}`, "destination.key_path"},
		{"kafka bad mechanism", destination.Kafka, `{"brokers":["k:9092"],"topic":"t","sasl_mechanism":"gssapi","username":"u","password":"p"}`, "destination.sasl_mechanism"},
		{"sqs ok fifo", destination.SQS, `{"queue_url":"https://sqs.us-east-1.amazonaws.com/123/q.fifo","region":"us-east-1","message_group_id":"g","access_key_id":"AK","secret_access_key":"SK"}`, ""},
		{"sqs group on standard queue", destination.SQS, `{"queue_url":"https://sqs.us-east-1.amazonaws.com/123/q","region":"us-east-1","message_group_id":"g","access_key_id":"AK","secret_access_key":"SK"}`, "destination.message_group_id"},
		{"sqs bad region", destination.SQS, `{"queue_url":"https://sqs.example/123/q","region":"mars","access_key_id":"AK","secret_access_key":"SK"}`, "destination.region"},
		{"sqs no keys", destination.SQS, `{"queue_url":"https://sqs.example/123/q","region":"us-east-1"}`, "destination.access_key_id"},
		{"sqs bad path", destination.SQS, `{"queue_url":"https://sqs.example/q","region":"us-east-1","access_key_id":"AK","secret_access_key":"SK"}`, "destination.queue_url"},
		{"pubsub ok", destination.PubSub, `{"project":"my-project","topic":"hooks","credentials_json":"{\"type\":\"service_account\"}"}`, ""},
		{"pubsub bad project", destination.PubSub, `{"project":"P","topic":"hooks","credentials_json":"{\"type\":\"service_account\"}"}`, "destination.project"},
		{"pubsub goog topic", destination.PubSub, `{"project":"my-project","topic":"goog-x","credentials_json":"{\"type\":\"service_account\"}"}`, "destination.topic"},
		{"pubsub user credentials", destination.PubSub, `{"project":"my-project","topic":"hooks","credentials_json":"{\"type\":\"authorized_user\"}"}`, "destination.credentials_json"},
		{"redis ok", destination.Redis, `{"url":"rediss://r.example:6380/2","stream":"hooks","max_len":5000,"password":"p"}`, ""},
		{"redis bad db", destination.Redis, `{"url":"redis://r.example/99","stream":"hooks"}`, "destination.url"},
		{"redis max_len too big", destination.Redis, `{"url":"redis://r.example","stream":"hooks","max_len":100000000}`, "destination.max_len"},
		{"redis no stream", destination.Redis, `{"url":"redis://r.example"}`, "destination.stream"},
		{"mqtt ok", destination.MQTT, `{"url":"mqtts://m.example:8883","topic":"hooks/acme","username":"u","password":"p"}`, ""},
		{"mqtt wildcard", destination.MQTT, `{"url":"tcp://m.example","topic":"hooks/#"}`, "destination.topic"},
		{"mqtt port out of range", destination.MQTT, `{"url":"tcp://m.example:70000","topic":"t"}`, "destination.url"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := destination.Parse(tc.typ, []byte(tc.raw))
			if tc.field == "" {
				require.NoError(t, err)
				require.Equal(t, tc.typ, c.Type())
				return
			}
			var fe *destination.FieldError
			require.True(t, errors.As(err, &fe), "want a FieldError, got %v", err)
			require.Equal(t, tc.field, fe.Field, fe.Reason)
		})
	}
}

func TestRedactedHidesEveryCredential(t *testing.T) {
	t.Parallel()
	for _, raw := range []struct {
		typ destination.Type
		raw string
	}{
		{destination.RabbitMQ, `{"url":"amqp://b.example","routing_key":"k","username":"u","password":"secret-1"}`},
		{destination.NATS, `{"url":"nats://b.example","subject":"s","token":"secret-1"}`},
		{destination.Kafka, `{"brokers":["b:9092"],"topic":"t","sasl_mechanism":"plain","username":"u","password":"secret-1"}`},
		{destination.SQS, `{"queue_url":"https://b.example/1/q","region":"us-east-1","access_key_id":"secret-1","secret_access_key":"secret-2"}`},
		{destination.PubSub, `{"project":"my-project","topic":"hooks","credentials_json":"{\"type\":\"service_account\",\"k\":\"secret-1\"}"}`},
		{destination.Redis, `{"url":"redis://b.example","stream":"s","password":"secret-1"}`},
		{destination.MQTT, `{"url":"tcp://b.example","topic":"t","username":"u","password":"secret-1"}`},
	} {
		c, err := destination.Parse(raw.typ, []byte(raw.raw))
		require.NoError(t, err)
		creds := c.Credentials()
		require.NotEmpty(t, creds, raw.typ)
		red := c.Redacted()
		require.Empty(t, red.Credentials(), raw.typ)
		b, err := jsonMarshal(red)
		require.NoError(t, err)
		require.NotContains(t, string(b), "secret-", raw.typ)
		// Sealed credentials make the read config whole again.
		require.Equal(t, c, red.WithCredentials(creds), raw.typ)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("kafka", `{"brokers":["k:9092"],"topic":"t","key_path":"a.b"}`)
	f.Add("redis", `{"url":"redis://r.example/1","stream":"s"}`)
	f.Add("mqtt", `{"url":"tcp://[::1]:1883","topic":"t"}`)
	f.Fuzz(func(t *testing.T, typ, raw string) {
		c, err := destination.Parse(destination.Type(typ), []byte(raw))
		if err != nil {
			var fe *destination.FieldError
			require.True(t, errors.As(err, &fe), "every refusal names a field: %v", err)
			return
		}
		// What Parse accepts validates again after a round trip.
		b, err := jsonMarshal(c)
		require.NoError(t, err)
		_, err = destination.Parse(c.Type(), b)
		require.NoError(t, err)
	})
}

func TestCheckTargetsNamesTheField(t *testing.T) {
	t.Parallel()
	check := func(ctx context.Context, host string) error { return delivery.CheckHost(ctx, nil, host) }
	for _, tc := range []struct {
		typ   destination.Type
		raw   string
		field string
	}{
		{destination.RabbitMQ, `{"url":"amqp://127.0.0.1:5672/","routing_key":"k"}`, "destination.url"},
		{destination.NATS, `{"url":"nats://169.254.169.254","subject":"s"}`, "destination.url"},
		{destination.Kafka, `{"brokers":["93.184.215.14:9092","[::1]:9092"],"topic":"t"}`, "destination.brokers[1]"},
		{destination.SQS, `{"queue_url":"http://10.0.0.8/1/q","region":"us-east-1","access_key_id":"A","secret_access_key":"S"}`, "destination.queue_url"},
		{destination.Redis, `{"url":"redis://0x7f000001","stream":"s"}`, "destination.url"},
		{destination.MQTT, `{"url":"tcp://192.168.1.2","topic":"t"}`, "destination.url"},
		{destination.Kafka, `{"brokers":["93.184.215.14:9092"],"topic":"t"}`, ""},
		{destination.PubSub, `{"project":"my-project","topic":"hooks","credentials_json":"{\"type\":\"service_account\"}"}`, ""},
	} {
		c, err := destination.Parse(tc.typ, []byte(tc.raw))
		require.NoError(t, err)
		err = destination.CheckTargets(context.Background(), c, check)
		if tc.field == "" {
			require.NoError(t, err, tc.raw)
			continue
		}
		var fe *destination.FieldError
		require.True(t, errors.As(err, &fe), "%s: %v", tc.raw, err)
		require.Equal(t, tc.field, fe.Field)
	}
}
