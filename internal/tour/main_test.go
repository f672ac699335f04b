package tour_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeSharedBinDir()
	if code == 0 {
		// Started by an import's init function (the Pub/Sub client's,
		// through internal/destination), not by a test.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
