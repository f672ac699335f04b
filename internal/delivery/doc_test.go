package delivery_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain is the package's only TestMain: it fails the run when a test leaks
// a goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Started by an import's init function (the Pub/Sub client's,
		// through internal/destination), not by a test.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
