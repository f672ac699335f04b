package e2e

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
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
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			return 1
		}
	}
	return code
}
