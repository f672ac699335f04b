package api_test

import (
	"flag"
	"testing"

	"go.uber.org/goleak"
)

// apiTestParallel is how many of this package's parallel tests run at once
// unless -test.parallel is given. They spend their time waiting on
// PostgreSQL (a database per test, requests over loopback), not on the CPU,
// so GOMAXPROCS (the default, 2 on a small CI machine) leaves the cores idle
// while the package takes longer than make test's timeout.
const apiTestParallel = "8"

func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", apiTestParallel); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m,
		// Started by an import's init function (the Pub/Sub client's,
		// through internal/destination), not by a test.
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}
