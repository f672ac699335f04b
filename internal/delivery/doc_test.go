package delivery_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain is the package's only TestMain: it fails the run when a test leaks
// a goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
