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
	)
}
