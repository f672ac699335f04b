package destination_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every publisher's Close, and the pool's, waits for what it started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Started by imports' init functions, not by a publisher.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		// The Pub/Sub test's subscriber (a consumer, not a publisher):
		// after Receive returns, its keep-alive goroutine notices the
		// end only at its ticker's next tick.
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
	)
}
