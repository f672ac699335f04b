package dispatcher_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/e2e"
)

func TestMain(m *testing.M) {
	code := m.Run()
	// The dispatcher binaries some tests run as processes of their own.
	e2e.CleanupBinaries()
	if code == 0 {
		// Started by an import's init function (the Pub/Sub client's,
		// through internal/destination), not by a test.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
