package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/gomodule/redigo/redis"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/sync/errgroup"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hookd/hookd/internal/delivery/deliverytest"
	"github.com/hookd/hookd/internal/netcut"
)

// S12 compares each destination type with HTTP in one run: a backlog of
// messages drained by one dispatcher (deliveries/s, the broker's
// confirmation counted as the answer), then each type's breaker against
// an outage of its broker. The brokers are this machine's (RabbitMQ,
// NATS with JetStream, Redis, Mosquitto on their standard ports) and the
// test servers their maintainers publish, started here (kfake, pstest).
// SQS is not run: no SQS server runs offline (goaws, the one the module
// proxy serves, speaks only SQS's query protocol, and the AWS SDK its
// JSON protocol).

// outageClass is the outage endpoints' traffic class: a short window so
// that the breaker's reaction is measured in seconds.
var outageClass = map[string]any{
	"name": "bench-outage", "trip": "rate", "failure_rate_threshold": 0.5, "window": "2s", "min_throughput": 5,
	"open_duration": "30s", "half_open_trials": 1, "half_open_concurrency": 1,
}

const (
	outageWindow  = 2 * time.Second
	outageTimeout = time.Second // the outage phase's REQUEST_TIMEOUT
	outageRate    = 50          // messages/s to an outage endpoint
)

// destKind is one destination type's setup in S12.
type destKind struct {
	typ string
	// skip says why the type is not run.
	skip string
	// dest is the throughput endpoints' destination (nil: HTTP).
	dest map[string]any
	// outageDest is the outage endpoint's; cut makes its broker
	// unreachable.
	outageDest map[string]any
	cut        func()
	cleanup    []func()
}

// destTypeResult is one type's figures.
type destTypeResult struct {
	Skipped            string  `json:"skipped,omitempty"`
	Deliveries         int     `json:"deliveries,omitempty"`
	DeliveriesPerS     float64 `json:"deliveries_per_s,omitempty"`
	RatioToHTTP        float64 `json:"ratio_to_http,omitempty"`
	Retried            int     `json:"retried,omitempty"`
	OpenedAfterCutS    float64 `json:"breaker_opened_after_cut_s,omitempty"`
	OpenedAfterFailure float64 `json:"breaker_opened_after_first_failure_s,omitempty"`
	Opened             bool    `json:"breaker_opened"`
	Error              string  `json:"error,omitempty"`
}

// destTypes is S12's order: HTTP first, the reference.
var destTypes = []string{"http", "rabbitmq", "nats", "redis", "mqtt", "kafka", "pubsub", "sqs"}

func runS12(ctx context.Context, b *bench) (*scenarioResult, error) {
	p := b.plan
	fan := 4
	res := &scenarioResult{
		Layout: fmt.Sprintf("per type: a tenant of %d endpoints of the type (HTTP: the receiver, answering 200 at once), and a tenant of 1 endpoint of the type behind something the bench cuts (class bench-outage: 50%% over 2s, min 5)", fan),
		Load: fmt.Sprintf("per type in turn: %d messages (%d deliveries) posted with no dispatcher running, then one dispatcher started and timed until all are delivered; then, one dispatcher (REQUEST_TIMEOUT=%s, BREAKER_FLEET_SUSPECT_SHARE=0) running, %d messages/s to each type's outage endpoint, its broker cut after 2 s",
			p.s12Messages, p.s12Messages*fan, outageTimeout, outageRate),
		Settings: b.river.env(),
	}
	var mu sync.Mutex
	failing := map[string]bool{}
	respond := func(r *deliverytest.Request) deliverytest.Response {
		mu.Lock()
		defer mu.Unlock()
		if failing[r.Path] {
			return deliverytest.Response{Status: http.StatusServiceUnavailable}
		}
		return deliverytest.Response{}
	}
	s, err := b.newStage(ctx, "s12", respond)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := s.client.createClass(ctx, outageClass); err != nil {
		return nil, err
	}
	tag := randomTag()
	kinds := map[string]*destKind{}
	var pubsubHost string
	defer func() {
		for _, k := range kinds {
			for i := len(k.cleanup) - 1; i >= 0; i-- {
				k.cleanup[i]()
			}
		}
	}()
	for _, typ := range destTypes {
		k := &destKind{typ: typ}
		kinds[typ] = k
		if err := setupDest(ctx, k, tag, s, &mu, failing, &pubsubHost); err != nil {
			k.skip = err.Error()
		}
	}
	env := map[string]string{}
	if pubsubHost != "" {
		env["PUBSUB_EMULATOR_HOST"] = pubsubHost
	}

	// The endpoints: a throughput tenant and an outage tenant per type.
	ids := map[string][]string{}
	outageID := map[string]string{}
	for _, typ := range destTypes {
		k := kinds[typ]
		if k.skip != "" {
			continue
		}
		for i := range fan {
			id, err := s.createDestEndpoint(ctx, "s12-"+typ, k.dest, typ, fmt.Sprintf("/%s/%d", typ, i), "")
			if err != nil {
				return res, err
			}
			ids[typ] = append(ids[typ], id)
		}
		id, err := s.createDestEndpoint(ctx, "s12-out-"+typ, k.outageDest, typ, "/outage/"+typ, "bench-outage")
		if err != nil {
			return res, err
		}
		outageID[typ] = id
	}

	types := map[string]*destTypeResult{}
	start := time.Now()
	for _, typ := range destTypes {
		k := kinds[typ]
		r := &destTypeResult{Skipped: k.skip}
		types[typ] = r
		if k.skip != "" {
			continue
		}
		if err := s.drainRun(ctx, r, "s12-"+typ, ids[typ], p.s12Messages, env); err != nil {
			r.Error = err.Error()
		}
	}
	if h := types["http"]; h.DeliveriesPerS > 0 {
		for _, r := range types {
			if r.DeliveriesPerS > 0 {
				r.RatioToHTTP = round3(r.DeliveriesPerS / h.DeliveriesPerS)
			}
		}
	}

	// The bench cuts one type after another with nothing else taking
	// traffic, which the fleet guard would read as hookd's own egress
	// failing (every active endpoint opening): it is off here.
	outEnv := mergeEnv(map[string]string{"REQUEST_TIMEOUT": outageTimeout.String(), "BREAKER_FLEET_SUSPECT_SHARE": "0"}, env)
	if _, err := s.startDispatcher(ctx, outEnv); err != nil {
		return res, err
	}
	for _, typ := range destTypes {
		k, r := kinds[typ], types[typ]
		if k.skip != "" || r.Error != "" {
			continue
		}
		if err := s.outageRun(ctx, r, "s12-out-"+typ, outageID[typ], k.cut); err != nil {
			r.Error = err.Error()
		}
	}
	if err := s.stopDispatchers(); err != nil {
		return res, err
	}
	res.MeasuredS = round1(time.Since(start).Seconds())
	res.Extra = map[string]any{"types": types, "outage_window_s": outageWindow.Seconds(), "fan": fan}
	if h := types["http"]; h != nil {
		res.Deliveries, res.DeliveriesPerS = h.Deliveries, h.DeliveriesPerS
	}
	return res, nil
}

// createDestEndpoint creates an endpoint of typ for tenant (the
// receiver's path for HTTP) and returns its id.
func (s *stage) createDestEndpoint(ctx context.Context, tenant string, dest map[string]any, typ, path, class string) (string, error) {
	body := map[string]any{"tenant_id": tenant, "secret": s.b.secret}
	if typ == "http" {
		body["url"] = s.rcv.url(path)
	} else {
		body["type"], body["destination"] = typ, dest
	}
	if class != "" {
		body["traffic_class"] = class
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return "", fmt.Errorf("encode endpoint: %w", err)
	}
	var out struct {
		ID string `json:"id"`
	}
	if _, err := s.client.do(ctx, http.MethodPost, "/v1/endpoints", raw, &out); err != nil {
		return "", fmt.Errorf("create %s endpoint: %w", typ, err)
	}
	return out.ID, nil
}

// postTo posts n messages to tenant, 32 at a time.
func (s *stage) postTo(ctx context.Context, tenant string, n int) error {
	body, err := json.Marshal(map[string]any{"tenant_id": tenant, "event_type": "bench.s12", "payload": map[string]any{"pad": strings.Repeat("x", max(s.b.opts.payloadBytes-40, 0))}})
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for range n {
		g.Go(func() error {
			_, _, err := s.client.postMessage(gctx, body)
			return err
		})
	}
	return g.Wait()
}

// drainRun posts n messages to tenant (endpoints ids) with no dispatcher
// running, starts one, and times it until every delivery is delivered.
func (s *stage) drainRun(ctx context.Context, r *destTypeResult, tenant string, ids []string, n int, env map[string]string) error {
	if err := s.postTo(ctx, tenant, n); err != nil {
		return err
	}
	want := n * len(ids)
	t0 := time.Now()
	if _, err := s.startDispatcher(ctx, env); err != nil {
		return err
	}
	defer func() { _ = s.stopDispatchers() }()
	ready := time.Now()
	// At least 30 s, in the smoke form too: a first attempt that failed
	// (a broker's first connection on a busy machine) retries after the
	// schedule's 5 s.
	limit := max(s.b.plan.drain, 30*time.Second)
	deadline := ready.Add(limit)
	for {
		var delivered, retried int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'delivered'), count(*) FILTER (WHERE attempt_count > 1)
			FROM deliveries WHERE endpoint_id = ANY($1)`, ids).Scan(&delivered, &retried); err != nil {
			return fmt.Errorf("count deliveries: %w", err)
		}
		if delivered >= want {
			d := time.Since(ready)
			r.Deliveries, r.Retried = delivered, retried
			r.DeliveriesPerS = round1(float64(delivered) / d.Seconds())
			s.b.logger.Info("s12_drained", "type", strings.TrimPrefix(tenant, "s12-"), "deliveries", delivered,
				"seconds", round2(d.Seconds()), "start_s", round2(ready.Sub(t0).Seconds()))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d delivered after %s", delivered, want, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// outageRun offers outageRate messages/s to tenant's one endpoint, cuts
// its broker after 2 s and times the breaker's opening, from the cut and
// from the first failed attempt that ended after it.
func (s *stage) outageRun(ctx context.Context, r *destTypeResult, tenant, id string, cut func()) error {
	body, err := json.Marshal(map[string]any{"tenant_id": tenant, "event_type": "bench.s12", "payload": map[string]any{"n": 1}})
	if err != nil {
		return err
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second / outageRate)
		defer tick.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-tick.C:
			}
			_, _, _ = s.client.postMessage(lctx, body)
		}
	})
	defer func() { stop(); wg.Wait() }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(2 * time.Second):
	}
	var cutAt time.Time
	if err := s.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&cutAt); err != nil {
		return fmt.Errorf("read clock: %w", err)
	}
	cut()
	deadline := time.Now().Add(outageWindow + 15*time.Second)
	for {
		var opened *time.Time
		if err := s.pool.QueryRow(ctx, `SELECT min(at) FROM breaker_transitions WHERE endpoint_id = $1 AND to_state = 'open'`, id).Scan(&opened); err != nil {
			return fmt.Errorf("read transitions: %w", err)
		}
		if opened != nil {
			r.Opened = true
			r.OpenedAfterCutS = round2(opened.Sub(cutAt).Seconds())
			var failed *time.Time
			if err := s.pool.QueryRow(ctx, `SELECT min(attempted_at + duration_ms * interval '1 millisecond') FROM delivery_attempts
				WHERE endpoint_id = $1 AND classification = 'failure' AND attempted_at + duration_ms * interval '1 millisecond' >= $2`, id, cutAt).Scan(&failed); err != nil {
				return fmt.Errorf("read attempts: %w", err)
			}
			if failed != nil {
				r.OpenedAfterFailure = round2(opened.Sub(*failed).Seconds())
			}
			return nil
		}
		if time.Now().After(deadline) {
			return nil // r.Opened stays false: the target says missed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// setupDest prepares type k.typ's broker objects (named after tag, and
// removed by k.cleanup), its throughput and outage destinations and the
// outage's cut; an error says why the type is not run.
func setupDest(ctx context.Context, k *destKind, tag string, s *stage, mu *sync.Mutex, failing map[string]bool, pubsubHost *string) error {
	switch k.typ {
	case "http":
		k.cut = func() { mu.Lock(); failing["/outage/http"] = true; mu.Unlock() }
		return nil
	case "sqs":
		return errors.New("no SQS server runs offline here: goaws v0.4.5, the newest the Go module proxy serves, speaks SQS's query protocol only, and aws-sdk-go-v2's SQS client its JSON protocol")
	case "kafka":
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "hooks"))
		if err != nil {
			return fmt.Errorf("start kfake: %w", err)
		}
		outage, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "hooks"))
		if err != nil {
			cluster.Close()
			return fmt.Errorf("start kfake: %w", err)
		}
		k.cleanup = append(k.cleanup, cluster.Close, outage.Close)
		k.dest = map[string]any{"brokers": cluster.ListenAddrs(), "topic": "hooks"}
		k.outageDest = map[string]any{"brokers": outage.ListenAddrs(), "topic": "hooks"}
		k.cut = outage.Close
		return nil
	case "pubsub":
		srv := pstest.NewServer()
		k.cleanup = append(k.cleanup, func() { _ = srv.Close() })
		const project = "hookd-bench"
		admin, err := pubsub.NewClient(ctx, project, option.WithEndpoint(srv.Addr), option.WithoutAuthentication(),
			option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
		if err != nil {
			return fmt.Errorf("pstest client: %w", err)
		}
		defer admin.Close()
		for _, topic := range []string{"hooks", "outage"} {
			if _, err := admin.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: "projects/" + project + "/topics/" + topic}); err != nil {
				return fmt.Errorf("create topic: %w", err)
			}
		}
		// Every pubsub destination of the dispatcher goes to the one
		// emulator: the outage closes it, after the throughput run.
		*pubsubHost = srv.Addr
		creds := `{"type":"service_account"}`
		k.dest = map[string]any{"project": project, "topic": "hooks", "credentials_json": creds}
		k.outageDest = map[string]any{"project": project, "topic": "outage", "credentials_json": creds}
		k.cut = func() { _ = srv.Close() }
		return nil
	}
	addr := map[string]string{"rabbitmq": "127.0.0.1:5672", "nats": "127.0.0.1:4222", "redis": "127.0.0.1:6379", "mqtt": "127.0.0.1:1883"}[k.typ]
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return fmt.Errorf("%s is not listening on %s", k.typ, addr)
	}
	_ = c.Close()
	proxy, err := netcut.Start(addr)
	if err != nil {
		return err
	}
	k.cleanup = append(k.cleanup, proxy.Close)
	k.cut = proxy.Cut
	switch k.typ {
	case "rabbitmq":
		conn, err := amqp.Dial("amqp://guest:guest@" + addr + "/")
		if err != nil {
			return fmt.Errorf("rabbitmq: %w", err)
		}
		k.cleanup = append(k.cleanup, func() { _ = conn.Close() })
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("rabbitmq channel: %w", err)
		}
		if err := ch.ExchangeDeclare(tag, "direct", false, false, false, false, nil); err != nil {
			return fmt.Errorf("declare exchange: %w", err)
		}
		if _, err := ch.QueueDeclare(tag, false, false, false, false, nil); err != nil {
			return fmt.Errorf("declare queue: %w", err)
		}
		k.cleanup = append(k.cleanup, func() { _, _ = ch.QueueDelete(tag, false, false, false); _ = ch.ExchangeDelete(tag, false, false) })
		if err := ch.QueueBind(tag, "hooks", tag, false, nil); err != nil {
			return fmt.Errorf("bind queue: %w", err)
		}
		k.dest = map[string]any{"url": "amqp://" + addr + "/", "exchange": tag, "routing_key": "hooks", "username": "guest", "password": "guest"}
		k.outageDest = map[string]any{"url": "amqp://" + proxy.Addr() + "/", "exchange": tag, "routing_key": "hooks", "username": "guest", "password": "guest"}
	case "nats":
		nc, err := nats.Connect("nats://" + addr)
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		k.cleanup = append(k.cleanup, nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("jetstream: %w", err)
		}
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: tag, Subjects: []string{tag + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
			return fmt.Errorf("create stream: %w", err)
		}
		k.cleanup = append(k.cleanup, func() { _ = js.DeleteStream(context.Background(), tag) })
		k.dest = map[string]any{"url": "nats://" + addr, "subject": tag + ".hooks"}
		k.outageDest = map[string]any{"url": "nats://" + proxy.Addr(), "subject": tag + ".outage"}
	case "redis":
		rdb, err := redis.DialContext(ctx, "tcp", addr, redis.DialReadTimeout(10*time.Second))
		if err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		k.cleanup = append(k.cleanup, func() { _, _ = rdb.Do("DEL", tag+":hooks", tag+":outage"); _ = rdb.Close() })
		k.dest = map[string]any{"url": "redis://" + addr + "/0", "stream": tag + ":hooks", "max_len": 100000}
		k.outageDest = map[string]any{"url": "redis://" + proxy.Addr() + "/0", "stream": tag + ":outage", "max_len": 100000}
	case "mqtt":
		k.dest = map[string]any{"url": "tcp://" + addr, "topic": tag + "/hooks"}
		k.outageDest = map[string]any{"url": "tcp://" + proxy.Addr(), "topic": tag + "/outage"}
	}
	return nil
}

// randomTag names the run's objects on shared brokers.
func randomTag() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "hookdbench" + hex.EncodeToString(b[:])
}
