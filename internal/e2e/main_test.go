package e2e

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// e2eTestParallel is how many of this package's parallel tests run at once
// unless -test.parallel is given. Most of a test's time is spent waiting on
// its processes (a breaker's open duration, a rescue, a one-at-a-time FIFO
// queue), not on the CPU, so GOMAXPROCS (2 on a small CI machine) runs
// the package one test's waits after another.
const e2eTestParallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", e2eTestParallel); err != nil {
			panic(err)
		}
	}
	code := 0
	func() {
		defer CleanupBinaries()
		code = goleakRun(m)
	}()
	os.Exit(code)
}

// goleakRun runs the tests, then checks no goroutine outlived them.
func goleakRun(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		// The ignored goroutine is started by an import's init function
		// (the Pub/Sub client's, through internal/destination), not by a
		// test.
		if err := goleak.Find(goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			return 1
		}
	}
	return code
}
