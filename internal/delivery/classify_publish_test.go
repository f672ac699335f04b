package delivery_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/destination"
)

// TestClassifyPublish: a destination's verdicts take the paths of the
// HTTP answers they stand for: confirmed a 2xx, failed a 5xx or a
// transport error (fed to the breaker), the guard's refusal blocked (fed
// to nothing), auth refused a 401/403 (the auth wall).
func TestClassifyPublish(t *testing.T) {
	t.Parallel()
	broker := errors.New("broker said no")
	for _, tc := range []struct {
		res   destination.Result
		class delivery.Classification
		ec    delivery.ErrorClass
	}{
		{destination.Result{Outcome: destination.Confirmed, Ref: "1-0"}, delivery.ClassSuccess, delivery.ErrNone},
		{destination.Result{Outcome: destination.Failed, Reason: destination.Refused, Err: broker}, delivery.ClassFailure, delivery.ErrRefused},
		{destination.Result{Outcome: destination.Failed, Reason: destination.Timeout, Err: broker}, delivery.ClassFailure, delivery.ErrTimeout},
		{destination.Result{Outcome: destination.Failed, Reason: destination.Unreachable, Err: broker}, delivery.ClassFailure, delivery.ErrUnreachable},
		{destination.Result{Outcome: destination.Failed, Reason: destination.Blocked, Err: broker}, delivery.ClassBlocked, delivery.ErrBlocked},
		{destination.Result{Outcome: destination.AuthRefused, Err: broker}, delivery.ClassAuthFailure, delivery.ErrAuthRefused},
	} {
		class, ec := delivery.ClassifyPublish(tc.res)
		require.Equal(t, tc.class, class, "%+v", tc.res)
		require.Equal(t, tc.ec, ec, "%+v", tc.res)
		_, feeds := class.BreakerOutcome()
		require.Equal(t, tc.class != delivery.ClassBlocked, feeds, "%+v", tc.res)
	}
}
