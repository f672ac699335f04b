package destination_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/destination"
)

const mqttAddr = "127.0.0.1:1883"

// mqttSubscribe subscribes, QoS 1, to topic on the broker and hands each
// message's envelope to got.
func mqttSubscribe(t *testing.T, broker, topic string, got *consumed, errs chan<- error) {
	t.Helper()
	opts := mqtt.NewClientOptions().AddBroker(broker).SetClientID(unique(t)).SetCleanSession(true)
	cl := mqtt.NewClient(opts)
	tok := cl.Connect()
	require.True(t, tok.WaitTimeout(5*time.Second))
	require.NoError(t, tok.Error())
	t.Cleanup(func() { cl.Disconnect(250) })
	tok = cl.Subscribe(topic, 1, func(_ mqtt.Client, msg mqtt.Message) {
		var env destination.MQTTEnvelope
		if err := json.Unmarshal(msg.Payload(), &env); err != nil {
			errs <- err
			return
		}
		h := map[string]string{destination.HeaderID: env.ID, destination.HeaderTimestamp: env.Timestamp,
			destination.HeaderSignature: env.Signature, destination.HeaderEventType: env.EventType}
		if err := got.add(h, []byte(env.Body)); err != nil {
			select {
			case errs <- err:
			default:
			}
		}
	})
	require.True(t, tok.WaitTimeout(5*time.Second))
	require.NoError(t, tok.Error())
}

func TestMQTTPublishes(t *testing.T) {
	t.Parallel()
	requireRunning(t, "Mosquitto", mqttAddr)
	ns := unique(t)
	topic := "hookdtest/" + ns + "/events"
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	cfg := &destination.MQTTConfig{URL: "tcp://" + mqttAddr, Topic: topic}
	require.NoError(t, cfg.Validate())

	const n = 200
	want := s.messages(ns, n)
	got := newConsumed(t, s, want)
	errs := make(chan error, 1)
	mqttSubscribe(t, "tcp://"+mqttAddr, topic, got, errs)
	publishEach(t, pool, cfg, want)
	got.wait(errs)
}

// TestMQTTOwnBroker runs a Mosquitto of the test's own, with a password
// file, to check refused credentials and a broker stopped.
func TestMQTTOwnBroker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	out, err := exec.Command("mosquitto_passwd", "-b", "-c", passwd, "hookd", "right").CombinedOutput()
	require.NoError(t, err, "%s", out)
	port := freePort(t)
	conf := filepath.Join(dir, "mosquitto.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil,
		"listener %d 127.0.0.1\nallow_anonymous false\npassword_file %s\npersistence false\nlog_dest stderr\nuser root\n", port, passwd), 0o600))
	srv := startProcess(t, "running", "mosquitto", "-c", conf)
	broker := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	m := s.message("own", 0)

	wrong := &destination.MQTTConfig{URL: broker, Topic: "t", Username: "hookd", Password: "wrong"}
	r := publish(pool, wrong, m)
	require.Equal(t, destination.AuthRefused, r.Outcome, "%v", r.Err)

	right := &destination.MQTTConfig{URL: broker, Topic: "t", Username: "hookd", Password: "right"}
	r = publish(pool, right, m)
	require.Equal(t, destination.Confirmed, r.Outcome, "%v", r.Err)

	stopProcess(t, srv)
	requireFailedWithin(t, publishWithin(pool, right, s.message("own", 1)), destination.Unreachable, destination.Timeout)
	requireFailedWithin(t, publishWithin(pool, right, s.message("own", 2)), destination.Unreachable, destination.Timeout)
}

func TestMQTTClassifiesFailures(t *testing.T) {
	t.Parallel()
	s := newSigner(t)
	pool := newPool(t, destination.Deps{})
	m := s.message("fail", 0)
	t.Run("nothing listening", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.MQTTConfig{URL: "tcp://" + closedAddr(t), Topic: "t"}
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Unreachable)
	})
	t.Run("server never answers", func(t *testing.T) {
		t.Parallel()
		cfg := &destination.MQTTConfig{URL: "tcp://" + silentAddr(t), Topic: "t"}
		requireFailedWithin(t, publishWithin(pool, cfg, m), destination.Timeout)
	})
}

// TestMQTTPublishEndsAtItsDeadlineWhileTheWriterIsStuck: paho's Publish
// blocks until the client's writer takes the packet, up to the write
// timeout set at the dial (the pool's dial timeout, 10 s as by default),
// not the attempt's deadline. A broker that answers the CONNECT and then
// reads nothing leaves the writer stuck on a first, large publish; paho
// takes one more packet from behind it, and the third publish's Publish
// blocks. Each must still fail at its own deadline, and the stuck
// connection be dialed anew.
func TestMQTTPublishEndsAtItsDeadlineWhileTheWriterIsStuck(t *testing.T) {
	t.Parallel()
	addr, accepted := mqttDeafBroker(t)
	s := newSigner(t)
	pool := destination.NewPool(destination.PoolConfig{IdleTimeout: time.Minute, DialTimeout: 10 * time.Second}, destination.Deps{})
	t.Cleanup(pool.Close)
	cfg := &destination.MQTTConfig{URL: "tcp://" + addr, Topic: "t"}

	big := s.message("stuck", 0)
	big.Body = []byte(`"` + strings.Repeat("x", 24<<20) + `"`)
	requireFailedWithin(t, publishWithin(pool, cfg, big), destination.Timeout)
	requireFailedWithin(t, publishWithin(pool, cfg, s.message("stuck", 1)), destination.Timeout)
	require.Equal(t, 1, accepted())
	requireFailedWithin(t, publishWithin(pool, cfg, s.message("stuck", 2)), destination.Timeout)
	// The stuck connection was dropped: the next publish dials again.
	requireFailedWithin(t, publishWithin(pool, cfg, s.message("stuck", 3)), destination.Timeout)
	require.Equal(t, 2, accepted(), "the stuck connection was dialed anew")
}

// mqttDeafBroker listens on a port of its own, answers each CONNECT with
// a CONNACK (paho's own packets) and then reads nothing more, so that a
// client's writes stop once the socket's buffers are full. It returns its
// address and how many connections it has accepted.
func mqttDeafBroker(t *testing.T) (string, func() int) {
	t.Helper()
	return loopbackServer(t, func(c net.Conn) {
		if _, err := packets.ReadPacket(c); err != nil {
			return
		}
		_ = packets.NewControlPacket(packets.Connack).Write(c)
	})
}
